// `moeserve bench`: the serving benchmark (sglang.bench_serving's flags and report). Ctrl-C stops
// releasing requests, cancels those in flight and prints what was measured; a second Ctrl-C kills.
#include <atomic>
#include <csignal>
#include <iostream>

#include "bench/bench.h"
#include "cli/command.h"

namespace moeserve::cli {
namespace {
std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) { g_interrupted.store(true); }

void install_sigint_handler() {
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;  // the second Ctrl-C gets the default action
  sigaction(SIGINT, &action, nullptr);
}

CommandRegistration bench{{"bench", "benchmark a running OpenAI-compatible server (sglang.bench_serving's flags)",
                           [](CLI::App& app) {
                             auto options = std::make_shared<bench::BenchOptions>();
                             bench::add_bench_options(app, *options);
                             return [options] {
                               install_sigint_handler();
                               return bench::run_bench(*options, std::cout, &g_interrupted);
                             };
                           }}};
}  // namespace
}  // namespace moeserve::cli
