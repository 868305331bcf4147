// The in-process group's all-gather on the host and on one GPU (also captured in a CUDA graph),
// and the NCCL entry points of a build without NCCL.
#include "attnkit/communicator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "attnkit/tensor.h"
#include "core/captured_graph.h"
#include "gpu_test.h"

namespace attnkit {
namespace {

void expect_gathers_when_the_last_rank_calls(InProcessGroup& group) {
  ASSERT_EQ(group.device(), Device::cpu);
  std::vector<std::vector<float>> recv(3, std::vector<float>(6, -1.0f));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(group.rank(r).device(), Device::cpu);
    const std::vector<float> send = {float(r), float(10 * r)};
    // The host group has no stream to keep: whatever a rank passes is ignored.
    group.rank(r).all_gather(send.data(), recv[static_cast<size_t>(r)].data(), 2,
                             reinterpret_cast<void*>(static_cast<uintptr_t>(r)));
    if (r < 2) {
      EXPECT_EQ(recv[0][0], -1.0f) << "written before every rank called";
    }
  }
  for (const auto& got : recv) EXPECT_EQ(got, (std::vector<float>{0, 0, 1, 10, 2, 20}));
  // The next round starts afresh.
  for (int r = 0; r < 3; ++r) {
    const float one = float(r + 1);
    group.rank(r).all_gather(&one, recv[static_cast<size_t>(r)].data(), 1);
  }
  EXPECT_EQ(recv[2][0], 1.0f);
  EXPECT_EQ(recv[2][2], 3.0f);
}

TEST(InProcessGroup, AllGatherCompletesWhenTheLastRankCalls) {
  InProcessGroup group(3);
  expect_gathers_when_the_last_rank_calls(group);
}

TEST(InProcessGroup, OnTheHostWhenAskedAsByDefault) {
  InProcessGroup group(3, Device::cpu);
  expect_gathers_when_the_last_rank_calls(group);
}

// On one GPU: device buffers, the copies queued on the calling thread's default stream. A rank's
// send is taken at its call: rewriting it afterwards changes nothing the others receive.
TEST(InProcessGroup, AllGatherOfDeviceBuffersOnOneGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  InProcessGroup group(3, Device::cuda);
  EXPECT_EQ(group.device(), Device::cuda);
  EXPECT_EQ(group.rank(2).device(), Device::cuda);
  std::vector<Buffer> send, recv;
  const std::vector<float> poison(6, -1.0f);
  for (int r = 0; r < 3; ++r) {
    send.emplace_back(Device::cuda, 2 * sizeof(float));
    recv.emplace_back(Device::cuda, 6 * sizeof(float));
    recv.back().copy_from_host(poison.data(), 6 * sizeof(float));
  }
  auto download = [&](int r) {
    std::vector<float> got(6);
    synchronize(Device::cuda);
    recv[static_cast<size_t>(r)].copy_to_host(got.data(), 6 * sizeof(float));
    return got;
  };
  for (int round = 0; round < 2; ++round) {
    for (int r = 0; r < 3; ++r) {
      Buffer& s = send[static_cast<size_t>(r)];
      const std::vector<float> values = {float(r + round), float(10 * r)};
      s.copy_from_host(values.data(), 2 * sizeof(float));
      group.rank(r).all_gather(static_cast<const float*>(s.data()),
                               static_cast<float*>(recv[static_cast<size_t>(r)].data()), 2);
      const std::vector<float> rewritten = {99.0f, 99.0f};
      s.copy_from_host(rewritten.data(), 2 * sizeof(float));
      if (round == 0 && r < 2) {
        EXPECT_EQ(download(0), poison) << "written before every rank called";
      }
    }
    for (int r = 0; r < 3; ++r) {
      const float f = float(round);
      EXPECT_EQ(download(r), (std::vector<float>{f, 0, f + 1, 10, f + 2, 20})) << "round " << round << " rank " << r;
    }
  }
}

// A captured round copies through the group's gather buffer, which a capture cannot allocate: the
// first round of a size is refused there, and after one run outside, the captured round replays
// new sends.
TEST(InProcessGroup, DeviceRoundCapturedAfterOneOfItsSizeOnOneGpu) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  InProcessGroup group(2, Device::cuda);
  std::vector<Buffer> send, recv;
  for (int r = 0; r < 2; ++r) {
    send.emplace_back(Device::cuda, 2 * sizeof(float));
    recv.emplace_back(Device::cuda, 4 * sizeof(float));
  }
  auto round = [&] {
    for (int r = 0; r < 2; ++r) {
      group.rank(r).all_gather(static_cast<const float*>(send[static_cast<size_t>(r)].data()),
                               static_cast<float*>(recv[static_cast<size_t>(r)].data()), 2);
    }
  };
  auto load = [&](float base) {
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> values = {base + float(r), base + float(10 * r)};
      send[static_cast<size_t>(r)].copy_from_host(values.data(), 2 * sizeof(float));
      recv[static_cast<size_t>(r)].fill_bytes(0xFF);
    }
  };
  try {
    cuda::CapturedGraph first;
    first.capture(round);
    FAIL() << "a captured round allocated the gather buffer";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "in-process all_gather: rank 0 starts a round of 8 bytes a rank, whose gather buffer (16 bytes, 0 "
                 "allocated) cannot be allocated while the stream is captured into a CUDA graph: run one round of "
                 "this size before capturing");
  }
  load(1.0f);
  round();
  cuda::CapturedGraph graph;
  graph.capture(round);
  load(5.0f);
  graph.replay();
  synchronize(Device::cuda);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> got(4);
    recv[static_cast<size_t>(r)].copy_to_host(got.data(), 4 * sizeof(float));
    EXPECT_EQ(got, (std::vector<float>{5, 5, 6, 15})) << "rank " << r;
  }
}

