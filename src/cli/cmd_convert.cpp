// moeserve convert --from DIR --to DIR --weights bf16|fp8|mxfp4-fp8 [--names official|hf] [--shard-size 5GB]
// Rewrites a DeepSeek-V4 checkpoint in another weight format (model/convert.h); prints one JSON summary.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "model/convert.h"

namespace moeserve::cli {
namespace {

struct ConvertArgs {
  std::string from, to, weights, names = "official", shard_size = "5GB";
};

// "5GB" (10^9), "512MiB" (2^20), "1000000" (bytes).
int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string number = text.substr(0, digits), unit = text.substr(digits);
  static const std::pair<const char*, int64_t> kUnits[] = {
      {"", 1},          {"B", 1},           {"KB", 1000},       {"MB", 1000000}, {"GB", 1000000000},
      {"KiB", 1 << 10}, {"MiB", 1 << 20},   {"GiB", 1 << 30}};
  errno = 0;
  const long long value = number.empty() ? 0 : std::strtoll(number.c_str(), nullptr, 10);
  for (const auto& [name, factor] : kUnits)
    if (unit == name && !number.empty() && errno == 0 && value > 0 && value <= INT64_MAX / factor)
      return int64_t(value) * factor;
  fail("{} '{}' (expected a positive size such as 5GB, 512MiB or a byte count)", flag, text);
}

int run_convert(const ConvertArgs& a) {
  model::ConvertOptions options;
  options.weights = model::parse_weights_target(a.weights, "--weights");
  if (a.names == "official")
    options.names = model::NameDialect::Official;
  else if (a.names == "hf")
    options.names = model::NameDialect::HfSavePretrained;
  else
    fail("--names '{}' (expected official or hf)", a.names);
  options.max_shard_bytes = parse_byte_size(a.shard_size, "--shard-size");
  model::ConvertReport r = model::convert_checkpoint(a.from, a.to, options);
  nlohmann::json out;
  out["to"] = a.to;
  out["weights"] = model::weights_target_name(options.weights);
  out["names"] = a.names;
  out["tensors"] = r.tensors;
  out["bytes"] = r.bytes;
  out["files"] = r.files;
  out["mtp_layers"] = r.mtp_layers;
  out["passthrough"] = r.passthrough;
  out["copied"] = r.copied;
  std::cout << out.dump() << "\n";
  return 0;
}

CommandRegistration registration{{"convert", "rewrite a checkpoint as bf16, fp8 or mxfp4-fp8", [](CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  app.add_option("--from", a->from, "source model directory (config.json + safetensors, any naming)")->required();
  app.add_option("--to", a->to, "output directory (created; must not already hold a model)")->required();
  app.add_option("--weights", a->weights, "bf16|fp8|mxfp4-fp8")->required();
  app.add_option("--names", a->names, "tensor names to write: official (DeepSeek) or hf (transformers "
                                      "save_pretrained)");
  app.add_option("--shard-size", a->shard_size, "largest safetensors file before sharding (default 5GB)");
  return [a] { return run_convert(*a); };
}}};

}  // namespace
}  // namespace moeserve::cli
