#include "core/threads.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace moeserve {

namespace {

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 0; i < threads - 1; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return int(workers_.size()) + 1; }

  void run(int64_t chunks, const std::function<void(int64_t)>& task) {
    std::unique_lock<std::mutex> busy(run_mutex_);  // one parallel region at a time
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      chunks_ = chunks;
      next_ = 0;
      done_ = 0;
      generation = ++generation_;
    }
    wake_.notify_all();
    work(generation);
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return done_ == chunks_; });
    task_ = nullptr;
  }

 private:
  // Chunks are claimed under the lock and only for the region the worker woke for: a worker still finishing
  // one region can never take (and run twice) a chunk of the next, which would push done_ past chunks_.
  void work(uint64_t generation) {
    for (;;) {
      int64_t chunk;
      const std::function<void(int64_t)>* task;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (generation_ != generation || next_ >= chunks_) return;
        chunk = next_++;
        task = task_;
      }
      (*task)(chunk);
      std::lock_guard<std::mutex> lock(mutex_);
      if (++done_ == chunks_) finished_.notify_all();
    }
  }
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      work(seen);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_, run_mutex_;
  std::condition_variable wake_, finished_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t next_ = 0, chunks_ = 0, done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

int initial_count() {
  if (const char* env = std::getenv("MOESERVE_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

int g_count = initial_count();
thread_local bool t_inside = false;

Pool& pool() {
  static Pool instance(g_count);
  return instance;
}

}  // namespace

int worker_count() { return g_count; }
void set_worker_count(int count) { g_count = std::max(1, count); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int threads = std::min<int64_t>(pool().size(), g_count);
  int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, int64_t(threads) * 4);
  if (t_inside || threads <= 1 || chunks <= 1) {
    fn(0, n);
    return;
  }
  int64_t per = (n + chunks - 1) / chunks;
  std::exception_ptr error;
  std::mutex error_mutex;
  pool().run(chunks, [&](int64_t c) {
    bool was = t_inside;
    t_inside = true;
    int64_t begin = c * per, end = std::min(n, begin + per);
    try {
      if (begin < end) fn(begin, end);
    } catch (...) {  // rethrown on the calling thread below
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
    t_inside = was;
  });
  if (error) std::rethrow_exception(error);
}

}  // namespace moeserve
