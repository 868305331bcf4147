// ContextParallelDecode on the CPU backends against `reference` over the unsharded history: 2, 3
// and 8 ranks, both share layouts, lengths that the ranks do not divide, empty shares, GQA
// (llama3-8b's heads and small ones), a bf16 cache; bit-identical on every rank and run to run.
// Absorbed MLA on `cpu` and, on one GPU, on `mla`. On one GPU (`planned`), the device step the
// same ways, in bf16 and f16, and captured in a CUDA graph.
//
// The bound is default_tolerance(bf16, bf16), the one the backends' own tests use (4 units of
// bf16 roundoff of max|reference|): every rank reads the same rounded q and cache bytes as the
// reference, computes its share's partial state in f32 (the CPU backends take the widened q), the
// merge is in f32 (a convex combination of the partials: f32 rounding, no growth), and the only
// bf16 rounding is the merged output's, one unit at most.
#include <gtest/gtest.h>

#include <cmath>

#include "cp_testing.h"
#include "core/captured_graph.h"
#include "gpu_test.h"
#include "param_name.h"

namespace attnkit {
namespace {

using cp_testing::CpCase;
using cp_testing::CpWorld;

void expect_matches_reference(const CpCase& c) {
  CpWorld world(c);
  const CpWorld::Step s = world.step();
  const double tolerance = default_tolerance(c.dtype, c.dtype);
  EXPECT_LE(s.rel_err, tolerance) << c.label << ": " << s.message;
  EXPECT_TRUE(s.ranks_agree) << c.label << ": the ranks' merged outputs differ";
}

CpCase small_case(const std::string& backend, int num_ranks, ShareKind kind) {
  CpCase c;
  c.backend = backend;
  c.spec = AttentionSpec::dense(8, 2, 16);  // GQA 4
  c.num_ranks = num_ranks;
  c.kind = kind;
  c.page_size = 4;
  // Length 1 and 6 leave most ranks an empty share; 23 and 41 are no multiple of any rank count or
  // of the page size.
  c.kv_lens = {1, 23, 6, 41};
  c.label = backend + " " + std::to_string(num_ranks) + " ranks " +
            (kind == ShareKind::contiguous ? "contiguous" : "interleaved");
  return c;
}

// small_case on `planned` (head dims 64, 128 or 256), pages of 16.
CpCase planned_case(int num_ranks, ShareKind kind, int head_dim, std::vector<int64_t> kv_lens) {
  CpCase c = small_case("planned", num_ranks, kind);
  c.spec = AttentionSpec::dense(8, 2, head_dim);
  c.page_size = 16;
  c.kv_lens = std::move(kv_lens);
  return c;
}

// Every request of `c` (8 ranks, interleaved) fits in its first page: ranks 1..7 hold nothing,
// plan no backend work and store nothing, and their states (all empty) merge with rank 0's.
void expect_ranks_with_nothing_give_empty_states(const CpCase& c) {
  CpWorld world(c);
  for (int r = 1; r < 8; ++r) {
    EXPECT_EQ(world.ranks[static_cast<size_t>(r)]->share().batch.batch_size(), 0) << r;
    EXPECT_TRUE(world.ranks[static_cast<size_t>(r)]->share().store.token_idx.empty()) << r;
  }
  EXPECT_EQ(world.ranks[0]->share().batch.batch_size(), 3);
  const CpWorld::Step s = world.step();
  EXPECT_LE(s.rel_err, default_tolerance(c.dtype, c.dtype)) << s.message;
  EXPECT_TRUE(s.ranks_agree);
}

class SmallCases : public ::testing::TestWithParam<std::tuple<std::string, int, ShareKind>> {};

TEST_P(SmallCases, MatchesReference) {
  const auto& [backend, num_ranks, kind] = GetParam();
  expect_matches_reference(small_case(backend, num_ranks, kind));
}

INSTANTIATE_TEST_SUITE_P(
    CpuBackends, SmallCases,
    ::testing::Combine(::testing::Values("reference", "cpu"), ::testing::Values(2, 3, 8),
                       ::testing::Values(ShareKind::contiguous, ShareKind::interleaved)),
    [](const auto& info) {
      return attnkit::testing::param_name(
          small_case(std::get<0>(info.param), std::get<1>(info.param), std::get<2>(info.param)).label);
    });

// Absorbed MLA (a latent of 64 + 16 values, one KV head, 8 query heads): each rank attends its
// share of the latent history, the states merged as for GQA.
TEST(ContextParallelDecode, MlaOnTheCpuBackend) {
  for (const ShareKind kind : {ShareKind::contiguous, ShareKind::interleaved}) {
    for (const int ranks : {2, 3}) {
      CpCase c;
      c.spec = AttentionSpec::mla(8, 64, 16, 1.0f / std::sqrt(80.0f));
      c.num_ranks = ranks;
      c.kind = kind;
      c.pages_per_run = 2;
      c.page_size = 8;
      c.kv_lens = {97, 1, 33};
      c.label = "mla " + std::to_string(ranks) + " ranks " + (kind == ShareKind::contiguous ? "contiguous" : "interleaved");
      expect_matches_reference(c);
    }
  }
}

// On one GPU: the ranks' shares run one after another on `mla` (DeepSeek's 512 + 64 latent, 16
// heads, pages of 64; its kernels return the LSE), long enough that its plan splits them.
TEST(ContextParallelDecode, MlaRanksOnOneGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const std::string why = Registry::global().get("mla").why_unavailable();
  if (!why.empty()) GTEST_SKIP() << "mla: " << why;
  for (const ShareKind kind : {ShareKind::contiguous, ShareKind::interleaved}) {
    CpCase c;
    c.backend = "mla";
    c.spec = AttentionSpec::mla(16, 512, 64, 1.0f / std::sqrt(192.0f));
    c.num_ranks = 3;
    c.kind = kind;
    c.pages_per_run = 4;
    c.page_size = 64;
    c.kv_lens = {4097, 301, 17};
    c.num_layers = 1;
    c.label = std::string("mla 3 ranks ") + (kind == ShareKind::contiguous ? "contiguous" : "interleaved");
    expect_matches_reference(c);
  }
}

TEST(ContextParallelDecode, Llama3HeadsOnTheCpuBackend) {
  for (const ShareKind kind : {ShareKind::contiguous, ShareKind::interleaved}) {
    CpCase c;
    c.spec = AttentionSpec::dense(32, 8, 128);
    c.num_ranks = 3;
    c.kind = kind;
    c.pages_per_run = 3;
    c.page_size = 16;
    c.kv_lens = {301, 17};
    c.num_layers = 1;
    c.label = kind == ShareKind::contiguous ? "llama3 heads contiguous" : "llama3 heads interleaved";
    expect_matches_reference(c);
  }
}

// On one GPU: the ranks' shares run one after another on `planned` (its decode kernel writes the
// LSE), llama3-8b heads, long enough histories that the kernel splits them; the partial outputs are
// bf16 (planned takes bf16 q), one more rounding than on the CPU backends, within the same bound.
TEST(ContextParallelDecode, PlannedRanksOnOneGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  for (const ShareKind kind : {ShareKind::contiguous, ShareKind::interleaved}) {
    for (const int ranks : {2, 3}) {
      CpCase c;
      c.backend = "planned";
      c.spec = AttentionSpec::dense(32, 8, 128);
      c.num_ranks = ranks;
      c.kind = kind;
      c.pages_per_run = 4;
      c.page_size = 16;
      c.kv_lens = {4097, 301, 17, 1};
      c.label = "planned " + std::to_string(ranks) + " ranks " +
                (kind == ShareKind::contiguous ? "contiguous" : "interleaved");
      expect_matches_reference(c);
    }
  }
}

// The device step (the ranks' index arrays uploaded at plan, the rows gathered, the states sent,
// all-gathered and merged by kernels, with no host copy between) on one GPU: 2, 3 and 8 ranks on
// `planned`, both layouts, bf16 and f16 (q, k, v, the output and the caches), lengths no rank
// count divides (1 and 17 leave most ranks an empty share of their request), every rank's output
// the same bits; within the bound of PlannedRanksOnOneGpu, in the case's dtype.
class DeviceSteps : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(DeviceSteps, MatchReferenceAlikeOnEveryRank) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const auto& [ranks, dtype] = GetParam();
  for (const ShareKind kind : {ShareKind::contiguous, ShareKind::interleaved}) {
    CpCase c;
    c.backend = "planned";
    c.spec = AttentionSpec::dense(16, 2, 64);  // GQA 8
    c.num_ranks = ranks;
    c.kind = kind;
    c.pages_per_run = 3;
    c.page_size = 16;
    c.kv_lens = {1000, 17, 301, 1, 46};
    c.dtype = dtype;
    c.label = "planned " + std::to_string(ranks) + " ranks " + std::string(dtype_name(dtype)) +
              (kind == ShareKind::contiguous ? " contiguous" : " interleaved");
    expect_matches_reference(c);
  }
}

INSTANTIATE_TEST_SUITE_P(OneGpu, DeviceSteps, ::testing::Combine(::testing::Values(2, 3, 8),
                                                                 ::testing::Values(DType::bf16, DType::f16)),
                         [](const auto& info) {
                           return attnkit::testing::param_name(std::to_string(std::get<0>(info.param)) + " ranks " +
                                                               std::string(dtype_name(std::get<1>(info.param))));
                         });

TEST(ContextParallelDecode, DeviceRanksWithNothingAtAllOnOneGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  expect_ranks_with_nothing_give_empty_states(planned_case(8, ShareKind::interleaved, 64, {3, 1, 16}));
}

// The device buffers sized at plan serve every layer and a second step, and a second plan of the
// same batch reuses them: the same bits each time.
TEST(ContextParallelDecode, DeviceStepsRepeatBitForBitOnOneGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  CpWorld world(planned_case(3, ShareKind::contiguous, 128, {97, 1, 260}));
  const CpWorld::Step a = world.step();
  for (auto& rank : world.ranks) rank->plan(world.global);
  const CpWorld::Step b = world.step();
  EXPECT_TRUE(a.ranks_agree && b.ranks_agree);
  EXPECT_EQ(a.outputs, b.outputs);
}

// Elements of 16 bits where `a` and `b` differ, and those of `a` still holding the poison.
struct BitDiff {
  size_t differ = 0, poisoned = 0;
};
BitDiff bit_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  BitDiff d;
  for (size_t i = 0; i + 1 < a.size(); i += 2) {
    d.differ += i + 1 >= b.size() || a[i] != b[i] || a[i + 1] != b[i + 1];
    d.poisoned += a[i] == 0xFF && a[i + 1] == 0xFF;
  }
  return d;
}

