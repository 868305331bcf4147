// A fixed pool of worker threads, created once and reused by every forward call of the `cpu`
// backend. It hands out task indices in order; what a task computes never depends on which thread ran it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace attnkit::cpu {

class ThreadPool {
 public:
  // `num_threads` >= 1 counts the calling thread: num_threads - 1 workers are started.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process-wide pool, sized to the cores (ATTNKIT_CPU_THREADS overrides), created on first use.
  static ThreadPool& global();

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task_idx, thread_idx) for every task_idx in [0, num_tasks), thread_idx in
  // [0, num_threads()). Tasks are taken in index order by whichever thread is free, so a caller that
  // sorts its tasks by decreasing cost gets a longest-first schedule. Blocks until all are done and
  // rethrows the first exception a task threw. Calls from several threads are serialised.
  void run(int64_t num_tasks, const std::function<void(int64_t, int)>& fn);

 private:
  void worker_loop(int thread_idx);
  void drain(int thread_idx);

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one run() at a time

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;  // bumped by run(); workers start when it changes
  bool stop_ = false;
  int busy_workers_ = 0;

  // The current job, valid while busy.
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<uint64_t> published_generation_{0};
  std::exception_ptr error_;
};

}  // namespace attnkit::cpu
