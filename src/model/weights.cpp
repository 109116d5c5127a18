#include "model/weights.h"

#include <cmath>

#include "core/threads.h"
#include "kernels/cpu/quant.h"
#include "model/checkpoint_layout.h"

namespace moeserve::model {

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::Dense: return "dense";
    case WeightFormat::Fp8Block: return "fp8 (128x128 block scales)";
    case WeightFormat::Mxfp4: return "mxfp4 (e2m1, per-32 e8m0 scales)";
  }
  return "?";
}

io::LayerSpec mtp_layer_spec() {
  io::LayerSpec spec;
  spec.attention = io::AttentionKind::Sliding;
  spec.compress_ratio = 0;
  spec.hash_moe = false;
  return spec;
}

namespace {

class Loader {
 public:
  Loader(const io::ModelConfig& config, const TensorSource& source) : c_(config), src_(source) {}

  Tensor get_shaped(const std::string& name, const Shape& shape) {
    Tensor t = src_.get(name);
    if (t.shape() != shape)
      fail("{}: tensor '{}' has shape {} but the config implies {}", src_.where(), name, shape_string(t.shape()),
           shape_string(shape));
    return t;
  }

  // fp32 copy of a float tensor of the given shape.
  Tensor small(const std::string& name, const Shape& shape) {
    Tensor t = get_shaped(name, shape);
    check(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16,
          "{}: tensor '{}' has dtype {} (expected F32, BF16 or F16)", src_.where(), name, dtype_name(t.dtype()));
    return t.to_f32();
  }

  // A linear of the given role (checkpoint_layout.h). The stored dtype decides the format; the role and
  // config.json's quantization_config / expert_dtype decide which formats are allowed.
  LinearWeight linear(const std::string& name, int64_t out, int64_t in, ParamKind kind) {
    LinearWeight w;
    w.name = name;
    w.out = out;
    w.in = in;
    const std::string wname = name + ".weight", scale_name = name + ".scale";
    Tensor t = src_.get(wname);
    switch (t.dtype()) {
      case DType::F32:
      case DType::BF16:
      case DType::F16: w.format = WeightFormat::Dense; break;
      case DType::F8_E4M3: w.format = WeightFormat::Fp8Block; break;
      case DType::I8:
      case DType::U8: w.format = WeightFormat::Mxfp4; break;
      default:
        fail("{}: tensor '{}' has dtype {}, which a linear weight cannot have (expected BF16, F16, F32, F8_E4M3 "
             "with a scale, or packed FP4 I8 with a scale)",
             src_.where(), wname, dtype_name(t.dtype()));
    }
    check_format_allowed(wname, t.dtype(), w.format, kind);
    switch (w.format) {
      case WeightFormat::Dense: {
        check(t.shape() == Shape{out, in}, "{}: tensor '{}' has shape {} but the config implies {}", src_.where(),
              wname, shape_string(t.shape()), shape_string({out, in}));
        w.weight = t;
        w.f32 = t.to_f32();
        break;
      }
      case WeightFormat::Fp8Block: {
        check(t.shape() == Shape{out, in}, "{}: tensor '{}' has shape {} but the config implies {}", src_.where(),
              wname, shape_string(t.shape()), shape_string({out, in}));
        check(src_.has(scale_name), "{}: FP8 tensor '{}' has no scale tensor '{}'", src_.where(), wname, scale_name);
        Tensor s = src_.get(scale_name);
        Shape want{(out + 127) / 128, (in + 127) / 128};
        check(s.shape() == want, "{}: scale '{}' has shape {}; FP8 128x128 block scales need {}", src_.where(),
              scale_name, shape_string(s.shape()), shape_string(want));
        check(s.dtype() == DType::F8_E8M0 || s.dtype() == DType::F32,
              "{}: scale '{}' has dtype {} (expected F8_E8M0 or F32)", src_.where(), scale_name,
              dtype_name(s.dtype()));
        check_scale_values(scale_name, s);
        w.weight = t;
        w.scale = s;
        w.f32 = Tensor::empty(DType::F32, {out, in});
        kernels::cpu::fp8_weight_dequantize(t.data<uint8_t>(), s.dtype(), s.raw(), out, in, w.f32.f32());
        break;
      }
      case WeightFormat::Mxfp4: {
        check(in % 32 == 0, "{}: tensor '{}': FP4 needs an input width divisible by 32, got {}", src_.where(), wname,
              in);
        check(t.shape() == Shape{out, in / 2}, "{}: packed FP4 tensor '{}' has shape {}; expected {} (two e2m1 per "
              "byte)", src_.where(), wname, shape_string(t.shape()), shape_string({out, in / 2}));
        check(src_.has(scale_name), "{}: FP4 tensor '{}' has no scale tensor '{}'", src_.where(), wname, scale_name);
        Tensor s = src_.get(scale_name);
        check(s.shape() == Shape{out, in / 32}, "{}: scale '{}' has shape {}; MXFP4 needs one scale per 32 inputs: {}",
              src_.where(), scale_name, shape_string(s.shape()), shape_string({out, in / 32}));
        check(s.dtype() == DType::F8_E8M0, "{}: scale '{}' has dtype {} (expected F8_E8M0)", src_.where(), scale_name,
              dtype_name(s.dtype()));
        check_scale_values(scale_name, s);
        w.weight = t;
        w.scale = s;
        w.f32 = Tensor::empty(DType::F32, {out, in});
        kernels::cpu::mxfp4_weight_dequantize(t.data<uint8_t>(), s.data<uint8_t>(), out, in, w.f32.f32());
        break;
      }
    }
    return w;
  }