// One layer of the device step captured in a CUDA graph, as an engine replays a decode step:
// every rank's attend, then every rank's merge, captured after the plan and one eager step (which
// sizes the in-process group's gather buffer and sets up the backends' launches), replayed on new
// q, k, v written into the captured buffers. The same bits as an eager step on those inputs, on
// every rank. The graph replays the plan it was captured under, so the backends need no graph
// state of their own (init_cuda_graph_state is for replaying later plans).
TEST(ContextParallelDecode, DeviceStepCapturedInACudaGraphReplaysNewInputs) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  // Runs of two pages of 16: rank 2 holds two of the four requests and stores no new token.
  CpWorld world(planned_case(3, ShareKind::contiguous, 128, {97, 1, 250, 33}));
  ASSERT_EQ(world.ranks[2]->share().batch.batch_size(), 2);
  ASSERT_TRUE(world.ranks[2]->share().store.token_idx.empty());
  const int64_t n = world.global.batch_size();
  const int layer = 1;
  cp_testing::StepBuffers io(world);
  io.load(cp_testing::LayerInputs(world.c.spec, n, 11, world.c.dtype));
  world.run_layer(layer, io);
  const std::vector<std::vector<uint8_t>> warm_up = io.download_outputs();

  cuda::CapturedGraph graph;
  graph.capture([&] { world.run_layer(layer, io); });
  io.load(cp_testing::LayerInputs(world.c.spec, n, 12, world.c.dtype));
  io.poison_outputs();
  graph.replay();
  const std::vector<std::vector<uint8_t>> replayed = io.download_outputs();
  io.poison_outputs();
  world.run_layer(layer, io);
  const std::vector<std::vector<uint8_t>> eager = io.download_outputs();

  for (size_t r = 0; r < replayed.size(); ++r) {
    const BitDiff d = bit_diff(replayed[r], eager[r]);
    EXPECT_EQ(d.differ, 0u) << "rank " << r << ": replay and eager step differ in " << d.differ << " of "
                            << replayed[r].size() / 2 << " elements";
    EXPECT_EQ(d.poisoned, 0u) << "rank " << r << ": the replay left " << d.poisoned << " elements unwritten";
    EXPECT_EQ(bit_diff(replayed[r], replayed[0]).differ, 0u) << "rank " << r << "'s replayed output is not rank 0's";
  }
  EXPECT_GT(bit_diff(replayed[0], warm_up[0]).differ, 0u) << "the replay did not read the new q, k, v";
}

