// ContextParallelPrefill: one rank's zig-zag causal prefill over the all-gathered K/V chunks
// (attnkit/context_parallel.h).
#include <algorithm>
#include <cstring>

#include "attnkit/context_parallel.h"
#include "attnkit/error.h"
#include "attnkit/merge.h"
#include "attnkit/registry.h"
#include "parallel/checks.h"

namespace attnkit {

int64_t zigzag_chunk_begin(int64_t len, int num_chunks, int chunk) {
  const int64_t base = len / num_chunks, longer = len % num_chunks;
  return chunk * base + std::min<int64_t>(chunk, longer);
}

namespace {

constexpr const char* kWho = "context parallel prefill";

// Rank r's two chunks, in the order its rows hold them.
int my_chunk(int num_ranks, int rank, int k) { return k == 0 ? rank : 2 * num_ranks - 1 - rank; }
// The rank holding chunk c, and which of its two chunks c is.
int chunk_rank(int num_ranks, int c) { return c < num_ranks ? c : 2 * num_ranks - 1 - c; }
int chunk_slot(int num_ranks, int c) { return c < num_ranks ? 0 : 1; }

bool same_attention(const AttentionSpec& a, const AttentionSpec& b) {
  return a.num_qo_heads == b.num_qo_heads && a.num_kv_heads == b.num_kv_heads && a.head_dim_qk == b.head_dim_qk &&
         a.head_dim_vo == b.head_dim_vo && a.scale() == b.scale() && a.logits_soft_cap == b.logits_soft_cap &&
         a.causal == b.causal && a.kv_lora_rank == b.kv_lora_rank;
}
}  // namespace

std::vector<int32_t> zigzag_rows(const ForwardBatch& global, int num_ranks, int rank) {
  std::vector<int32_t> rows;
  for (int i = 0; i < global.batch_size(); ++i) {
    for (int k = 0; k < 2; ++k) {
      const int c = my_chunk(num_ranks, rank, k);
      const int64_t len = global.qo_len(i);
      for (int64_t t = zigzag_chunk_begin(len, 2 * num_ranks, c); t < zigzag_chunk_begin(len, 2 * num_ranks, c + 1);
           ++t) {
        rows.push_back(global.qo_indptr[i] + static_cast<int32_t>(t));
      }
    }
  }
  return rows;
}

// What plan() works out once per batch and every layer reuses.
struct ContextParallelPrefill::Plan {
  const ForwardBatch* global = nullptr;
  StoreRoute route;
  std::vector<int64_t> cmax;           // [batch_size] rows a chunk of request i is padded to in the gather
  std::vector<int64_t> gather_row0;    // [batch_size] request i's first padded row in a rank's K (or V) part
  int64_t gather_rows = 0;             // padded rows a rank gives, K part (the V part has as many)
  std::vector<int32_t> chunk_page0;    // [batch_size * 2N] first scratch page of each chunk
  ModelSpec causal_model, full_model;  // one layer each: layer 0's spec, causal and not
  std::unique_ptr<KvCache> scratch;    // the gathered K/V of one layer
  std::unique_ptr<AttentionBackend> causal, full;
  ForwardBatch causal_batch, full_batch;
  std::vector<int32_t> causal_q_rows, full_q_rows;  // this rank's row of each query row of the two batches
  struct Group {                                    // one query chunk of one request: its rows, merged over its parts
    int32_t out_row0 = 0, num_rows = 0;
    std::vector<std::pair<bool, int32_t>> parts;  // (in the causal batch?, its first token there)
  };
  std::vector<Group> groups;
  int layer = -1;
  DType q_dtype = DType::f32;
  std::vector<uint8_t> q_host;      // this rank's q, as given
  std::vector<uint8_t> send, recv;  // the gather, on the host
  Buffer send_dev, recv_dev;        // ... and on the communicator's device where it is not the host
};

ContextParallelPrefill::ContextParallelPrefill(Communicator& comm, const std::string& backend, const ModelSpec& model,
                                               KvCache& cache, const ShareLayout& layout)
    : comm_(comm), backend_name_(backend), model_(model), cache_(cache), layout_(layout) {
  layout_.validate();
  ATTNKIT_CHECK(comm_.size() == layout_.num_ranks, "context parallel prefill: the communicator has ", comm_.size(),
                " ranks, expected the layout's num_ranks (", layout_.num_ranks, ")");
  ATTNKIT_CHECK(cache_.config().num_pages == layout_.rank_num_pages, "context parallel prefill: rank ", comm_.rank(),
                "'s cache has ", cache_.config().num_pages, " pages, expected the layout's rank_num_pages (",
                layout_.rank_num_pages, ")");
  ATTNKIT_CHECK(model_.num_layers() >= 1, "context parallel prefill: the model has no layer");
  for (int l = 0; l < model_.num_layers(); ++l) {
    const AttentionSpec& spec = model_.layer(l);
    const char* why = parallel::why_not_shareable(spec);
    ATTNKIT_CHECK(why == nullptr, "context parallel prefill: layer ", l, " has ", why,
                  ", which a share of the history cannot apply");
    ATTNKIT_CHECK(!spec.is_mla() && spec.causal, "context parallel prefill: layer ", l,
                  " must be causal attention without MLA, got ", spec.describe());
    ATTNKIT_CHECK(same_attention(spec, model_.layer(0)), "context parallel prefill: layer ", l, " (", spec.describe(),
                  ") must have layer 0's spec (", model_.layer(0).describe(), ")");
  }
}

ContextParallelPrefill::~ContextParallelPrefill() = default;

void ContextParallelPrefill::plan(const ForwardBatch& global) {
  plan_.reset();
  const int n = layout_.num_ranks, rank = comm_.rank(), chunks = 2 * n, ps = cache_.config().page_size;
  ATTNKIT_CHECK(global.mode != ForwardMode::decode,
                "context parallel prefill: the batch mode must be extend or mixed, got decode "
                "(ContextParallelDecode runs those)");
  auto p = std::make_unique<Plan>();
  p->route = route_new_tokens(global, layout_, rank);  // checks the batch against the layout
  for (int i = 0; i < global.batch_size(); ++i) {
    ATTNKIT_CHECK(global.prefix_lens[i] == 0, "context parallel prefill: prefix_lens[", i,
                  "] must be 0 (a prompt with nothing cached; a cached prefix is not supported yet), got ",
                  global.prefix_lens[i]);
  }
  const int64_t bs = global.batch_size();
  p->global = &global;
  int32_t pages = 0;
  for (int64_t i = 0; i < bs; ++i) {
    const int64_t len = global.qo_len(static_cast<int>(i));
    p->cmax.push_back((len + chunks - 1) / chunks);
    p->gather_row0.push_back(p->gather_rows);
    p->gather_rows += 2 * p->cmax.back();
    for (int c = 0; c < chunks; ++c) {
      p->chunk_page0.push_back(pages);
      const int64_t size = zigzag_chunk_begin(len, chunks, c + 1) - zigzag_chunk_begin(len, chunks, c);
      pages += static_cast<int32_t>((size + ps - 1) / ps);
    }
  }
  p->chunk_page0.push_back(pages);

  // The two batches over the scratch cache: every (query chunk, KV chunk) pair this rank sees.
  auto size_of = [&](int64_t i, int c) {
    const int64_t len = global.qo_len(static_cast<int>(i));
    return static_cast<int32_t>(zigzag_chunk_begin(len, chunks, c + 1) - zigzag_chunk_begin(len, chunks, c));
  };
  for (ForwardBatch* b : {&p->causal_batch, &p->full_batch}) {
    b->page_size = ps;
    b->qo_indptr = {0};
    b->kv_page_indptr = {0};
  }
  int32_t out_row = 0;
  for (int64_t i = 0; i < bs; ++i) {
    for (int k = 0; k < 2; ++k) {
      const int qc = my_chunk(n, rank, k);
      const int32_t qo_len = size_of(i, qc);
      Plan::Group g{.out_row0 = out_row, .num_rows = qo_len, .parts = {}};
      out_row += qo_len;
      if (qo_len == 0) continue;
      for (int kc = 0; kc <= qc; ++kc) {  // chunks after qc are masked out entirely: skipped
        const int32_t kv_len = size_of(i, kc);
        if (kv_len == 0) continue;
        const bool diagonal = kc == qc;
        ForwardBatch& b = diagonal ? p->causal_batch : p->full_batch;
        std::vector<int32_t>& q_rows = diagonal ? p->causal_q_rows : p->full_q_rows;
        g.parts.emplace_back(diagonal, b.qo_indptr.back());
        const int32_t page0 = p->chunk_page0[static_cast<size_t>(i * chunks + kc)];
        const int32_t num_pages = (kv_len + ps - 1) / ps;
        for (int32_t pg = 0; pg < num_pages; ++pg) b.kv_page_indices.push_back(page0 + pg);
        b.kv_page_indptr.push_back(static_cast<int32_t>(b.kv_page_indices.size()));
        b.kv_last_page_len.push_back((kv_len - 1) % ps + 1);
        // The query rows are the last qo_len of the KV chunk (kv_len >= qo_len: earlier chunks are
        // never shorter); the non-causal backend lets each see the whole chunk.
        b.prefix_lens.push_back(kv_len - qo_len);
        b.qo_indptr.push_back(b.qo_indptr.back() + qo_len);
        for (int32_t t = kv_len - qo_len; t < kv_len; ++t) {
          b.out_cache_loc.push_back(int64_t{page0 + t / ps} * ps + t % ps);
          q_rows.push_back(g.out_row0 + t - (kv_len - qo_len));
        }
      }
      p->groups.push_back(std::move(g));
    }
  }
  p->causal_batch.mode = forward_mode_of(p->causal_batch.qo_indptr);
  p->full_batch.mode = forward_mode_of(p->full_batch.qo_indptr);

  KvCacheConfig cfg = KvCacheConfig::for_spec(model_.layer(0), 1);
  cfg.page_size = ps;
  cfg.num_pages = std::max(pages, 1);
  cfg.dtype = cache_.config().dtype;
  cfg.k_scale = cache_.config().k_scale;
  cfg.v_scale = cache_.config().v_scale;
  cfg.device = cache_.config().device;
  p->scratch = std::make_unique<KvCache>(cfg);
  p->causal_model.name = model_.name + " (causal chunk)";
  p->causal_model.layers = {model_.layer(0)};
  p->full_model.name = model_.name + " (visible chunk)";
  p->full_model.layers = {model_.layer(0)};
  p->full_model.layers[0].causal = false;
  p->causal = create_backend(backend_name_, {&p->causal_model, p->scratch.get()});
  p->full = create_backend(backend_name_, {&p->full_model, p->scratch.get()});
  ATTNKIT_CHECK(p->causal->caps().lse, "context parallel prefill: backend ", p->causal->name(),
                " does not return the LSE, which the merge needs (capabilities().lse is false)");
  if (p->causal_batch.batch_size() > 0) p->causal->init_forward_metadata(p->causal_batch);
  if (p->full_batch.batch_size() > 0) p->full->init_forward_metadata(p->full_batch);
  rows_ = zigzag_rows(global, n, rank);
  plan_ = std::move(p);
}

namespace {
// A host copy of `t`'s bytes.
std::vector<uint8_t> to_host(const TensorView& t) {
  std::vector<uint8_t> bytes(t.nbytes());
  if (!bytes.empty())
    copy(TensorView(bytes.data(), t.dtype, Device::cpu, {t.numel()}),
         TensorView(t.data, t.dtype, t.device, {t.numel()}));
  return bytes;
}
}  // namespace

void ContextParallelPrefill::exchange(int layer, const TensorView& q, const TensorView& k, const TensorView& v) {
  ATTNKIT_CHECK(plan_ != nullptr, "context parallel prefill: plan must be called before exchange");
  ATTNKIT_CHECK(layer >= 0 && layer < model_.num_layers(), "context parallel prefill: layer must be in 0..",
                model_.num_layers() - 1, ", got ", layer);
  Plan& p = *plan_;
  const AttentionSpec& spec = model_.layer(layer);
  const auto rows = static_cast<int64_t>(rows_.size());
  const Device device = cache_.config().device;
  parallel::check_rows(kWho, "q", q, rows, spec.num_qo_heads, spec.head_dim_qk, q.dtype, device);
  parallel::check_rows(kWho, "k", k, rows, spec.num_kv_heads, spec.head_dim_qk, q.dtype, device);
  parallel::check_rows(kWho, "v", v, rows, spec.num_kv_heads, spec.head_dim_vo, q.dtype, device);
  p.q_host = to_host(q);
  const std::vector<uint8_t> k_host = to_host(k), v_host = to_host(v);
  // This rank's part of the gather: K of every request's two chunks, each padded to cmax rows, then V.
  // Row sizes from the spec: a rank whose chunks are all empty gives as many bytes as the others.
  const size_t k_row = static_cast<size_t>(spec.num_kv_heads * spec.head_dim_qk) * dtype_size(q.dtype);
  const size_t v_row = static_cast<size_t>(spec.num_kv_heads * spec.head_dim_vo) * dtype_size(q.dtype);
  const auto padded = static_cast<size_t>(p.gather_rows);
  p.send.assign(padded * (k_row + v_row), 0);
  const int n = layout_.num_ranks, chunks = 2 * n;
  size_t row = 0;
  for (int i = 0; i < p.global->batch_size(); ++i) {
    const int64_t len = p.global->qo_len(i);
    for (int s = 0; s < 2; ++s) {
      const int c = my_chunk(n, comm_.rank(), s);
      const int64_t size = zigzag_chunk_begin(len, chunks, c + 1) - zigzag_chunk_begin(len, chunks, c);
      const auto dst = static_cast<size_t>(p.gather_row0[static_cast<size_t>(i)] + s * p.cmax[static_cast<size_t>(i)]);
      std::memcpy(p.send.data() + dst * k_row, k_host.data() + row * k_row, static_cast<size_t>(size) * k_row);
      std::memcpy(p.send.data() + padded * k_row + dst * v_row, v_host.data() + row * v_row,
                  static_cast<size_t>(size) * v_row);
      row += static_cast<size_t>(size);
    }
  }
  p.recv.assign(p.send.size() * static_cast<size_t>(n), 0);
  if (comm_.device() == Device::cpu) {
    comm_.all_gather_bytes(p.send.data(), p.recv.data(), p.send.size());
  } else {
    if (p.send_dev.nbytes() != p.send.size()) {
      p.send_dev = Buffer(comm_.device(), p.send.size());
      p.recv_dev = Buffer(comm_.device(), p.recv.size());
    }
    p.send_dev.copy_from_host(p.send.data(), p.send.size());
    comm_.all_gather_bytes(p.send_dev.data(), p.recv_dev.data(), p.send.size());
  }
  p.layer = layer;
  p.q_dtype = q.dtype;
}

void ContextParallelPrefill::attend(const TensorView& out) {
  ATTNKIT_CHECK(plan_ != nullptr && plan_->layer >= 0,
                "context parallel prefill: exchange must be called before attend");
  Plan& p = *plan_;
  const AttentionSpec& spec = model_.layer(p.layer);
  const auto rows = static_cast<int64_t>(rows_.size());
  const Device device = cache_.config().device;
  parallel::check_rows(kWho, "out", out, rows, spec.num_qo_heads, spec.head_dim_vo, p.q_dtype, device);
  if (comm_.device() != Device::cpu) {
    synchronize(comm_.device());
    p.recv_dev.copy_to_host(p.recv.data(), p.recv.size());
  }
  const int n = layout_.num_ranks, chunks = 2 * n, ps = cache_.config().page_size;
  const int64_t kv_heads = spec.num_kv_heads, dk = spec.head_dim_qk, dv = spec.head_dim_vo, heads = spec.num_qo_heads;
  const size_t k_row = static_cast<size_t>(kv_heads * dk) * dtype_size(p.q_dtype);
  const size_t v_row = static_cast<size_t>(kv_heads * dv) * dtype_size(p.q_dtype);
  const auto padded = static_cast<size_t>(p.gather_rows);
  const size_t part_bytes = padded * (k_row + v_row);
  // Where the gathered K row of request i's token t is (its V row is at the same row of the V part).
  auto gathered_row = [&](int i, int64_t t, int* from) {
    const int64_t len = p.global->qo_len(i);
    int c = 0;
    while (zigzag_chunk_begin(len, chunks, c + 1) <= t) ++c;
    *from = chunk_rank(n, c);
    return static_cast<size_t>(p.gather_row0[static_cast<size_t>(i)] +
                               chunk_slot(n, c) * p.cmax[static_cast<size_t>(i)] + t -
                               zigzag_chunk_begin(len, chunks, c));
  };
  // K/V rows and their slots, into a cache: every token into the scratch cache, this rank's into its own.
  auto store = [&](KvCache& cache, int layer, const std::vector<std::pair<int, int64_t>>& tokens,
                   const std::vector<int64_t>& slots) {
    if (tokens.empty()) return;
    const auto num = static_cast<int64_t>(tokens.size());
    std::vector<uint8_t> k(static_cast<size_t>(num) * k_row), v(static_cast<size_t>(num) * v_row);
    for (size_t x = 0; x < tokens.size(); ++x) {
      int from = 0;
      const size_t r = gathered_row(tokens[x].first, tokens[x].second, &from);
      const uint8_t* part = p.recv.data() + static_cast<size_t>(from) * part_bytes;
      std::memcpy(k.data() + x * k_row, part + r * k_row, k_row);
      std::memcpy(v.data() + x * v_row, part + padded * k_row + r * v_row, v_row);
    }
    Buffer kb(device, k.size()), vb(device, v.size()), sb(device, slots.size() * sizeof(int64_t));
    kb.copy_from_host(k.data(), k.size());
    vb.copy_from_host(v.data(), v.size());
    sb.copy_from_host(slots.data(), sb.nbytes());
    cache.store(layer, kb.view(p.q_dtype, {num, kv_heads, dk}), vb.view(p.q_dtype, {num, kv_heads, dv}),
                sb.view(DType::i64, {num}));
  };
  std::vector<std::pair<int, int64_t>> all_tokens, own_tokens;
  std::vector<int64_t> all_slots;
  for (int i = 0; i < p.global->batch_size(); ++i) {
    const int64_t len = p.global->qo_len(i);
    for (int c = 0; c < chunks; ++c) {
      const int64_t begin = zigzag_chunk_begin(len, chunks, c);
      const int32_t page0 = p.chunk_page0[static_cast<size_t>(i * chunks + c)];
      for (int64_t t = begin; t < zigzag_chunk_begin(len, chunks, c + 1); ++t) {
        all_tokens.emplace_back(i, t);
        all_slots.push_back(int64_t{page0 + (t - begin) / ps} * ps + (t - begin) % ps);
      }
    }
  }
  for (int32_t token : p.route.token_idx) {
    const auto it = std::upper_bound(p.global->qo_indptr.begin(), p.global->qo_indptr.end(), token);
    const int i = static_cast<int>(it - p.global->qo_indptr.begin()) - 1;
    own_tokens.emplace_back(i, token - p.global->qo_indptr[i]);
  }
  store(cache_, p.layer, own_tokens, p.route.slots);
  store(*p.scratch, 0, all_tokens, all_slots);

  // Each pair's partial state (parallel::partial_dtype).
  const DType part_dtype = parallel::partial_dtype(p.causal->caps(), p.q_dtype);
  const int64_t q_row = heads * dk;
  struct Partial {
    std::vector<float> o, lse;
  };
  auto run = [&](AttentionBackend& backend, const std::vector<int32_t>& q_rows) {
    Partial part;
    const auto num = static_cast<int64_t>(q_rows.size());
    if (num == 0) return part;
    std::vector<uint8_t> q(static_cast<size_t>(num * q_row) * dtype_size(part_dtype));
    for (int64_t x = 0; x < num; ++x) {
      for (int64_t e = 0; e < q_row; ++e) {
        store_from_float(q.data(), part_dtype, x * q_row + e,
                         load_as_float(p.q_host.data(), p.q_dtype, q_rows[static_cast<size_t>(x)] * q_row + e));
      }
    }
    Buffer qb(device, q.size()), ob(device, static_cast<size_t>(num * heads * dv) * dtype_size(part_dtype));
    Buffer lb(device, static_cast<size_t>(num * heads) * sizeof(float));
    qb.copy_from_host(q.data(), q.size());
    backend.forward(0, qb.view(part_dtype, {num, heads, dk}), TensorView(), TensorView(),
                    ob.view(part_dtype, {num, heads, dv}), lb.view(DType::f32, {num, heads}));
    backend.synchronize();
    std::vector<uint8_t> o_bytes(ob.nbytes());
    ob.copy_to_host(o_bytes.data(), o_bytes.size());
    part.o.resize(static_cast<size_t>(num * heads * dv));
    for (size_t e = 0; e < part.o.size(); ++e)
      part.o[e] = load_as_float(o_bytes.data(), part_dtype, static_cast<int64_t>(e));
    part.lse.resize(static_cast<size_t>(num * heads));
    lb.copy_to_host(part.lse.data(), part.lse.size() * sizeof(float));
    return part;
  };
  Partial causal = run(*p.causal, p.causal_q_rows), full = run(*p.full, p.full_q_rows);

  // Each query chunk's rows merged over the KV chunks it sees, then rounded once to q's dtype.
  std::vector<uint8_t> out_host(out.nbytes());
  for (const Plan::Group& g : p.groups) {
    const int64_t m = g.num_rows;
    std::vector<AttentionState> parts;
    for (const auto& [diagonal, token] : g.parts) {
      Partial& src = diagonal ? causal : full;
      parts.push_back({TensorView(src.o.data() + token * heads * dv, DType::f32, Device::cpu, {m, heads, dv}),
                       TensorView(src.lse.data() + token * heads, DType::f32, Device::cpu, {m, heads})});
    }
    std::vector<float> o(static_cast<size_t>(m * heads * dv)), lse(static_cast<size_t>(m * heads));
    merge_states(parts, {TensorView(o.data(), DType::f32, Device::cpu, {m, heads, dv}),
                         TensorView(lse.data(), DType::f32, Device::cpu, {m, heads})});
    for (size_t e = 0; e < o.size(); ++e) {
      store_from_float(out_host.data(), out.dtype, g.out_row0 * heads * dv + static_cast<int64_t>(e), o[e]);
    }
  }
  copy(out, TensorView(out_host.data(), out.dtype, Device::cpu, {rows, heads, dv}));
}

}  // namespace attnkit
