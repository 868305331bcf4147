// ContextParallelPrefill (zig-zag, causal) on the CPU backends against `reference` over the whole
// prompt, then a decode step over the caches the prefill filled. The bound is the backends' own,
// default_tolerance(dtype, dtype), for decode_test.cc's reasons: f32 partials, an f32 merge, one
// rounding of the output to the case's dtype. On one GPU (`planned`), the device step the same
// ways, in bf16 and f16, and the same bits from run to run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "attnkit/compare.h"
#include "attnkit/context_parallel.h"
#include "attnkit/registry.h"
#include "cp_testing.h"
#include "gpu_test.h"
#include "harness/device_copy.h"
#include "param_name.h"
#include "parallel/prefill_plan.h"

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
  DType dtype = DType::bf16;  // q, k, v, the output and every cache
  int runs = 1;               // runs > 1: the prefill planned and run again on the same batch and inputs
};

struct PrefillResult {
  double rel_err = 0.0;  // the worst over the prefill's layers, runs and ranks and the decode after it
  std::string message;   // where, and both values
  bool repeats = true;   // every run's output bit-identical to the first's
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

// Runs the prefill on every rank (c.runs times) and then one decode step, each against the
// reference.
PrefillResult run_prefill_then_decode(const PrefillCase& c) {
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
  cfg.dtype = c.dtype;
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

  // On the backend's device: a GPU rank's step stays there, the all-gather included.
  InProcessGroup group(c.num_ranks, device);
  std::vector<std::unique_ptr<ContextParallelPrefill>> ranks;
  for (int r = 0; r < c.num_ranks; ++r) {
    ranks.push_back(std::make_unique<ContextParallelPrefill>(group.rank(r), c.backend, model,
                                                             *caches[static_cast<size_t>(r)], layout));
  }
  PrefillResult result;
  auto note = [&](const Comparison& cmp, const std::string& where) {
    if (cmp.rel_err < result.rel_err) return;
    result.rel_err = cmp.rel_err;
    std::ostringstream os;
    os << where << " flat element " << cmp.worst << ": got " << cmp.got << ", reference " << cmp.want;
    result.message = os.str();
  };
  const AttentionSpec& s = c.spec;
  const int64_t n = global.num_tokens();
  std::vector<cp_testing::LayerInputs> inputs;
  std::vector<Staged> ref_outs;  // [layer]
  for (int layer = 0; layer < c.num_layers; ++layer) {
    inputs.emplace_back(s, n, 100 + static_cast<uint64_t>(layer) * 3, c.dtype);
    ref_outs.emplace_back(Device::cpu, DType::f32, std::vector<int64_t>{n, s.num_qo_heads, s.head_dim_vo});
    ref->forward(layer, inputs.back().q32.host(), inputs.back().k32.host(), inputs.back().v32.host(),
                 ref_outs.back().host());
  }
  std::vector<std::vector<uint8_t>> first_run;  // [layer * num_ranks + rank] output bytes
  for (int run = 0; run < c.runs; ++run) {
    for (auto& rank : ranks) rank->plan(global);  // a second plan reuses the first's buffers
    for (int layer = 0; layer < c.num_layers; ++layer) {
      const cp_testing::LayerInputs& in = inputs[static_cast<size_t>(layer)];
      const Staged& ref_out = ref_outs[static_cast<size_t>(layer)];
      for (int r = 0; r < c.num_ranks; ++r) {
        const std::vector<int32_t>& rows = ranks[static_cast<size_t>(r)]->rows();
        // Freed when exchange returns: the step must have taken what it needs of them.
        const Staged q = gather(in.q, rows, s.num_qo_heads, s.head_dim_qk, device);
        const Staged k = gather(in.k, rows, s.num_kv_heads, s.head_dim_qk, device);
        const Staged v = gather(in.v, rows, s.num_kv_heads, s.head_dim_vo, device);
        ranks[static_cast<size_t>(r)]->exchange(layer, q.dev(), k.dev(), v.dev());
      }
      for (int r = 0; r < c.num_ranks; ++r) {
        const std::vector<int32_t>& rows = ranks[static_cast<size_t>(r)]->rows();
        Staged out(device, c.dtype, {static_cast<int64_t>(rows.size()), s.num_qo_heads, s.head_dim_vo});
        out.poison();
        ranks[static_cast<size_t>(r)]->attend(out.dev());
        synchronize(device);
        out.download();
        note(compare(out.host(), gather(ref_out, rows, s.num_qo_heads, s.head_dim_vo).host()),
             "run " + std::to_string(run) + " prefill layer " + std::to_string(layer) + " rank " + std::to_string(r));
        const auto* bytes = static_cast<const uint8_t*>(out.host().data);
        const std::vector<uint8_t> got(bytes, bytes + out.host().nbytes());
        if (run == 0) {
          first_run.push_back(got);
        } else {
          result.repeats = result.repeats && got == first_run[static_cast<size_t>(layer * c.num_ranks + r)];
        }
      }
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
    const cp_testing::LayerInputs in(s, b, 200 + static_cast<uint64_t>(layer) * 3, c.dtype);
    Staged ref_out(Device::cpu, DType::f32, {b, s.num_qo_heads, s.head_dim_vo});
    ref->forward(layer, in.q32.host(), in.k32.host(), in.v32.host(), ref_out.host());
    const std::vector<int32_t> rows = all_rows(b);
    const Staged q = gather(in.q, rows, s.num_qo_heads, s.head_dim_qk, device);
    const Staged k = gather(in.k, rows, s.num_kv_heads, s.head_dim_qk, device);
    const Staged v = gather(in.v, rows, s.num_kv_heads, s.head_dim_vo, device);
    for (auto& d : decoders) d->attend(layer, q.dev(), k.dev(), v.dev());
    Staged out(device, c.dtype, {b, s.num_qo_heads, s.head_dim_vo});
    for (auto& d : decoders) {
      out.poison();
      d->merge(out.dev());
    }
    synchronize(device);
    out.download();
    note(compare(out.host(), ref_out.host()), "decode after prefill layer " + std::to_string(layer));
  }
  return result;
}

std::string label(const PrefillCase& c) {
  return c.backend + " " + std::to_string(c.num_ranks) + " ranks " +
         (c.kind == ShareKind::contiguous ? "contiguous" : "interleaved") +
         (c.dtype == DType::bf16 ? "" : " " + std::string(dtype_name(c.dtype)));
}

// The case within the backends' own bound for its dtype, and the same bits on every run.
void expect_matches_reference(const PrefillCase& c) {
  const PrefillResult r = run_prefill_then_decode(c);
  EXPECT_LE(r.rel_err, default_tolerance(c.dtype, c.dtype)) << label(c) << ": " << r.message;
  EXPECT_TRUE(r.repeats) << label(c) << ": a run's output differs from the first run's";
}

class PrefillCases : public ::testing::TestWithParam<std::tuple<std::string, int, ShareKind>> {};

TEST_P(PrefillCases, MatchesReferenceAndTheDecodeAfterIt) {
  PrefillCase c;
  std::tie(c.backend, c.num_ranks, c.kind) = GetParam();
  // 37 and 50 are no multiple of 2N for any rank count here; 3 leaves most chunks empty.
  c.prompt_lens = {37, 3, 50};
  c.runs = 2;
  expect_matches_reference(c);
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
  expect_matches_reference(c);
}

TEST(ContextParallelPrefill, F16OnTheCpuBackend) {
  PrefillCase c;
  c.num_ranks = 3;
  c.prompt_lens = {41, 7};
  c.dtype = DType::f16;
  expect_matches_reference(c);
}

// `planned`'s ranks on one GPU (its extend and decode kernels write the LSE), pages of 16 tokens.
PrefillCase planned_case(const AttentionSpec& spec, int num_ranks, ShareKind kind, std::vector<int64_t> prompt_lens) {
  PrefillCase c;
  c.backend = "planned";
  c.spec = spec;
  c.num_ranks = num_ranks;
  c.kind = kind;
  c.page_size = 16;
  c.prompt_lens = std::move(prompt_lens);
  return c;
}

// On one GPU: llama3-8b heads, a prompt long enough for whole KV tiles on every rank; the device
// step (the group on the GPU).
TEST(ContextParallelPrefill, PlannedRanksOnOneGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  for (const ShareKind kind : {ShareKind::contiguous, ShareKind::interleaved}) {
    PrefillCase c = planned_case(AttentionSpec::dense(32, 8, 128), 2, kind, {1000, 37});
    c.num_layers = 1;
    expect_matches_reference(c);
  }
}

// The device step (plan uploads the index arrays; the rows are gathered, all-gathered, stored and
// merged by kernels, with no host copy between) on one GPU: 2, 3 and 8 ranks on `planned`, both
// layouts, bf16 and f16 (q, k, v, the output and the caches), prompts no 2N divides (3 leaves
// most ranks' chunks empty), planned and run twice over the same batch: the same bits both times.
class ContextParallelPrefillDevice : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(ContextParallelPrefillDevice, MatchesReferenceAndRepeatsBitForBit) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const auto& [num_ranks, dtype] = GetParam();
  for (const ShareKind kind : {ShareKind::contiguous, ShareKind::interleaved}) {
    PrefillCase c = planned_case(AttentionSpec::dense(16, 2, 64), num_ranks, kind, {1000, 37, 3, 250});  // GQA 8
    c.dtype = dtype;
    c.runs = 2;
    expect_matches_reference(c);
  }
}

INSTANTIATE_TEST_SUITE_P(OneGpu, ContextParallelPrefillDevice,
                         ::testing::Combine(::testing::Values(2, 3, 8), ::testing::Values(DType::bf16, DType::f16)),
                         [](const auto& info) {
                           return attnkit::testing::param_name(std::to_string(std::get<0>(info.param)) + " ranks " +
                                                               std::string(dtype_name(std::get<1>(info.param))));
                         });

TEST(ContextParallelPrefill, RanksWhoseChunksAreAllEmpty) {
  // 3 tokens in 16 chunks: ranks 3..7 hold no token of the prompt, nor compute any row.
  PrefillCase c;
  c.num_ranks = 8;
  c.prompt_lens = {3};
  expect_matches_reference(c);
}

TEST(ContextParallelPrefill, DeviceRanksWhoseChunksAreAllEmptyOnOneGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  PrefillCase c = planned_case(AttentionSpec::dense(8, 2, 64), 8, ShareKind::interleaved, {3});
  c.runs = 2;
  expect_matches_reference(c);
}

// Two ranks' caches of a one-layer model, 8 pages of 4 tokens each, interleaved, on `device`.
struct TwoRanks {
  static KvCacheConfig config(const AttentionSpec& spec, Device device) {
    KvCacheConfig cfg = KvCacheConfig::for_spec(spec);
    cfg.page_size = 4;
    cfg.num_pages = 8;
    cfg.device = device;
    return cfg;
  }
  explicit TwoRanks(const AttentionSpec& spec, Device device = Device::cpu)
      : model{.name = "two ranks", .layers = {spec}}, c0(config(spec, device)), c1(config(spec, device)) {}

