// The `cpu` backend's thread pool: every task runs exactly once on any pool size, a task's
// exception reaches the caller, and the pool keeps working afterwards.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "attnkit/backend.h"
#include "attnkit/error.h"
#include "backends/cpu/thread_pool.h"

namespace attnkit::cpu {
namespace {

TEST(CpuThreadPool, RunsEveryTaskOnce) {
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    for (int64_t tasks : {0, 1, 3, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
      std::atomic<int> bad_thread{0};
      pool.run(tasks, [&](int64_t i, int thread) {
        hits[static_cast<size_t>(i)]++;
        if (thread < 0 || thread >= threads) bad_thread++;
      });
      for (int64_t i = 0; i < tasks; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "task " << i;
      EXPECT_EQ(bad_thread.load(), 0);
    }
  }
}

TEST(CpuThreadPool, RethrowsATaskErrorAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.run(100, [](int64_t i, int) {
    if (i == 42) throw Error("task 42 failed");
  }), Error);
  std::atomic<int64_t> sum{0};
  pool.run(10, [&](int64_t i, int) { sum += i; });
  EXPECT_EQ(sum.load(), 45);
}

TEST(CpuThreadPool, RefusesAnEmptyPool) {
  try {
    ThreadPool pool(0);
    FAIL() << "a pool of 0 threads was created";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cpu: thread pool size must be >= 1, got 0");
  }
}

// set_cpu_threads() sizes the process-wide pool made on first use, and refuses another size after
// (CTest runs each test in a process of its own, so the pool is not made yet here).
TEST(CpuThreadPool, SetCpuThreadsSizesTheGlobalPool) {
  try {
    set_cpu_threads(3);
  } catch (const Error& e) {
    GTEST_SKIP() << "the pool was made by an earlier test of this process: " << e.what();
  }
  EXPECT_EQ(ThreadPool::global().num_threads(), 3);
  EXPECT_NO_THROW(set_cpu_threads(3));
  try {
    set_cpu_threads(5);
    FAIL() << "a second size was taken after the pool started";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "set_cpu_threads: num_threads 5 comes after the cpu thread pool started with 3; expected it "
                           "before the first cpu call");
  }
  EXPECT_THROW(set_cpu_threads(-1), Error);
}

}  // namespace
}  // namespace attnkit::cpu
