#pragma once
// `moeserve bench` end to end: check the flags, find the server and the model, build the dataset,
// run once per concurrency level, print SGLang's result block, append the JSON line, and for sweeps
// print the frontier table and draw the plots.
#include <atomic>
#include <iosfwd>

#include "bench/options.h"

namespace moeserve::bench {

// Exit codes: 0 when requests completed; 1 when every request failed; 130 after Ctrl-C (what finished
// is still reported). Bad flags, an unreachable server or a failed warmup throw moeserve::Error.
int run_bench(const BenchOptions& options, std::ostream& out, const std::atomic<bool>* interrupt = nullptr);

// Tests only: the pause between warmup and the timed run (SGLang's 1 s).
void set_warmup_pause_for_testing(double seconds);

}  // namespace moeserve::bench
