// ContextParallelPrefill (zig-zag, causal) on the CPU backends against `reference` over the whole
// prompt, then a decode step over the caches the prefill filled. The bound is the backends' own,
// default_tolerance(bf16, bf16), for decode_test.cc's reasons: f32 partials, an f32 merge, one
// rounding of the output to bf16.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "attnkit/compare.h"
#include "attnkit/context_parallel.h"
#include "attnkit/registry.h"
#include "cp_testing.h"
#include "gpu_test.h"
#include "harness/device_copy.h"
#include "param_name.h"

namespace attnkit {
namespace {

using harness::fill_uniform;
using harness::Staged;

struct PrefillCase {
  std::string backend = "cpu";
  AttentionSpec spec = AttentionSpec::dense(8, 2, 16);
  int num_ranks = 2;
  ShareKind kind = ShareKind::interleaved;
  int page_size = 4;
  std::vector<int64_t> prompt_lens;
  int num_layers = 2;
};

// Rows `rows` of a host array of [*, heads, dim] values, staged for `device` (uploaded).
Staged gather(const Staged& src, const std::vector<int32_t>& rows, int64_t heads, int64_t dim,
              Device device = Device::cpu) {
  Staged out(device, src.host().dtype, {static_cast<int64_t>(rows.size()), heads, dim});
  const size_t row_bytes = static_cast<size_t>(heads * dim) * dtype_size(src.host().dtype);
  for (size_t x = 0; x < rows.size(); ++x) {
    std::memcpy(static_cast<uint8_t*>(out.host_data()) + x * row_bytes,
                static_cast<const uint8_t*>(src.host().data) + static_cast<size_t>(rows[x]) * row_bytes, row_bytes);
  }
  out.upload();
  return out;
}

std::vector<int32_t> all_rows(int64_t n) {
  std::vector<int32_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  return rows;
}

// Runs the prefill on every rank and then one decode step, each against the reference; returns
// the worst relative error and says in `message` where.
double run_prefill_then_decode(const PrefillCase& c, std::string* message) {
  ModelSpec model;
  model.name = "cp";
  model.layers.assign(static_cast<size_t>(c.num_layers), c.spec);
  std::vector<RequestStep> steps;
  int64_t pages = 4;
  for (int64_t len : c.prompt_lens) {
    steps.push_back({.id = -1, .prefix_len = 0, .num_new_tokens = len, .custom_mask = {}});
    pages += (len + 1 + c.page_size - 1) / c.page_size;
  }
  KvCacheConfig cfg = KvCacheConfig::for_spec(c.spec, c.num_layers);
  cfg.page_size = c.page_size;
  cfg.dtype = DType::bf16;
  cfg.num_pages = static_cast<int>(pages);
  const ShareLayout layout{
      .kind = c.kind, .num_ranks = c.num_ranks, .pages_per_run = 2, .rank_num_pages = cfg.num_pages};
  const Device device = Registry::global().get(c.backend).device;  // the ranks'; the reference's is the host
  KvCacheConfig rank_cfg = cfg;
  rank_cfg.device = device;
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<PageAllocator*> allocators;
  for (int r = 0; r < c.num_ranks; ++r) {
    caches.push_back(std::make_unique<KvCache>(rank_cfg));
    caches.back()->allocator().shuffle(77 + static_cast<uint64_t>(r));
    allocators.push_back(&caches.back()->allocator());
  }
  ShardedPageTables tables(allocators, layout, c.page_size);
  const ForwardBatch global = tables.build_batch(steps);
  KvCache ref_cache(cfg);
  const ForwardBatch ref_batch = build_batch(ref_cache, steps);
  auto ref = create_backend("reference", {&model, &ref_cache});
  ref->init_forward_metadata(ref_batch);

  InProcessGroup group(c.num_ranks);
  std::vector<std::unique_ptr<ContextParallelPrefill>> ranks;
  for (int r = 0; r < c.num_ranks; ++r) {
    ranks.push_back(std::make_unique<ContextParallelPrefill>(group.rank(r), c.backend, model,
                                                             *caches[static_cast<size_t>(r)], layout));
    ranks.back()->plan(global);
  }
  double worst = 0.0;
  auto note = [&](const Comparison& cmp, const std::string& where) {
    if (cmp.rel_err < worst) return;
    worst = cmp.rel_err;
    std::ostringstream os;
    os << where << " flat element " << cmp.worst << ": got " << cmp.got << ", reference " << cmp.want;
    *message = os.str();
  };
  const AttentionSpec& s = c.spec;
  const int64_t n = global.num_tokens();
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const cp_testing::LayerInputs in(s, n, 100 + static_cast<uint64_t>(layer) * 3);
    Staged ref_out(Device::cpu, DType::f32, {n, s.num_qo_heads, s.head_dim_vo});
    ref->forward(layer, in.q32.host(), in.k32.host(), in.v32.host(), ref_out.host());
    std::vector<Staged> qs, ks, vs;
    for (int r = 0; r < c.num_ranks; ++r) {
      const std::vector<int32_t>& rows = ranks[static_cast<size_t>(r)]->rows();
      qs.push_back(gather(in.q, rows, s.num_qo_heads, s.head_dim_qk, device));
      ks.push_back(gather(in.k, rows, s.num_kv_heads, s.head_dim_qk, device));
      vs.push_back(gather(in.v, rows, s.num_kv_heads, s.head_dim_vo, device));
      ranks[static_cast<size_t>(r)]->exchange(layer, qs.back().dev(), ks.back().dev(), vs.back().dev());
    }
    for (int r = 0; r < c.num_ranks; ++r) {
      const std::vector<int32_t>& rows = ranks[static_cast<size_t>(r)]->rows();
      Staged out(device, DType::bf16, {static_cast<int64_t>(rows.size()), s.num_qo_heads, s.head_dim_vo});
      out.poison();
      ranks[static_cast<size_t>(r)]->attend(out.dev());
      synchronize(device);
      out.download();
      note(compare(out.host(), gather(ref_out, rows, s.num_qo_heads, s.head_dim_vo).host()),
           "prefill layer " + std::to_string(layer) + " rank " + std::to_string(r));
    }
  }

