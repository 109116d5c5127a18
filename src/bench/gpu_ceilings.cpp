#include "bench/gpu_ceilings.h"

#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"

namespace moeserve::bench {

namespace {

double positive(const nlohmann::json& entry, const char* field, const std::string& where) {
  if (!entry.contains(field) || !entry[field].is_number() || entry[field].get<double>() <= 0)
    fail("{}: field '{}' must be a positive number", where, field);
  return entry[field].get<double>();
}

std::string text_field(const nlohmann::json& entry, const char* field, const std::string& where) {
  if (!entry.contains(field) || !entry[field].is_string() || entry[field].get<std::string>().empty())
    fail("{}: field '{}' must be a non-empty string", where, field);
  return entry[field].get<std::string>();
}

// The entries of a parsed ceilings document (origin names it in errors).
std::vector<GpuCeilings> entries_of(const nlohmann::json& doc, const std::string& origin) {
  check(doc.is_object() && doc.contains("gpus") && doc["gpus"].is_array(), "{}: expected an object with a 'gpus' array",
        origin);
  std::vector<GpuCeilings> entries;
  for (size_t i = 0; i < doc["gpus"].size(); ++i) {
    const auto& e = doc["gpus"][i];
    const std::string where = origin + ": gpus[" + std::to_string(i) + "]";
    check(e.is_object(), "{}: expected an object", where);
    GpuCeilings c;
    c.match = text_field(e, "match", where);
    c.source = text_field(e, "source", where);
    c.copy_bytes_per_s = positive(e, "copy_tbs", where) * 1e12;
    c.bf16_flops_per_s = positive(e, "bf16_tflops", where) * 1e12;
    c.fp8_flops_per_s = positive(e, "fp8_tflops", where) * 1e12;
    c.fp32_flops_per_s = positive(e, "fp32_simt_tflops", where) * 1e12;
    entries.push_back(c);
  }
  return entries;
}

std::vector<GpuCeilings> read_gpu_ceilings(const std::string& path) {
  return entries_of(io::read_json_file(path, "GPU ceilings file"), path);
}

}  // namespace

std::vector<GpuCeilings> parse_gpu_ceilings(const std::string& json_text, const std::string& origin) {
  const auto doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  check(!doc.is_discarded(), "{}: not valid JSON", origin);
  return entries_of(doc, origin);
}

CeilingsChoice choose_gpu_ceilings(const std::vector<GpuCeilings>& entries, const std::string& gpu_name) {
  for (const auto& e : entries)
    if (gpu_name.find(e.match) != std::string::npos) return {e, true};
  for (const auto& e : entries)
    if (e.match == "H200") return {e, false};
  fail("GPU ceilings: no entry matches '{}' and there is no H200 entry to stand in", gpu_name);
}

CeilingsChoice load_gpu_ceilings(const std::string& gpu_name) {
  std::vector<GpuCeilings> entries;
  if (const char* path = std::getenv("MOESERVE_CEILINGS"); path && *path)
    entries = read_gpu_ceilings(path);
  const auto more = read_gpu_ceilings(std::string(MOESERVE_SOURCE_DIR) + "/bench/ceilings.json");
  entries.insert(entries.end(), more.begin(), more.end());
  return choose_gpu_ceilings(entries, gpu_name);
}

std::string describe(const CeilingsChoice& choice) {
  const auto& c = choice.ceilings;
  return fmt::format("ceilings {}: {:.2f} TB/s copy, bf16 {:.0f}, fp8 {:.0f}, fp32 SIMT {:.0f} TFLOP/s ({}){}", c.match,
                     c.copy_bytes_per_s / 1e12, c.bf16_flops_per_s / 1e12, c.fp8_flops_per_s / 1e12,
                     c.fp32_flops_per_s / 1e12, c.source,
                     choice.matched ? "" : "; no entry for this GPU: compare microseconds between builds, not percentages");
}

}  // namespace moeserve::bench
