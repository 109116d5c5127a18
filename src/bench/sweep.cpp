#include "bench/sweep.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <spawn.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include "core/error.h"

extern char** environ;

namespace moeserve::bench {
namespace {
namespace fs = std::filesystem;

struct Column {
  const char* header;
  const char* tsv_header;
  int width;
};

const Column kColumns[] = {
    {"max_conc", "max_concurrency", 8},
    {"conc", "concurrency", 8},
    {"ok", "completed", 6},
    {"failed", "failed", 6},
    {"out tok/s", "output_throughput", 10},
    {"tok/s/GPU", "output_tok_s_per_gpu", 10},
    {"tok/s/user", "tok_s_per_user", 10},
    {"TTFT mean", "mean_ttft_ms", 10},
    {"TTFT med", "median_ttft_ms", 10},
    {"TTFT p99", "p99_ttft_ms", 10},
    {"TPOT mean", "mean_tpot_ms", 10},
    {"TPOT med", "median_tpot_ms", 10},
    {"TPOT p99", "p99_tpot_ms", 10},
};

std::vector<double> row_values(const SweepPoint& p, int num_gpus) {
  const auto& m = p.metrics;
  return {static_cast<double>(p.max_concurrency), m.concurrency, static_cast<double>(m.completed),
          static_cast<double>(m.failed), m.output_throughput, tokens_per_s_per_gpu(m, num_gpus),
          tokens_per_s_per_user(m), m.mean_ttft_ms, m.median_ttft_ms, m.p99_ttft_ms, m.mean_tpot_ms,
          m.median_tpot_ms, m.p99_tpot_ms};
}

std::string cell(double v, size_t column) {
  return column == 0 || column == 2 || column == 3 ? fmt::format("{}", static_cast<long long>(v))
                                                   : fmt::format("{:.2f}", v);
}

// A gnuplot single-quoted string ('' is a literal quote).
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

void write_file(const fs::path& path, const std::string& text, std::vector<std::string>& files) {
  std::ofstream f(path);
  check(f.good(), "cannot write '{}'", path.string());
  f << text;
  check(f.good(), "cannot write '{}'", path.string());
  files.push_back(path.string());
}

// Runs `gnuplot script` in the script's directory (the scripts name their files relative to it, so the
// directory can be moved or committed); returns "" on success, else what went wrong.
std::string run_gnuplot(const fs::path& script) {
  const std::string program = "gnuplot", path = script.filename().string(), dir = script.parent_path().string();
  char* argv[] = {const_cast<char*>(program.c_str()), const_cast<char*>(path.c_str()), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return fmt::format("cannot run gnuplot ({}); install gnuplot-nox to draw the PNGs", std::strerror(rc));
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return "waiting for gnuplot failed";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return "gnuplot is not installed (install gnuplot-nox)";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fmt::format("gnuplot failed on {} (exit status {})", path, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return "";
}

std::string plot_header(const fs::path& png, const std::string& title) {
  return fmt::format(
      "set terminal pngcairo size 900,600 enhanced font 'sans,11'\n"
      "set output {}\n"
      "set title {} noenhanced\n"
      "set grid\n"
      "set offsets graph 0.05, graph 0.08, graph 0.1, 0\n"
      "set yrange [0:*]\n"
      "set key top left\n",
      quoted(png.filename().string()), quoted(title));
}
}  // namespace

double tokens_per_s_per_gpu(const BenchmarkMetrics& m, int num_gpus) {
  check(num_gpus >= 1, "--num-gpus must be at least 1, got {}", num_gpus);
  return m.output_throughput / num_gpus;
}

double tokens_per_s_per_user(const BenchmarkMetrics& m) {
  return m.median_tpot_ms > 0.0 && std::isfinite(m.median_tpot_ms) ? 1000.0 / m.median_tpot_ms : 0.0;
}

std::string format_frontier_table(const std::vector<SweepPoint>& points, int num_gpus) {
  std::string header;
  for (const auto& c : kColumns) header += fmt::format("{:>{}} ", c.header, c.width);
  header.pop_back();
  std::string out = fmt::format("{:=^{}}\n", " Concurrency Sweep (latencies in ms) ", header.size()) + header + "\n";
  for (const auto& p : points) {
    const auto values = row_values(p, num_gpus);
    std::string row;
    for (size_t i = 0; i < values.size(); ++i) row += fmt::format("{:>{}} ", cell(values[i], i), kColumns[i].width);
    row.pop_back();
    out += row + "\n";
  }
  out += fmt::format("tok/s/GPU = output tok/s / {} GPU{}; tok/s/user = 1000 / median TPOT\n", num_gpus,
                     num_gpus == 1 ? "" : "s");
  return out + std::string(header.size(), '=') + "\n";
}

PlotResult write_sweep_files(const std::vector<SweepPoint>& points, int num_gpus, const std::string& dir,
                             const std::string& title) {
  check(!points.empty(), "a sweep needs at least one point");
  PlotResult result;
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, "cannot create the plot directory '{}': {}", dir, ec.message());
  const fs::path root = fs::absolute(dir);

  std::string tsv, dat = "#";
  for (const auto& c : kColumns) {
    tsv += std::string(c.tsv_header) + "\t";
    dat += std::string(" ") + c.tsv_header;
  }
  tsv.back() = '\n';
  dat += "\n";
  for (const auto& p : points) {
    const auto values = row_values(p, num_gpus);
    std::string tsv_row, dat_row;
    for (size_t i = 0; i < values.size(); ++i) {
      tsv_row += cell(values[i], i) + "\t";
      dat_row += (std::isfinite(values[i]) ? fmt::format("{}", values[i]) : std::string("NaN")) + " ";
    }
    tsv_row.back() = '\n';
    dat_row.back() = '\n';
    tsv += tsv_row;
    dat += dat_row;
  }
  write_file(root / "frontier.tsv", tsv, result.files);
  const fs::path data = root / "sweep.dat";
  write_file(data, dat, result.files);

  // Columns of sweep.dat (1-based): 1 max_conc, 6 tok/s/GPU, 7 tok/s/user, 8-10 TTFT, 11-13 TPOT.
  const std::string d = quoted(data.filename().string());
  struct Plot {
    std::string name, body;
  };
  const std::vector<Plot> plots = {
      {"ttft_vs_concurrency",
       "set logscale x 2\nset xlabel 'max concurrency'\nset ylabel 'TTFT (ms)'\n"
       "plot " + d + " using 1:8 with linespoints title 'mean', " + d +
           " using 1:9 with linespoints title 'median', " + d + " using 1:10 with linespoints title 'p99'\n"},
      {"tpot_vs_concurrency",
       "set logscale x 2\nset xlabel 'max concurrency'\nset ylabel 'TPOT (ms)'\n"
       "plot " + d + " using 1:11 with linespoints title 'mean', " + d +
           " using 1:12 with linespoints title 'median', " + d + " using 1:13 with linespoints title 'p99'\n"},
      {"frontier",
       fmt::format("set xlabel 'interactivity (tokens/s/user = 1000 / median TPOT)'\n"
                   "set ylabel 'throughput (output tokens/s/GPU, {} GPU{})'\nset xrange [0:*]\nset key bottom left\n"
                   "plot {} using 7:6 with linespoints title 'max concurrency', "
                   "{} using 7:6:(sprintf('%d', $1)) with labels offset 1,0.8 notitle\n",
                   num_gpus, num_gpus == 1 ? "" : "s", d, d)},
  };
  std::vector<fs::path> scripts;
  for (const auto& plot : plots) {
    const fs::path script = root / (plot.name + ".gp");
    write_file(script, plot_header(root / (plot.name + ".png"), plot.name + ": " + title) + plot.body,
               result.files);
    scripts.push_back(script);
  }
  result.drew_png = true;
  for (size_t i = 0; i < scripts.size(); ++i) {
    if (std::string problem = run_gnuplot(scripts[i]); !problem.empty()) {
      result.drew_png = false;
      result.problem = problem;
      break;
    }
    result.files.push_back((root / (plots[i].name + ".png")).string());
  }
  return result;
}

}  // namespace moeserve::bench