// The device group's copies of one round are ordered by the one stream its ranks pass. Checked
// before any copy, so a round of no bytes shows it without a GPU.
TEST(InProcessGroup, RefusesADeviceRankOnAnotherStream) {
  InProcessGroup group(2, Device::cuda);
  group.rank(0).all_gather_bytes(nullptr, nullptr, 0);
  try {
    group.rank(1).all_gather_bytes(nullptr, nullptr, 0, reinterpret_cast<void*>(uintptr_t{1}));
    FAIL() << "rank 1 passed another stream than rank 0";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "in-process all_gather: rank 1 passes another stream than the 1 rank(s) before it in this round, "
                 "expected the same one (a round's copies are ordered by one)");
  }
}

TEST(InProcessGroup, RefusesARankThatRunsAheadOrDisagrees) {
  InProcessGroup group(2);
  float send[2] = {1, 2}, recv[4];
  EXPECT_EQ(group.rank(1).rank(), 1);
  EXPECT_EQ(group.rank(1).size(), 2);
  group.rank(0).all_gather(send, recv, 2);
  try {
    group.rank(0).all_gather(send, recv, 2);
    FAIL() << "rank 0 called twice in one round";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "in-process all_gather: rank 0 called twice before every rank of 2 called once (1 have)");
  }
  try {
    group.rank(1).all_gather(send, recv, 1);
    FAIL() << "rank 1 gave another size";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "in-process all_gather: rank 1 gives 4 bytes, expected the 8 the other ranks gave");
  }
  try {
    group.rank(2);
    FAIL() << "rank 2 of 2";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "in-process group: rank must be in 0..1, got 2");
  }
}

// Without NCCL (not built in, or no libnccl.so.2 to open here) the entry points say which.
TEST(Nccl, SaysWhenItIsMissing) {
  if (nccl_available()) GTEST_SKIP() << "NCCL is built in and found";
  try {
    make_nccl_communicator(0, 2, NcclId{});
    FAIL() << "an NCCL communicator without NCCL";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what == "nccl: attnkit was built without NCCL (a CUDA build where CMake finds nccl.h)" ||
                what.rfind("nccl: libnccl.so.2 could not be opened (", 0) == 0)
        << what;
  }
}

}  // namespace
}  // namespace attnkit
