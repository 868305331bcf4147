// ThreadPool: workers spin briefly after a job (decode calls arrive back to back, one per layer),
// then sleep on a condition variable so an idle process costs nothing.
#include "backends/cpu/thread_pool.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "attnkit/backend.h"
#include "attnkit/error.h"

namespace attnkit::cpu {

namespace {
// About 50 us of polling before sleeping: long enough to catch the next layer's call, short
// enough not to steal a core from the rest of the engine for long.
constexpr int kSpinIterations = 20000;

// set_cpu_threads()'s value (0: none), and whether the global pool has been made with it.
std::atomic<int> g_requested_threads{0};
std::atomic<bool> g_pool_made{false};

int default_num_threads() {
  if (const int n = g_requested_threads.load()) return n;
  if (const char* env = std::getenv("ATTNKIT_CPU_THREADS")) {
    const int n = std::atoi(env);
    ATTNKIT_CHECK(n >= 1 && n <= 1024, "cpu: ATTNKIT_CPU_THREADS must be 1..1024, got '", env, "'");
    return n;
  }
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(cores);
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  ATTNKIT_CHECK(num_threads >= 1, "cpu: thread pool size must be >= 1, got ", num_threads);
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int t = 1; t < num_threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(default_num_threads());
  g_pool_made.store(true);
  return pool;
}

}  // namespace attnkit::cpu

namespace attnkit {

void set_cpu_threads(int num_threads) {
  ATTNKIT_CHECK(num_threads >= 0 && num_threads <= 1024, "set_cpu_threads: num_threads must be 0..1024, got ",
                num_threads);
  if (cpu::g_pool_made.load()) {
    const int size = cpu::ThreadPool::global().num_threads();
    ATTNKIT_CHECK(num_threads == 0 || num_threads == size, "set_cpu_threads: num_threads ", num_threads,
                  " comes after the cpu thread pool started with ", size, "; expected it before the first cpu call");
    return;
  }
  cpu::g_requested_threads.store(num_threads);
}

}  // namespace attnkit

namespace attnkit::cpu {

void ThreadPool::drain(int thread_idx) {
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) return;
    try {
      (*fn_)(task, thread_idx);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_task_.store(num_tasks_, std::memory_order_relaxed);  // the others stop taking tasks
    }
  }
}

void ThreadPool::worker_loop(int thread_idx) {
  uint64_t seen = 0;
  for (;;) {
    // Poll first, then sleep.
    for (int i = 0; i < kSpinIterations && published_generation_.load(std::memory_order_acquire) == seen; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_) return;
    }
    drain(thread_idx);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--busy_workers_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t num_tasks, const std::function<void(int64_t, int)>& fn) {
  if (num_tasks <= 0) return;
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    busy_workers_ = static_cast<int>(workers_.size());
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  drain(0);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return busy_workers_ == 0; });
    fn_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace attnkit::cpu