  // Which formats a linear of this role may have, given config.json (errors name the tensor and the rule).
  void check_format_allowed(const std::string& wname, DType dtype, WeightFormat format, ParamKind kind) {
    const bool quantized_config = c_.quantization.has_value();
    const std::string stored = format == WeightFormat::Mxfp4
                                   ? "packed FP4 (" + std::string(dtype_name(dtype)) + ")"
                                   : std::string(dtype_name(dtype));
    if (format == WeightFormat::Dense) {
      if (kind == ParamKind::QuantizableLinear)
        check(!quantized_config, "{}: config.json has a quantization_config (an FP8 checkpoint) but tensor '{}' is "
              "{}; an FP8 checkpoint stores this linear as F8_E4M3 with 128x128 block scales",
              src_.where(), wname, stored);
      if (kind == ParamKind::ExpertLinear && (quantized_config || !c_.expert_dtype.empty()))
        fail("{}: config.json {} but routed expert tensor '{}' is {}; expected {}", src_.where(),
             c_.expert_dtype.empty() ? std::string("has a quantization_config (an FP8 checkpoint)")
                                     : "says expert_dtype '" + c_.expert_dtype + "'",
             wname, stored, expected_expert_format());
      return;
    }
    check(kind != ParamKind::UnquantizedLinear, "{}: tensor '{}' is {} but DeepSeek-V4 keeps this linear "
          "unquantized (BF16/F32: the compressors, the indexer's weights_proj, the router gate and the head run "
          "without FP8)", src_.where(), wname, stored);
    if (format == WeightFormat::Mxfp4)
      check(kind == ParamKind::ExpertLinear, "{}: tensor '{}' is {} but only routed experts may be FP4",
            src_.where(), wname, stored);
    check(quantized_config, "{}: tensor '{}' is {} but config.json has no quantization_config", src_.where(), wname,
          stored);
    if (kind != ParamKind::ExpertLinear) return;
    if (!c_.expert_dtype.empty()) {
      const WeightFormat want = c_.expert_dtype == "fp4" ? WeightFormat::Mxfp4 : WeightFormat::Fp8Block;
      check(format == want, "{}: config.json says expert_dtype '{}' but routed expert tensor '{}' is {}; expected {}",
            src_.where(), c_.expert_dtype, wname, stored, expected_expert_format());
    }
    // Without expert_dtype (early V4-Pro configs) either format loads, but all routed experts must agree.
    if (!expert_format_) {
      expert_format_ = format;
      expert_format_tensor_ = wname;
    }
    check(*expert_format_ == format, "{}: routed expert tensor '{}' is {} but '{}' is {}; all routed experts must "
          "share one format", src_.where(), wname, weight_format_name(format), expert_format_tensor_,
          weight_format_name(*expert_format_));
  }

