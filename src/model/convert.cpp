#include "model/convert.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/json_file.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "kernels/cpu/quant.h"
#include "model/checkpoint_layout.h"
#include "model/weights.h"

namespace moeserve::model {

namespace fs = std::filesystem;
using nlohmann::json;

const char* weights_target_name(WeightsTarget target) {
  switch (target) {
    case WeightsTarget::Bf16: return "bf16";
    case WeightsTarget::Fp8: return "fp8";
    case WeightsTarget::Mxfp4Fp8: return "mxfp4-fp8";
  }
  return "?";
}

WeightsTarget parse_weights_target(const std::string& text, const std::string& flag) {
  for (WeightsTarget t : {WeightsTarget::Bf16, WeightsTarget::Fp8, WeightsTarget::Mxfp4Fp8})
    if (text == weights_target_name(t)) return t;
  fail("{} '{}' (expected bf16, fp8 or mxfp4-fp8)", flag, text);
}

namespace {

// Files next to the weights that a converted directory keeps.
constexpr const char* kSideFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                      "generation_config.json", "chat_template.jinja"};

WeightFormat target_format(ParamKind kind, WeightsTarget target) {
  if (kind == ParamKind::UnquantizedLinear || target == WeightsTarget::Bf16) return WeightFormat::Dense;
  if (kind == ParamKind::ExpertLinear && target == WeightsTarget::Mxfp4Fp8) return WeightFormat::Mxfp4;
  return WeightFormat::Fp8Block;
}

Tensor bf16_from_f32(const Tensor& f32) {
  Tensor out = Tensor::empty(DType::BF16, f32.shape());
  for (int64_t i = 0; i < f32.numel(); ++i) out.data<uint16_t>()[i] = f32_to_bf16(f32.f32()[i]);
  return out;
}

struct OutTensor {
  std::string name;  // in the output dialect
  DType dtype;
  Shape shape;
  int64_t bytes() const { return shape_numel(shape) * int64_t(dtype_size(dtype)); }
};

// One unit of work: a parameter of the layout (a linear writes weight and scale together) or a passthrough.
struct Job {
  ParamSpec spec;
  WeightFormat format = WeightFormat::Dense;  // linears: the target format
  std::vector<OutTensor> outputs;
  bool passthrough = false;  // spec.name is the stored name of an unknown source tensor
  int64_t bytes() const {
    int64_t n = 0;
    for (const auto& o : outputs) n += o.bytes();
    return n;
  }
};

class Converter {
 public:
  Converter(const io::ModelConfig& config, const TensorSource& source, const ConvertOptions& options)
      : c_(config), src_(source), opt_(options) {}

  std::string out_name(const std::string& official) const { return name_in_dialect(official, opt_.names); }

  Job plan(const ParamSpec& spec) const {
    Job job;
    job.spec = spec;
    if (!is_linear(spec.kind)) {
      DType dtype = spec.kind == ParamKind::Bf16Param ? DType::BF16
                    : spec.kind == ParamKind::F32Param ? DType::F32
                                                       : DType::I64;
      job.outputs.push_back({out_name(spec.name), dtype, spec.shape});
      return job;
    }
    const int64_t out = spec.shape[0], in = spec.shape[1];
    job.format = target_format(spec.kind, opt_.weights);
    const std::string w = out_name(spec.name + ".weight"), s = out_name(spec.name + ".scale");
    switch (job.format) {
      case WeightFormat::Dense: job.outputs.push_back({w, DType::BF16, spec.shape}); break;
      case WeightFormat::Fp8Block:
        job.outputs.push_back({w, DType::F8_E4M3, spec.shape});
        job.outputs.push_back({s, DType::F8_E8M0, {(out + 127) / 128, (in + 127) / 128}});
        break;
      case WeightFormat::Mxfp4:
        check(in % 32 == 0, "--weights mxfp4-fp8: routed expert '{}' has input width {} (hidden_size {}, "
              "moe_intermediate_size {}); MXFP4 needs a multiple of 32", spec.name + ".weight", in, c_.hidden_size,
              c_.moe_intermediate_size);
        job.outputs.push_back({w, DType::I8, {out, in / 2}});
        job.outputs.push_back({s, DType::F8_E8M0, {out, in / 32}});
        break;
    }
    return job;
  }

  // The stored names a layout parameter reads (to find the tensors it does not know).
  void mark_consumed(const ParamSpec& spec, std::set<std::string>& consumed) const {
    if (!is_linear(spec.kind)) {
      consumed.insert(src_.stored_name(spec.name));
      return;
    }
    consumed.insert(src_.stored_name(spec.name + ".weight"));
    if (src_.has(spec.name + ".scale")) consumed.insert(src_.stored_name(spec.name + ".scale"));
  }

