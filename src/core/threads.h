#pragma once
// A process-wide worker pool for the CPU reference ops. parallel_for splits [0, n) into
// contiguous ranges; the calling thread takes part. Nested calls run serially. An exception thrown by fn
// on any thread is rethrown on the caller.
#include <cstdint>
#include <functional>

namespace moeserve {

// Number of threads parallel_for uses (MOESERVE_THREADS, else hardware concurrency).
int worker_count();
void set_worker_count(int count);

// fn(begin, end) over disjoint ranges covering [0, n); `grain` is the smallest useful range.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace moeserve
