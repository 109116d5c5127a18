// Tokenizer speed: load time of a tokenizer directory, and single-thread encode / decode throughput
// on a text file (default: the tokenizer.json itself, 7.8 MB of mixed JSON, Unicode and code).
// Usage: bench_tokenizer [TOKENIZER_DIR] [TEXT_FILE]
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "server/tokenizer.h"
#include "server/utf8.h"

namespace {

// CPU time of this thread: on a shared machine, wall time mostly measures the neighbours.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Timer {
  std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
  double cpu = cpu_seconds();
  std::pair<double, double> elapsed() const {
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count(), cpu_seconds() - cpu};
  }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace moeserve::server;
  const std::string dir = argc > 1 ? argv[1] : std::string(MOESERVE_SOURCE_DIR) + "/data/deepseek-v3";
  const std::string text_path = argc > 2 ? argv[2] : dir + "/tokenizer.json";
  try {
    Timer timer;
    const Tokenizer tok = Tokenizer::load(dir);
    const auto load = timer.elapsed();

    std::ifstream file(text_path, std::ios::binary);
    std::stringstream buffer;
    buffer << file.rdbuf();
    std::string text = buffer.str();
    if (!utf8::is_valid(text)) {
      std::string clean;
      utf8::append_lossy(text, clean);
      text.swap(clean);
    }
    const double mb = static_cast<double>(text.size()) / 1e6;

    timer = Timer();
    const auto ids = tok.encode(text);
    const auto cold = timer.elapsed();
    timer = Timer();
    const auto again = tok.encode(text);
    const auto warm = timer.elapsed();
    timer = Timer();
    const std::string decoded = tok.decode(ids);
    const auto decode = timer.elapsed();

    fmt::print("{} ({})\n", dir, text_path);
    fmt::print("{:<20}{:>10}{:>10}{:>12}\n", "", "wall s", "cpu s", "MB/s (cpu)");
    fmt::print("{:<20}{:>10.3f}{:>10.3f}\n", "load", load.first, load.second);
    fmt::print("{:<20}{:>10.3f}{:>10.3f}{:>12.2f}\n", "encode, cold cache", cold.first, cold.second, mb / cold.second);
    fmt::print("{:<20}{:>10.3f}{:>10.3f}{:>12.2f}\n", "encode, warm cache", warm.first, warm.second, mb / warm.second);
    fmt::print("{:<20}{:>10.3f}{:>10.3f}{:>12.2f}\n", "decode", decode.first, decode.second, mb / decode.second);
    fmt::print("text: {:.2f} MB -> {} tokens\n", mb, ids.size());
    fmt::print("round trip          {}\n", decoded == text && again == ids ? "exact" : "MISMATCH");
    return decoded == text && again == ids ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