  // One decode step over what the prefill stored: each rank's share must hold the right K/V.
  std::vector<RequestStep> decode_steps;
  for (RequestId id : global.request_ids)
    decode_steps.push_back({.id = id, .prefix_len = 0, .num_new_tokens = 1, .custom_mask = {}});
  std::vector<RequestStep> ref_steps;
  for (RequestId id : ref_batch.request_ids)
    ref_steps.push_back({.id = id, .prefix_len = 0, .num_new_tokens = 1, .custom_mask = {}});
  const ForwardBatch g2 = tables.build_batch(decode_steps);
  const ForwardBatch r2 = build_batch(ref_cache, ref_steps);
  ref->init_forward_metadata(r2);
  std::vector<std::unique_ptr<AttentionBackend>> backends;
  std::vector<std::unique_ptr<ContextParallelDecode>> decoders;
  for (int r = 0; r < c.num_ranks; ++r) {
    backends.push_back(create_backend(c.backend, {&model, caches[static_cast<size_t>(r)].get()}));
    decoders.push_back(std::make_unique<ContextParallelDecode>(group.rank(r), *backends.back(), layout));
    decoders.back()->plan(g2);
  }
  const int64_t b = g2.batch_size();
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const cp_testing::LayerInputs in(s, b, 200 + static_cast<uint64_t>(layer) * 3);
    Staged ref_out(Device::cpu, DType::f32, {b, s.num_qo_heads, s.head_dim_vo});
    ref->forward(layer, in.q32.host(), in.k32.host(), in.v32.host(), ref_out.host());
    const std::vector<int32_t> rows = all_rows(b);
    const Staged q = gather(in.q, rows, s.num_qo_heads, s.head_dim_qk, device);
    const Staged k = gather(in.k, rows, s.num_kv_heads, s.head_dim_qk, device);
    const Staged v = gather(in.v, rows, s.num_kv_heads, s.head_dim_vo, device);
    for (auto& d : decoders) d->attend(layer, q.dev(), k.dev(), v.dev());
    Staged out(device, DType::bf16, {b, s.num_qo_heads, s.head_dim_vo});
    for (auto& d : decoders) {
      out.poison();
      d->merge(out.dev());
    }
    synchronize(device);
    out.download();
    note(compare(out.host(), ref_out.host()), "decode after prefill layer " + std::to_string(layer));
  }
  return worst;
}

std::string label(const PrefillCase& c) {
  return c.backend + " " + std::to_string(c.num_ranks) + " ranks " +
         (c.kind == ShareKind::contiguous ? "contiguous" : "interleaved");
}

class PrefillCases : public ::testing::TestWithParam<std::tuple<std::string, int, ShareKind>> {};

