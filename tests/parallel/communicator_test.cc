// The in-process group's all-gather, and the NCCL entry points of a build without NCCL.
#include "attnkit/communicator.h"

#include <gtest/gtest.h>

#include <string>

#include "attnkit/error.h"

namespace attnkit {
namespace {

TEST(InProcessGroup, AllGatherCompletesWhenTheLastRankCalls) {
  InProcessGroup group(3);
  std::vector<std::vector<float>> recv(3, std::vector<float>(6, -1.0f));
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> send = {float(r), float(10 * r)};
    group.rank(r).all_gather(send.data(), recv[static_cast<size_t>(r)].data(), 2);
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