// A GPU rank's states stay on the GPU, so its group must gather there.
TEST(ContextParallelDecode, RefusesAHostGroupForAGpuBackend) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  CpWorld world(planned_case(2, ShareKind::contiguous, 64, {23, 6}));
  InProcessGroup host_group(2);
  try {
    ContextParallelDecode cp(host_group.rank(0), *world.backends[0], world.layout);
    FAIL() << "a host group for a GPU backend was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "context parallel decode: backend planned runs on cuda, so the communicator must gather on cuda "
                 "too, got one on cpu (InProcessGroup(size, Device::cuda), or NCCL)");
  }
}

TEST(ContextParallelDecode, PageSizeOneAndMqa) {
  CpCase c = small_case("cpu", 3, ShareKind::contiguous);
  c.spec = AttentionSpec::dense(4, 1, 32);
  c.page_size = 1;
  c.pages_per_run = 5;
  c.kv_lens = {2, 16, 9};
  c.label = "page 1 mqa";
  expect_matches_reference(c);
}

TEST(ContextParallelDecode, RanksWithNothingAtAllGiveEmptyStates) {
  CpCase c = small_case("cpu", 8, ShareKind::interleaved);
  c.kv_lens = {3, 1, 4};
  expect_ranks_with_nothing_give_empty_states(c);
}