  void run(const Job& job, std::map<std::string, Tensor>& out) const {
    if (job.passthrough) {
      out[job.outputs[0].name] = src_.checkpoint().get(job.spec.name).tensor.clone();
      return;
    }
    if (is_linear(job.spec.kind))
      run_linear(job, out);
    else
      out[job.outputs[0].name] = small(job.spec);
  }

 private:
  void run_linear(const Job& job, std::map<std::string, Tensor>& out) const {
    const ParamSpec& spec = job.spec;
    const int64_t rows = spec.shape[0], cols = spec.shape[1];
    LinearWeight w = load_linear(c_, src_, spec.name, rows, cols, spec.kind);
    const std::string& wname = job.outputs[0].name;
    switch (job.format) {
      case WeightFormat::Dense:
        out[wname] = w.format == WeightFormat::Dense && w.weight.dtype() == DType::BF16 ? w.weight.clone()
                                                                                         : bf16_from_f32(w.f32);
        return;
      case WeightFormat::Fp8Block: {
        const std::string& sname = job.outputs[1].name;
        if (w.format == WeightFormat::Fp8Block && w.scale.dtype() == DType::F8_E8M0) {  // already the target
          out[wname] = w.weight.clone();
          out[sname] = w.scale.clone();
          return;
        }
        Tensor q = Tensor::empty(DType::F8_E4M3, {rows, cols});
        Tensor s = Tensor::empty(DType::F8_E8M0, job.outputs[1].shape);
        kernels::cpu::fp8_weight_quantize(w.f32.f32(), rows, cols, q.data<uint8_t>(), s.data<uint8_t>());
        out[wname] = q;
        out[sname] = s;
        return;
      }
      case WeightFormat::Mxfp4: {
        const std::string& sname = job.outputs[1].name;
        if (w.format == WeightFormat::Mxfp4) {
          out[wname] = Tensor::borrow(DType::I8, w.weight.shape(), w.weight.raw(), nullptr).clone();
          out[sname] = w.scale.clone();
          return;
        }
        Tensor q = Tensor::empty(DType::I8, {rows, cols / 2});
        Tensor s = Tensor::empty(DType::F8_E8M0, {rows, cols / 32});
        kernels::cpu::mxfp4_weight_quantize(w.f32.f32(), rows, cols, q.data<uint8_t>(), s.data<uint8_t>());
        out[wname] = q;
        out[sname] = s;
        return;
      }
    }
  }

  Tensor small(const ParamSpec& spec) const {
    Tensor t = src_.get(spec.name);
    check(t.shape() == spec.shape, "{}: tensor '{}' has shape {} but the config implies {}", src_.where(), spec.name,
          shape_string(t.shape()), shape_string(spec.shape));
    if (spec.kind == ParamKind::IndexParam) {
      check(t.dtype() == DType::I64 || t.dtype() == DType::I32, "{}: tensor '{}' has dtype {} (expected I64 or I32)",
            src_.where(), spec.name, dtype_name(t.dtype()));
      Tensor out = Tensor::empty(DType::I64, t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) {
        const int64_t e = t.dtype() == DType::I64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
        check(e >= 0 && e < c_.n_routed_experts, "{}: '{}' holds expert {} (expected 0..{})", src_.where(), spec.name,
              e, c_.n_routed_experts - 1);
        out.data<int64_t>()[i] = e;
      }
      return out;
    }
    check(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16,
          "{}: tensor '{}' has dtype {} (expected F32, BF16 or F16)", src_.where(), spec.name, dtype_name(t.dtype()));
    if (spec.kind == ParamKind::Bf16Param) return t.dtype() == DType::BF16 ? t.clone() : bf16_from_f32(t.to_f32());
    return t.to_f32();
  }

