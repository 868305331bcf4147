// CpWorld: N ranks' caches and backends in one process, and the reference over the whole history.
#include "cp_testing.h"

#include <cstring>
#include <sstream>
#include <utility>

#include "harness/device_copy.h"

namespace attnkit::cp_testing {

using harness::fill_uniform;
using harness::Staged;

namespace {
// A copy of host rows on `device` (the host view itself on the CPU).
Staged on_device(Device device, const TensorView& host) {
  std::vector<int64_t> shape;
  for (int i = 0; i < host.rank; ++i) shape.push_back(host.dim(i));
  Staged s(device, host.dtype, shape);
  std::memcpy(s.host_data(), host.data, host.nbytes());
  s.upload();
  return s;
}

enum class Rows { q, k, v, out };

// The world's [batch_size, heads, dim] rows of one kind, in its dtype on its device.
Staged rows(const CpWorld& world, Rows kind) {
  const AttentionSpec& sp = world.c.spec;
  const bool kv = kind == Rows::k || kind == Rows::v;
  const int dim = kind == Rows::q || kind == Rows::k ? sp.head_dim_qk : sp.head_dim_vo;
  return Staged(world.device, world.c.dtype, {world.global.batch_size(), kv ? sp.num_kv_heads : sp.num_qo_heads, dim});
}

Staged random_values(DType dtype, std::vector<int64_t> shape, uint64_t seed, float lo, float hi) {
  Staged s(Device::cpu, dtype, std::move(shape));
  fill_uniform(s.host(), seed, lo, hi);
  return s;
}
}  // namespace

LayerInputs::LayerInputs(const AttentionSpec& spec, int64_t rows, uint64_t seed, DType dtype)
    : q(random_values(dtype, {rows, spec.num_qo_heads, spec.head_dim_qk}, seed + 0, -2.0f, 2.0f)),
      k(random_values(dtype, {rows, spec.num_kv_heads, spec.head_dim_qk}, seed + 1, -1.0f, 1.0f)),
      v(random_values(dtype, {rows, spec.num_kv_heads, spec.head_dim_vo}, seed + 2, -1.0f, 1.0f)),
      q32(harness::widen_to_f32(q)),
      k32(harness::widen_to_f32(k)),
      v32(harness::widen_to_f32(v)) {}

CpWorld::CpWorld(const CpCase& cc) : c(cc) {
  model.name = "cp";
  model.layers.assign(static_cast<size_t>(c.num_layers), c.spec);
  int64_t total_pages = 2;
  std::vector<RequestStep> steps;
  for (int64_t len : c.kv_lens) {
    total_pages += (len + c.page_size - 1) / c.page_size;
    steps.push_back({.id = -1, .prefix_len = len - 1, .num_new_tokens = 1, .custom_mask = {}});
  }
  KvCacheConfig cfg = KvCacheConfig::for_spec(c.spec, c.num_layers);
  cfg.page_size = c.page_size;
  cfg.dtype = c.dtype;
  cfg.num_pages = static_cast<int>(total_pages);  // a rank could hold every page
  layout = {
      .kind = c.kind, .num_ranks = c.num_ranks, .pages_per_run = c.pages_per_run, .rank_num_pages = cfg.num_pages};
  device = Registry::global().get(c.backend).device;  // the ranks' caches; the reference's is on the host
  KvCacheConfig rank_cfg = cfg;
  rank_cfg.device = device;
  std::vector<PageAllocator*> allocators;
  for (int r = 0; r < c.num_ranks; ++r) {
    caches.push_back(std::make_unique<KvCache>(rank_cfg));
    caches.back()->allocator().shuffle(c.seed * 31 + static_cast<uint64_t>(r));  // page tables out of order
    allocators.push_back(&caches.back()->allocator());
  }
  tables = std::make_unique<ShardedPageTables>(allocators, layout, c.page_size);
  global = tables->build_batch(steps);
  ref_cache = std::make_unique<KvCache>(cfg);
  ref_batch = build_batch(*ref_cache, steps);

  // The history (every token before the new ones) into the reference's cache and, each token on
  // the rank of its page, into the ranks' caches: the same f32 values, rounded by the store.
  std::vector<int64_t> ref_slots;
  std::vector<std::vector<int64_t>> rank_rows(static_cast<size_t>(c.num_ranks)), rank_slots(rank_rows.size());
  for (int i = 0; i < global.batch_size(); ++i) {
    for (int64_t t = 0; t < global.prefix_lens[i]; ++t) {
      const int64_t row = static_cast<int64_t>(ref_slots.size());
      ref_slots.push_back(ref_batch.slot(i, t));
      const int32_t page = global.kv_page_indices[global.kv_page_indptr[i] + t / c.page_size];
      const auto r = static_cast<size_t>(layout.rank_of_page(page));
      rank_rows[r].push_back(row);
      rank_slots[r].push_back(int64_t{layout.local_page(page)} * c.page_size + t % c.page_size);
    }
  }
  const auto num_rows = static_cast<int64_t>(ref_slots.size());
  const int kv_heads = c.spec.num_kv_heads, dk = c.spec.head_dim_qk, dv = c.spec.head_dim_vo;
  for (int layer = 0; layer < c.num_layers && num_rows > 0; ++layer) {
    std::vector<float> k(static_cast<size_t>(num_rows * kv_heads * dk)),
        v(static_cast<size_t>(num_rows * kv_heads * dv));
    fill_uniform(TensorView(k.data(), DType::f32, Device::cpu, {static_cast<int64_t>(k.size())}),
                 c.seed * 7 + layer * 2, -1, 1);
    fill_uniform(TensorView(v.data(), DType::f32, Device::cpu, {static_cast<int64_t>(v.size())}),
                 c.seed * 7 + layer * 2 + 1, -1, 1);
    // MLA: the latent is K alone (V is its front), so the stores take no V.
    const bool mla = c.spec.is_mla();
    ref_cache->store(layer, TensorView(k.data(), DType::f32, Device::cpu, {num_rows, kv_heads, dk}),
                     mla ? TensorView() : TensorView(v.data(), DType::f32, Device::cpu, {num_rows, kv_heads, dv}),
                     TensorView(ref_slots.data(), DType::i64, Device::cpu, {num_rows}));
    for (size_t r = 0; r < rank_rows.size(); ++r) {
      const auto n = static_cast<int64_t>(rank_rows[r].size());
      if (n == 0) continue;
      std::vector<float> kr, vr;
      for (int64_t row : rank_rows[r]) {
        kr.insert(kr.end(), k.begin() + row * kv_heads * dk, k.begin() + (row + 1) * kv_heads * dk);
        vr.insert(vr.end(), v.begin() + row * kv_heads * dv, v.begin() + (row + 1) * kv_heads * dv);
      }
      const Staged k_r = on_device(device, TensorView(kr.data(), DType::f32, Device::cpu, {n, kv_heads, dk}));
      const Staged v_r = on_device(device, TensorView(vr.data(), DType::f32, Device::cpu, {n, kv_heads, dv}));
      const Staged slots_r = on_device(device, TensorView(rank_slots[r].data(), DType::i64, Device::cpu, {n}));
      caches[r]->store(layer, k_r.dev(), mla ? TensorView() : v_r.dev(), slots_r.dev());
      synchronize(device);
    }
  }

  group = std::make_unique<InProcessGroup>(c.num_ranks, device);  // a GPU rank's states stay on the GPU
  for (int r = 0; r < c.num_ranks; ++r) {
    backends.push_back(create_backend(c.backend, {&model, caches[static_cast<size_t>(r)].get()}));
    ranks.push_back(std::make_unique<ContextParallelDecode>(group->rank(r), *backends.back(), layout));
    ranks.back()->plan(global);
  }
  ref = create_backend("reference", {&model, ref_cache.get()});
  ref->init_forward_metadata(ref_batch);
}

CpWorld::Step CpWorld::step() {
  Step s;
  const int64_t n = global.batch_size();
  const AttentionSpec& sp = c.spec;
  StepBuffers io(*this);
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const LayerInputs in(sp, n, c.seed * 1000003 + static_cast<uint64_t>(layer) * 4, c.dtype);
    Staged ref_out(Device::cpu, DType::f32, {n, sp.num_qo_heads, sp.head_dim_vo});
    ref_out.poison();
    ref->forward(layer, in.q32.host(), in.k32.host(), sp.is_mla() ? TensorView() : in.v32.host(), ref_out.host());

    io.load(in);
    io.poison_outputs();
    run_layer(layer, io);
    const std::vector<std::vector<uint8_t>> outs = io.download_outputs();
    const Comparison cmp = compare(io.outs[0].host(), ref_out.host());
    if (cmp.rel_err >= s.rel_err) {
      s.rel_err = cmp.rel_err;
      std::ostringstream os;
      os << "layer " << layer << " flat element " << cmp.worst << ": got " << cmp.got << ", reference " << cmp.want;
      s.message = os.str();
    }
    s.outputs.push_back(outs[0]);
    for (const auto& o : outs) s.ranks_agree = s.ranks_agree && o == outs[0];
  }
  return s;
}