TEST(ContextParallelDecode, SameBitsRunToRunWithOneLayout) {
  const CpCase c = small_case("cpu", 3, ShareKind::interleaved);
  const CpWorld::Step a = CpWorld(c).step();
  const CpWorld::Step b = CpWorld(c).step();
  EXPECT_EQ(a.outputs, b.outputs);
}

TEST(ContextParallelDecode, StoresEachNewTokenOnItsRankOnly) {
  CpCase c = small_case("cpu", 3, ShareKind::interleaved);
  CpWorld world(c);
  const std::vector<uint8_t> before = world.cache_bytes();
  world.step();
  // The new token of request i sits at position kv_len - 1, on page (kv_len - 1) / 4.
  int stored = 0;
  for (int r = 0; r < 3; ++r) {
    const LocalShare& share = world.ranks[static_cast<size_t>(r)]->share();
    for (int32_t t : share.store.token_idx) {
      EXPECT_EQ(world.layout.owner((c.kv_lens[static_cast<size_t>(t)] - 1) / c.page_size), r) << t;
      ++stored;
    }
  }
  EXPECT_EQ(stored, 4);
  EXPECT_NE(world.cache_bytes(), before);
}

TEST(ContextParallelDecode, BadQueryShapeLeavesTheCachesUntouched) {
  CpWorld world(small_case("cpu", 2, ShareKind::contiguous));
  const std::vector<uint8_t> before = world.cache_bytes();
  std::vector<uint16_t> q(3 * 8 * 16), k(4 * 2 * 16), v(4 * 2 * 16);
  const TensorView qv(q.data(), DType::bf16, Device::cpu, {3, 8, 16});
  const TensorView kv(k.data(), DType::bf16, Device::cpu, {4, 2, 16});
  const TensorView vv(v.data(), DType::bf16, Device::cpu, {4, 2, 16});
  try {
    world.ranks[0]->attend(0, qv, kv, vv);
    FAIL() << "a q of 3 rows for a batch of 4 was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "context parallel decode: q must be [4, 8, 16], got [3, 8, 16] bf16 cpu");
  }
  EXPECT_EQ(world.cache_bytes(), before);
}

TEST(ContextParallelDecode, PageTableThatDoesNotMatchTheLayoutIsRefusedBeforeAnyWork) {
  CpWorld world(small_case("cpu", 3, ShareKind::interleaved));
  const std::vector<uint8_t> before = world.cache_bytes();
  ForwardBatch bad = world.global;
  // Request 1 (23 tokens) has pages 0..5; page 1 belongs to rank 1: hand it one of rank 2's.
  const int p = bad.kv_page_indptr[1] + 1;
  bad.kv_page_indices[static_cast<size_t>(p)] = world.layout.global_page(2, 0);
  try {
    world.ranks[0]->plan(bad);
    FAIL() << "a page on the wrong rank was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "context parallel: kv_page_indices[" + std::to_string(p) + "] (request 1's page 1) is " +
                                         std::to_string(world.layout.global_page(2, 0)) +
                                         ", a page of rank 2, but the share layout puts that page on rank 1");
  }
  EXPECT_EQ(world.cache_bytes(), before);
  try {
    world.ranks[0]->attend(0, TensorView(), TensorView(), TensorView());
    FAIL() << "attend after a failed plan";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "context parallel decode: plan must be called before attend");
  }
}

TEST(ContextParallelDecode, RefusesWhatAShareCannotApply) {
  CpWorld world(small_case("cpu", 2, ShareKind::contiguous));
  ModelSpec windowed = world.model;
  windowed.layers[1].window_left = 8;
  auto backend = create_backend("cpu", {&windowed, world.caches[0].get()});
  try {
    ContextParallelDecode cp(world.group->rank(0), *backend, world.layout);
    FAIL() << "a sliding window was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "context parallel decode: layer 1 has a sliding window (window_left >= 0), which a share "
                 "of the history cannot apply");
  }
  InProcessGroup three(3);
  try {
    ContextParallelDecode cp(three.rank(0), *world.backends[0], world.layout);
    FAIL() << "a group of 3 for a layout of 2 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "context parallel decode: the communicator has 3 ranks, expected the layout's num_ranks (2)");
  }
}

}  // namespace
}  // namespace attnkit