  ModelSpec model;
  KvCache c0, c1;
  ShareLayout layout{.kind = ShareKind::interleaved, .num_ranks = 2, .pages_per_run = 1, .rank_num_pages = 8};
  ShardedPageTables tables{{&c0.allocator(), &c1.allocator()}, layout, 4};
};

// A GPU rank's gathered K/V and partial states stay on the GPU, so its group must gather there.
TEST(ContextParallelPrefill, RefusesAHostGroupForAGpuCache) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  TwoRanks w(AttentionSpec::dense(8, 2, 64), Device::cuda);
  InProcessGroup group(2);
  try {
    ContextParallelPrefill p(group.rank(0), "planned", w.model, w.c0, w.layout);
    FAIL() << "a host group for a GPU cache was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "context parallel prefill: rank 0's cache is on cuda, so the communicator must gather on cuda "
                 "too, got one on cpu (InProcessGroup(size, Device::cuda), or NCCL)");
  }
}

// The index arrays both paths follow, for 10 tokens over 2 ranks (chunks of 3, 3, 2 and 2 tokens):
// rank 0 gives chunks 0 and 3, each padded to 3 rows; its last query chunk merges the three
// earlier chunks' pairs (the full batch's rows, from row 32) and then its own (the causal one's).
TEST(ContextParallelPrefill, IndexArraysOfOnePrompt) {
  TwoRanks w(AttentionSpec::dense(4, 2, 8));
  const ForwardBatch g = w.tables.build_batch({{.id = -1, .prefix_len = 0, .num_new_tokens = 10, .custom_mask = {}}});
  const parallel::PrefillIndices x = parallel::prefill_indices(g, w.layout, 0, 4);
  EXPECT_EQ(x.gather_rows, 6);
  EXPECT_EQ(x.send_rows, (std::vector<int32_t>{0, 1, 2, 3, 4, -1}));
  // Rank 1's rows start at 6: its chunk 1 (tokens 3..5) then chunk 2 (6, 7).
  std::vector<int32_t> rows = x.kv_rows;
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, (std::vector<int32_t>{0, 1, 2, 3, 4, 6, 7, 8, 9, 10}));
  const StoreRoute route = route_new_tokens(g, w.layout, 0);
  ASSERT_EQ(x.num_stored(), 6);  // pages 0 and 2: tokens 0..3, 8 and 9
  EXPECT_EQ(x.stored_slots, route.slots);
  const std::vector<int32_t> token_row = {0, 1, 2, 6, 7, 8, 9, 10, 3, 4};  // the gathered row of each token
  for (size_t i = 0; i < route.token_idx.size(); ++i) {
    EXPECT_EQ(x.kv_rows[i], token_row[static_cast<size_t>(route.token_idx[i])]) << "stored token " << i;
  }
  EXPECT_EQ(x.num_causal(), 5);
  EXPECT_EQ(x.full_first, 32);
  EXPECT_EQ(x.merge_indptr, (std::vector<int32_t>{0, 1, 2, 3, 7, 11}));
  EXPECT_EQ(x.merge_parts, (std::vector<int32_t>{0, 1, 2, 32, 34, 36, 3, 33, 35, 37, 4}));
  std::vector<int32_t> q_rows = {0, 1, 2, 3, 4};
  q_rows.resize(32, -1);
  q_rows.insert(q_rows.end(), {3, 4, 3, 4, 3, 4});
  EXPECT_EQ(x.q_rows, q_rows);
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
  TwoRanks w(AttentionSpec::dense(4, 2, 8));
  const ForwardBatch g = w.tables.build_batch({{.id = -1, .prefix_len = 5, .num_new_tokens = 4, .custom_mask = {}}});
  InProcessGroup group(2);
  ContextParallelPrefill p(group.rank(0), "cpu", w.model, w.c0, w.layout);
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