void CpWorld::run_layer(int layer, StepBuffers& io) {
  const TensorView v = c.spec.is_mla() ? TensorView() : io.v.dev();  // MLA: the new latent is k alone
  for (auto& rank : ranks) rank->attend(layer, io.q.dev(), io.k.dev(), v);
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r]->merge(io.outs[r].dev());
}

StepBuffers::StepBuffers(const CpWorld& world)
    : q(rows(world, Rows::q)), k(rows(world, Rows::k)), v(rows(world, Rows::v)) {
  for (int r = 0; r < world.c.num_ranks; ++r) outs.push_back(rows(world, Rows::out));
}

void StepBuffers::load(const LayerInputs& in) {
  for (auto [dst, src] : {std::pair{&q, &in.q}, std::pair{&k, &in.k}, std::pair{&v, &in.v}}) {
    std::memcpy(dst->host_data(), src->host().data, src->host().nbytes());
    dst->upload();
  }
}

void StepBuffers::poison_outputs() {
  for (auto& o : outs) o.poison();
}

std::vector<std::vector<uint8_t>> StepBuffers::download_outputs() {
  synchronize(q.dev().device);
  std::vector<std::vector<uint8_t>> bytes;
  for (auto& o : outs) {
    o.download();
    const auto* data = static_cast<const uint8_t*>(o.host().data);
    bytes.emplace_back(data, data + o.host().nbytes());
  }
  return bytes;
}

std::vector<uint8_t> CpWorld::cache_bytes() const {
  std::vector<uint8_t> bytes;
  for (const auto& cache : caches) {
    for (int layer = 0; layer < c.num_layers; ++layer) {
      for (const TensorView& pool : {cache->k_pool_view(layer), cache->v_pool_view(layer)}) {
        const auto nbytes = static_cast<int64_t>(pool.nbytes());
        std::vector<uint8_t> host(static_cast<size_t>(nbytes));
        copy(TensorView(host.data(), DType::u8, Device::cpu, {nbytes}),
             TensorView(pool.data, DType::u8, pool.device, {nbytes}));
        bytes.insert(bytes.end(), host.begin(), host.end());
      }
    }
  }
  return bytes;
}

}  // namespace attnkit::cp_testing
