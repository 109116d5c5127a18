#include "planner/presets.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moeserve::planner {

namespace fs = std::filesystem;
using nlohmann::json;

std::string data_root() {
  if (const char* env = std::getenv("MOESERVE_DATA_DIR"); env && *env) return env;
  return MOESERVE_SOURCE_DIR;
}

namespace {

std::vector<std::string> names_in(const fs::path& dir, bool directories, const std::string& extension) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (directories && entry.is_directory() && fs::exists(entry.path() / "config.json"))
      names.push_back(entry.path().filename().string());
    if (!directories && entry.is_regular_file() && entry.path().extension() == extension)
      names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  check(bool(in), "{}: cannot open", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

std::vector<std::string> model_preset_names() { return names_in(fs::path(data_root()) / "presets/models", true, ""); }

io::ModelConfig load_model(const std::string& name_or_path) {
  check(!name_or_path.empty(), "--model: expected a preset name ({}) or a directory with config.json",
        fmt::join(model_preset_names(), ", "));
  fs::path path(name_or_path);
  if (fs::is_directory(path)) {
    check(fs::exists(path / "config.json"), "--model {}: the directory has no config.json", name_or_path);
    return io::load_model_config((path / "config.json").string());
  }
  if (fs::is_regular_file(path)) return io::load_model_config(path.string());
  fs::path preset = fs::path(data_root()) / "presets/models" / name_or_path / "config.json";
  check(name_or_path.find('/') == std::string::npos && fs::exists(preset),
        "--model '{}' is neither a directory with config.json nor a model preset (presets: {})", name_or_path,
        fmt::join(model_preset_names(), ", "));
  return io::load_model_config(preset.string());
}

std::vector<std::string> gpu_preset_names() { return names_in(fs::path(data_root()) / "presets/gpus", false, ".json"); }

DeviceSpec parse_gpu_preset(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  check(j.is_object(), "{}: a GPU preset must be a JSON object", source);
  static const std::set<std::string> known = {"name", "display_name", "arch", "memory_bytes", "memory_note",
                                              "hbm_bandwidth_gbs", "bf16_tflops", "fp8_tflops", "fp4_tflops",
                                              "interconnect", "interconnect_gbs", "gpus_per_node", "measured",
                                              "sources"};
  for (auto it = j.begin(); it != j.end(); ++it)
    check(known.count(it.key()), "{}: unknown field '{}' in a GPU preset", source, it.key());
  auto number = [&](const char* key, bool required_positive) {
    check(j.contains(key) && j[key].is_number(), "{}: field '{}' must be a number", source, key);
    double v = j[key].get<double>();
    check(required_positive ? v > 0 : v >= 0, "{}: field '{}' = {} must be {}", source, key, v,
          required_positive ? "> 0" : ">= 0");
    return v;
  };
  auto string = [&](const char* key) {
    check(j.contains(key) && j[key].is_string(), "{}: field '{}' must be a string", source, key);
    return j[key].get<std::string>();
  };
  DeviceSpec d;
  d.name = string("name");
  d.display_name = string("display_name");
  check(j.contains("memory_bytes") && j["memory_bytes"].is_number_integer() && j["memory_bytes"].get<int64_t>() > 0,
        "{}: field 'memory_bytes' must be a positive integer (bytes as cudaMemGetInfo reports them)", source);
  d.memory_bytes = j["memory_bytes"].get<int64_t>();
  d.memory_note = j.value("memory_note", "");
  d.hbm_bandwidth_gbs = number("hbm_bandwidth_gbs", true);
  d.bf16_tflops = number("bf16_tflops", true);
  d.fp8_tflops = number("fp8_tflops", true);
  d.fp4_tflops = number("fp4_tflops", false);
  d.interconnect = string("interconnect");
  d.interconnect_gbs = number("interconnect_gbs", true);
  d.gpus_per_node = int64_t(number("gpus_per_node", true));
  if (j.contains("sources")) {
    check(j["sources"].is_array(), "{}: field 'sources' must be an array of strings", source);
    for (const auto& s : j["sources"]) {
      check(s.is_string(), "{}: field 'sources' must be an array of strings", source);
      d.sources.push_back(s.get<std::string>());
    }
  }
  return d;
}

DeviceSpec load_gpu_preset(const std::string& name) {
  check(name != "cpu", "--gpu cpu is the CPU reference engine: give its memory with --cpu-memory-gib");
  fs::path path = fs::path(data_root()) / "presets/gpus" / (name + ".json");
  check(name.find('/') == std::string::npos && fs::exists(path), "--gpu '{}' is not a GPU preset (presets: {}, cpu)",
        name, fmt::join(gpu_preset_names(), ", "));
  DeviceSpec d = parse_gpu_preset(read_text(path), path.string());
  check(d.name == name, "{}: preset file name '{}' and its field name '{}' differ", path.string(), name, d.name);
  return d;
}

}  // namespace moeserve::planner