  const io::ModelConfig& c_;
  const TensorSource& src_;
  const ConvertOptions& opt_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  check(bool(out), "{}: cannot write", path);
  out << text;
  check(bool(out), "{}: write failed", path);
}

// The source config with the target's quantization_config / expert_dtype (everything else kept).
json target_config(json config, WeightsTarget target) {
  config.erase("quantization_config");
  config.erase("expert_dtype");
  if (target != WeightsTarget::Bf16) {
    config["quantization_config"] = {{"quant_method", "fp8"},
                                     {"fmt", "e4m3"},
                                     {"activation_scheme", "dynamic"},
                                     {"scale_fmt", "ue8m0"},
                                     {"weight_block_size", {128, 128}}};
    config["expert_dtype"] = target == WeightsTarget::Mxfp4Fp8 ? "fp4" : "fp8";
  }
  bool has_dtype = false;
  for (const char* key : {"torch_dtype", "dtype"})
    if (config.contains(key)) {
      config[key] = "bfloat16";
      has_dtype = true;
    }
  if (!has_dtype) config["torch_dtype"] = "bfloat16";
  return config;
}

void check_output_dir(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  check(!fs::exists(to) || !fs::equivalent(from, to, ec), "--to {} is the --from directory; convert into a new one",
        to.string());
  if (fs::exists(to)) {
    check(fs::is_directory(to), "--to {}: exists and is not a directory", to.string());
    for (const auto& entry : fs::directory_iterator(to)) {
      const std::string name = entry.path().filename().string();
      check(name != "config.json" && entry.path().extension() != ".safetensors" &&
                name != "model.safetensors.index.json",
            "--to {}: already holds a model ({}); choose an empty or new directory", to.string(), name);
    }
  }
  fs::create_directories(to);
}

}  // namespace

ConvertReport convert_checkpoint(const std::string& from, const std::string& to, const ConvertOptions& options) {
  check(fs::is_directory(from), "--from {}: not a directory", from);
  check(fs::exists(fs::path(from) / "config.json"), "--from {}: no config.json", from);
  check(options.names == NameDialect::Official || options.names == NameDialect::HfSavePretrained,
        "convert writes official or transformers save_pretrained names, not {}", dialect_name(options.names));
  check(options.max_shard_bytes > 0, "shard size must be positive, got {}", options.max_shard_bytes);
  const std::string config_path = (fs::path(from) / "config.json").string();
  const json source_json = io::read_json_file(config_path);
  const io::ModelConfig config = io::parse_model_config(source_json, config_path);
  const TensorSource source(io::Checkpoint::open_dir(from));

  ConvertReport report;
  for (int64_t i = 0; i < config.num_mtp_layers; ++i) {
    if (!source.has("mtp." + std::to_string(i) + ".e_proj.weight")) break;
    report.mtp_layers = i + 1;
  }

  // Plan every output tensor first (sizes are known without converting), then assign shards.
  Converter converter(config, source, options);
  std::vector<Job> jobs;
  std::set<std::string> consumed;
  for (const ParamSpec& spec : checkpoint_layout(config, report.mtp_layers)) {
    jobs.push_back(converter.plan(spec));
    converter.mark_consumed(spec, consumed);
  }
  for (const auto& [name, entry] : source.checkpoint().entries()) {
    if (consumed.count(name)) continue;
    Job job;
    job.spec = {name, ParamKind::F32Param, entry.shape};
    job.passthrough = true;
    job.outputs.push_back({name, entry.dtype, entry.shape});
    jobs.push_back(job);
    report.passthrough.push_back(name);
  }
  std::set<std::string> output_names;
  for (const Job& job : jobs)
    for (const OutTensor& o : job.outputs)
      check(output_names.insert(o.name).second, "convert: two tensors would be written as '{}'", o.name);

  std::vector<std::vector<const Job*>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const Job& job : jobs) {
    if (shard_bytes > 0 && shard_bytes + job.bytes() > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&job);
    shard_bytes += job.bytes();
    total_bytes += job.bytes();
  }

  check_output_dir(fs::path(from), fs::path(to));
  json weight_map = json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = shards.size() == 1 ? std::string("model.safetensors")
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
    std::map<std::string, Tensor> tensors;
    for (const Job* job : shards[k]) converter.run(*job, tensors);
    for (const auto& [name, t] : tensors) {
      weight_map[name] = file;
      report.bytes += int64_t(t.nbytes());
    }
    report.tensors += int64_t(tensors.size());
    io::save_safetensors((fs::path(to) / file).string(), tensors, {{"format", "pt"}});
    report.files.push_back(file);
  }
  check(report.bytes == total_bytes, "convert: wrote {} bytes but planned {}", report.bytes, total_bytes);
  if (shards.size() > 1) {
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_text((fs::path(to) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  }

  const json out_config = target_config(source_json, options.weights);
  const std::string out_config_path = (fs::path(to) / "config.json").string();
  io::parse_model_config(out_config, out_config_path);  // what we write must load
  write_text(out_config_path, out_config.dump(2) + "\n");
  for (const char* name : kSideFiles) {
    const fs::path file = fs::path(from) / name;
    if (!fs::exists(file)) continue;
    fs::copy_file(file, fs::path(to) / name, fs::copy_options::overwrite_existing);
    report.copied.push_back(name);
  }
  return report;
}

}  // namespace moeserve::model
