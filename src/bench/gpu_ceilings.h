#pragma once
// The GPU benchmarks' denominators: each GPU's measured copy bandwidth and dense GEMM peaks, from
// bench/ceilings.json (the H200's are shared/reference/h200.md's; other cards' are measured there by
// tools/measure_ceilings.py). The device tool lends H100s as well as H200s, and a percentage is only worth
// reading against the ceilings of the card that ran it.
#include <string>
#include <vector>

namespace moeserve::bench {

struct GpuCeilings {
  std::string match;   // an entry applies to a GPU whose name contains this
  std::string source;  // where the figures were measured
  double copy_bytes_per_s = 0, bf16_flops_per_s = 0, fp8_flops_per_s = 0, fp32_flops_per_s = 0;
};

// The entries of a ceilings.json text; a missing or non-positive figure throws moeserve::Error naming
// origin, the entry and the field.
std::vector<GpuCeilings> parse_gpu_ceilings(const std::string& json_text, const std::string& origin);

struct CeilingsChoice {
  GpuCeilings ceilings;
  bool matched = false;  // false: no entry names this GPU and the H200's stand in
};
// The first entry whose match string is in gpu_name; else the H200 entry, unmatched. Throws when neither exists.
CeilingsChoice choose_gpu_ceilings(const std::vector<GpuCeilings>& entries, const std::string& gpu_name);

// The ceilings for gpu_name: entries of the file named by MOESERVE_CEILINGS first (a measurement made in the
// same device run), then bench/ceilings.json under the source tree.
CeilingsChoice load_gpu_ceilings(const std::string& gpu_name);

// One line for a benchmark's header: which figures its percentages use, and, when unmatched, that they are
// another GPU's.
std::string describe(const CeilingsChoice& choice);

}  // namespace moeserve::bench