  std::string expected_expert_format() const {
    if (c_.expert_dtype == "fp4") return "packed FP4 (I8, two e2m1 per byte) with per-32 E8M0 scales";
    return "F8_E4M3 with 128x128 block scales";
  }

  // E8M0 0xff is NaN; F32 scales must be positive and finite.
  void check_scale_values(const std::string& name, const Tensor& s) {
    for (int64_t i = 0; i < s.numel(); ++i) {
      const bool ok = s.dtype() == DType::F8_E8M0 ? s.data<uint8_t>()[i] != 0xff
                                                  : (std::isfinite(s.data<float>()[i]) && s.data<float>()[i] > 0);
      if (!ok)
        fail("{}: scale '{}' holds {} at flat index {} (expected a positive finite scale)", src_.where(), name,
             s.dtype() == DType::F8_E8M0 ? std::string("the E8M0 NaN byte 0xff")
                                         : fmt::format("{}", s.data<float>()[i]),
             i);
    }
  }

  CompressorWeights compressor(const std::string& prefix, int64_t ratio, int64_t dim, bool overlap) {
    CompressorWeights w;
    w.ratio = ratio;
    w.dim = dim;
    w.overlap = overlap;
    int64_t width = (overlap ? 2 : 1) * dim;
    w.wkv = linear(prefix + ".wkv", width, c_.hidden_size, ParamKind::UnquantizedLinear);
    w.wgate = linear(prefix + ".wgate", width, c_.hidden_size, ParamKind::UnquantizedLinear);
    w.ape = small(prefix + ".ape", {ratio, width});
    w.norm = small(prefix + ".norm.weight", {dim});
    return w;
  }

  HcWeights hc(const std::string& prefix) {
    return {small(prefix + "_fn", {c_.hc_mix(), c_.hc_dim()}), small(prefix + "_base", {c_.hc_mix()}),
            small(prefix + "_scale", {3})};
  }

  HcHeadWeights hc_head(const std::string& prefix) {
    return {small(prefix + "_fn", {c_.hc_mult, c_.hc_dim()}), small(prefix + "_base", {c_.hc_mult}),
            small(prefix + "_scale", {1})};
  }

  ExpertWeights expert(const std::string& prefix, bool routed) {
    int64_t d = c_.hidden_size, i = c_.moe_intermediate_size;
    ParamKind kind = routed ? ParamKind::ExpertLinear : ParamKind::QuantizableLinear;
    return {linear(prefix + ".w1", i, d, kind), linear(prefix + ".w2", d, i, kind), linear(prefix + ".w3", i, d, kind)};
  }