TEST_P(PrefillCases, MatchesReferenceAndTheDecodeAfterIt) {
  PrefillCase c;
  std::tie(c.backend, c.num_ranks, c.kind) = GetParam();
  // 37 and 50 are no multiple of 2N for any rank count here; 3 leaves most chunks empty.
  c.prompt_lens = {37, 3, 50};
  std::string message;
  EXPECT_LE(run_prefill_then_decode(c, &message), default_tolerance(DType::bf16, DType::bf16))
      << label(c) << ": " << message;
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, PrefillCases,
                         ::testing::Combine(::testing::Values("reference", "cpu"), ::testing::Values(2, 3, 8),
                                            ::testing::Values(ShareKind::contiguous, ShareKind::interleaved)),
                         [](const auto& info) {
                           PrefillCase c;
                           std::tie(c.backend, c.num_ranks, c.kind) = info.param;
                           return attnkit::testing::param_name(label(c));
                         });

TEST(ContextParallelPrefill, Llama3Heads) {
  PrefillCase c;
  c.spec = AttentionSpec::dense(32, 8, 128);
  c.num_ranks = 3;
  c.page_size = 16;
  c.prompt_lens = {250};
  c.num_layers = 1;
  std::string message;
  EXPECT_LE(run_prefill_then_decode(c, &message), default_tolerance(DType::bf16, DType::bf16)) << message;
}

// On one GPU: planned's extend and decode kernels as the ranks (they write the LSE), llama3-8b
// heads, a prompt long enough for whole KV tiles on every rank.
TEST(ContextParallelPrefill, PlannedRanksOnOneGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  for (const ShareKind kind : {ShareKind::contiguous, ShareKind::interleaved}) {
    PrefillCase c;
    c.backend = "planned";
    c.spec = AttentionSpec::dense(32, 8, 128);
    c.num_ranks = 2;
    c.kind = kind;
    c.page_size = 16;
    c.prompt_lens = {1000, 37};
    c.num_layers = 1;
    std::string message;
    EXPECT_LE(run_prefill_then_decode(c, &message), default_tolerance(DType::bf16, DType::bf16))
        << label(c) << ": " << message;
  }
}

TEST(ContextParallelPrefill, RanksWhoseChunksAreAllEmpty) {
  // 3 tokens in 16 chunks: ranks 3..7 hold no token of the prompt, nor compute any row.
  PrefillCase c;
  c.num_ranks = 8;
  c.prompt_lens = {3};
  std::string message;
  EXPECT_LE(run_prefill_then_decode(c, &message), default_tolerance(DType::bf16, DType::bf16)) << message;
}

TEST(ContextParallelPrefill, ZigZagChunks) {
  // 10 tokens in 4 chunks: 3, 3, 2, 2; rank 0 of 2 takes chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(zigzag_chunk_begin(10, 4, 1), 3);
  EXPECT_EQ(zigzag_chunk_begin(10, 4, 2), 6);
  EXPECT_EQ(zigzag_chunk_begin(10, 4, 3), 8);
  EXPECT_EQ(zigzag_chunk_begin(10, 4, 4), 10);
  ForwardBatch b;
  b.qo_indptr = {0, 10};
  EXPECT_EQ(zigzag_rows(b, 2, 0), (std::vector<int32_t>{0, 1, 2, 8, 9}));
  EXPECT_EQ(zigzag_rows(b, 2, 1), (std::vector<int32_t>{3, 4, 5, 6, 7}));
}

TEST(ContextParallelPrefill, RefusesACachedPrefix) {
  const AttentionSpec spec = AttentionSpec::dense(4, 2, 8);
  ModelSpec model;
  model.layers = {spec};
  KvCacheConfig cfg = KvCacheConfig::for_spec(spec);
  cfg.page_size = 4;
  cfg.num_pages = 8;
  KvCache c0(cfg), c1(cfg);
  const ShareLayout layout{.kind = ShareKind::interleaved, .num_ranks = 2, .pages_per_run = 1, .rank_num_pages = 8};
  ShardedPageTables tables({&c0.allocator(), &c1.allocator()}, layout, 4);
  const ForwardBatch g = tables.build_batch({{.id = -1, .prefix_len = 5, .num_new_tokens = 4, .custom_mask = {}}});
  InProcessGroup group(2);
  ContextParallelPrefill p(group.rank(0), "cpu", model, c0, layout);
  try {
    p.plan(g);
    FAIL() << "a cached prefix was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "context parallel prefill: prefix_lens[0] must be 0 (a prompt with nothing cached; a "
                 "cached prefix is not supported yet), got 5");
  }
}

}  // namespace
}  // namespace attnkit