  BlockWeights block(const std::string& p, const io::LayerSpec& spec) {
    BlockWeights b;
    const int64_t D = c_.hidden_size, H = c_.num_heads, hd = c_.head_dim;
    b.attn_norm = small(p + ".attn_norm.weight", {D});
    b.ffn_norm = small(p + ".ffn_norm.weight", {D});
    b.hc_attn = hc(p + ".hc_attn");
    b.hc_ffn = hc(p + ".hc_ffn");
    AttentionWeights& a = b.attn;
    a.wq_a = linear(p + ".attn.wq_a", c_.q_lora_rank, D, ParamKind::QuantizableLinear);
    a.q_norm = small(p + ".attn.q_norm.weight", {c_.q_lora_rank});
    a.wq_b = linear(p + ".attn.wq_b", H * hd, c_.q_lora_rank, ParamKind::QuantizableLinear);
    a.wkv = linear(p + ".attn.wkv", hd, D, ParamKind::QuantizableLinear);
    a.kv_norm = small(p + ".attn.kv_norm.weight", {hd});
    a.wo_a = linear(p + ".attn.wo_a", c_.o_groups * c_.o_lora_rank, H * hd / c_.o_groups, ParamKind::QuantizableLinear);
    a.wo_b = linear(p + ".attn.wo_b", D, c_.o_groups * c_.o_lora_rank, ParamKind::QuantizableLinear);
    a.sink = small(p + ".attn.attn_sink", {H});
    if (spec.attention != io::AttentionKind::Sliding) {
      bool csa = spec.attention == io::AttentionKind::CSA;
      a.compressor = compressor(p + ".attn.compressor", spec.compress_ratio, hd, csa);
      if (csa) {
        IndexerWeights ix;
        ix.wq_b = linear(p + ".attn.indexer.wq_b", c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank, ParamKind::QuantizableLinear);
        ix.weights_proj = linear(p + ".attn.indexer.weights_proj", c_.index_n_heads, D, ParamKind::UnquantizedLinear);
        ix.compressor = compressor(p + ".attn.indexer.compressor", spec.compress_ratio, c_.index_head_dim, true);
        a.indexer = std::move(ix);
      }
    }
    MoeWeights& m = b.ffn;
    m.gate = linear(p + ".ffn.gate", c_.n_routed_experts, D, ParamKind::UnquantizedLinear);
    if (spec.hash_moe) {
      Tensor t = get_shaped(p + ".ffn.gate.tid2eid", {c_.vocab_size, c_.experts_per_token});
      check(t.dtype() == DType::I64 || t.dtype() == DType::I32, "{}: tensor '{}.ffn.gate.tid2eid' has dtype {} "
            "(expected I64 or I32)", src_.where(), p, dtype_name(t.dtype()));
      m.tid2eid = Tensor::empty(DType::I64, t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) {
        int64_t e = t.dtype() == DType::I64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
        check(e >= 0 && e < c_.n_routed_experts, "{}: '{}.ffn.gate.tid2eid' holds expert {} (expected 0..{})",
              src_.where(), p, e, c_.n_routed_experts - 1);
        m.tid2eid.data<int64_t>()[i] = e;
      }
    } else {
      m.bias = small(p + ".ffn.gate.bias", {c_.n_routed_experts});
    }
    m.experts.reserve(size_t(c_.n_routed_experts));
    for (int64_t e = 0; e < c_.n_routed_experts; ++e)
      m.experts.push_back(expert(p + ".ffn.experts." + std::to_string(e), true));
    m.shared = expert(p + ".ffn.shared_experts", false);
    return b;
  }

  ModelWeights model(const LoadOptions& options) {
    ModelWeights w;
    const int64_t D = c_.hidden_size;
    w.embed = small("embed.weight", {c_.vocab_size, D});
    w.head = linear("head", c_.vocab_size, D, ParamKind::UnquantizedLinear);
    w.norm = small("norm.weight", {D});
    w.hc_head = hc_head("hc_head");
    for (int64_t l = 0; l < c_.num_layers; ++l)
      w.layers.push_back(block("layers." + std::to_string(l), c_.layers[size_t(l)]));
    if (options.load_mtp) {
      for (int64_t i = 0; i < c_.num_mtp_layers; ++i) {
        std::string p = "mtp." + std::to_string(i);
        if (!src_.has(p + ".e_proj.weight")) break;  // checkpoints without MTP weights load without speculation
        MtpWeights m;
        m.e_proj = linear(p + ".e_proj", D, D, ParamKind::QuantizableLinear);
        m.h_proj = linear(p + ".h_proj", D, D, ParamKind::QuantizableLinear);
        m.enorm = small(p + ".enorm.weight", {D});
        m.hnorm = small(p + ".hnorm.weight", {D});
        m.norm = small(p + ".norm.weight", {D});
        m.hc_head = hc_head(p + ".hc_head");
        m.block = block(p, mtp_layer_spec());
        w.mtp.push_back(std::move(m));
      }
    }
    return w;
  }

 private:
  const io::ModelConfig& c_;
  const TensorSource& src_;
  std::optional<WeightFormat> expert_format_;  // of the first routed expert tensor, when expert_dtype is unset
  std::string expert_format_tensor_;
};

}  // namespace

ModelWeights load_weights(const io::ModelConfig& config, const TensorSource& source, const LoadOptions& options) {
  return Loader(config, source).model(options);
}

LinearWeight load_linear(const io::ModelConfig& config, const TensorSource& source, const std::string& name,
                         int64_t out, int64_t in, ParamKind kind) {
  return Loader(config, source).linear(name, out, in, kind);
}

}  // namespace moeserve::model
