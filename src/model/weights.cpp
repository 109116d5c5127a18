#include "model/weights.h"

#include <cmath>

#include "core/threads.h"

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

  LinearWeight linear(const std::string& name, int64_t out, int64_t in, bool expert = false) {
    LinearWeight w;
    w.name = name;
    w.out = out;
    w.in = in;
    std::string wname = name + ".weight";
    Tensor t = src_.get(wname);
    std::string scale_name = name + ".scale";
    switch (t.dtype()) {
      case DType::F32:
      case DType::BF16:
      case DType::F16: {
        w.format = WeightFormat::Dense;
        check(t.shape() == Shape{out, in}, "{}: tensor '{}' has shape {} but the config implies {}", src_.where(),
              wname, shape_string(t.shape()), shape_string({out, in}));
        w.weight = t;
        w.f32 = t.to_f32();
        break;
      }
      case DType::F8_E4M3: {
        w.format = WeightFormat::Fp8Block;
        check(c_.quantization.has_value(), "{}: tensor '{}' is F8_E4M3 but config.json has no quantization_config",
              src_.where(), wname);
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
        w.weight = t;
        w.scale = s;
        w.f32 = dequantize_fp8(t, s, out, in);
        break;
      }
      case DType::I8:
      case DType::U8: {
        w.format = WeightFormat::Mxfp4;
        check(expert, "{}: tensor '{}' is packed FP4 ({}) but only routed experts may be FP4", src_.where(), wname,
              dtype_name(t.dtype()));
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
        w.weight = t;
        w.scale = s;
        w.f32 = dequantize_fp4(t, s, out, in);
        break;
      }
      default:
        fail("{}: tensor '{}' has dtype {}, which a linear weight cannot have (expected BF16, F16, F32, F8_E4M3 "
             "with a scale, or packed FP4 I8 with a scale)",
             src_.where(), wname, dtype_name(t.dtype()));
    }
    return w;
  }

  static Tensor dequantize_fp8(const Tensor& q, const Tensor& s, int64_t out, int64_t in) {
    Tensor w = Tensor::empty(DType::F32, {out, in});
    const uint8_t* qb = q.data<uint8_t>();
    int64_t scale_cols = s.dim(1);
    parallel_for(out, 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t k = 0; k < in; ++k)
          w.f32()[r * in + k] = fp8_e4m3_to_f32(qb[r * in + k]) * element_to_f32(s.dtype(), s.raw(), (r / 128) * scale_cols + k / 128);
    });
    return w;
  }

  static Tensor dequantize_fp4(const Tensor& q, const Tensor& s, int64_t out, int64_t in) {
    Tensor w = Tensor::empty(DType::F32, {out, in});
    const uint8_t* qb = static_cast<const uint8_t*>(q.raw());
    const uint8_t* sb = static_cast<const uint8_t*>(s.raw());
    parallel_for(out, 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t k = 0; k < in; k += 2) {
          uint8_t byte = qb[r * (in / 2) + k / 2];
          float scale = e8m0_to_f32(sb[r * (in / 32) + k / 32]);
          w.f32()[r * in + k] = fp4_e2m1_to_f32(byte & 0xf) * scale;  // low nibble: the even element
          w.f32()[r * in + k + 1] = fp4_e2m1_to_f32(byte >> 4) * scale;
        }
    });
    return w;
  }

  CompressorWeights compressor(const std::string& prefix, int64_t ratio, int64_t dim, bool overlap) {
    CompressorWeights w;
    w.ratio = ratio;
    w.dim = dim;
    w.overlap = overlap;
    int64_t width = (overlap ? 2 : 1) * dim;
    w.wkv = linear(prefix + ".wkv", width, c_.hidden_size);
    w.wgate = linear(prefix + ".wgate", width, c_.hidden_size);
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
    return {linear(prefix + ".w1", i, d, routed), linear(prefix + ".w2", d, i, routed),
            linear(prefix + ".w3", i, d, routed)};
  }

  BlockWeights block(const std::string& p, const io::LayerSpec& spec) {
    BlockWeights b;
    const int64_t D = c_.hidden_size, H = c_.num_heads, hd = c_.head_dim;
    b.attn_norm = small(p + ".attn_norm.weight", {D});
    b.ffn_norm = small(p + ".ffn_norm.weight", {D});
    b.hc_attn = hc(p + ".hc_attn");
    b.hc_ffn = hc(p + ".hc_ffn");
    AttentionWeights& a = b.attn;
    a.wq_a = linear(p + ".attn.wq_a", c_.q_lora_rank, D);
    a.q_norm = small(p + ".attn.q_norm.weight", {c_.q_lora_rank});
    a.wq_b = linear(p + ".attn.wq_b", H * hd, c_.q_lora_rank);
    a.wkv = linear(p + ".attn.wkv", hd, D);
    a.kv_norm = small(p + ".attn.kv_norm.weight", {hd});
    a.wo_a = linear(p + ".attn.wo_a", c_.o_groups * c_.o_lora_rank, H * hd / c_.o_groups);
    a.wo_b = linear(p + ".attn.wo_b", D, c_.o_groups * c_.o_lora_rank);
    a.sink = small(p + ".attn.attn_sink", {H});
    if (spec.attention != io::AttentionKind::Sliding) {
      bool csa = spec.attention == io::AttentionKind::CSA;
      a.compressor = compressor(p + ".attn.compressor", spec.compress_ratio, hd, csa);
      if (csa) {
        IndexerWeights ix;
        ix.wq_b = linear(p + ".attn.indexer.wq_b", c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank);
        ix.weights_proj = linear(p + ".attn.indexer.weights_proj", c_.index_n_heads, D);
        ix.compressor = compressor(p + ".attn.indexer.compressor", spec.compress_ratio, c_.index_head_dim, true);
        a.indexer = std::move(ix);
      }
    }
    MoeWeights& m = b.ffn;
    m.gate = linear(p + ".ffn.gate", c_.n_routed_experts, D);
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
    w.head = linear("head", c_.vocab_size, D);
    w.norm = small("norm.weight", {D});
    w.hc_head = hc_head("hc_head");
    for (int64_t l = 0; l < c_.num_layers; ++l)
      w.layers.push_back(block("layers." + std::to_string(l), c_.layers[size_t(l)]));
    if (options.load_mtp) {
      for (int64_t i = 0; i < c_.num_mtp_layers; ++i) {
        std::string p = "mtp." + std::to_string(i);
        if (!src_.has(p + ".e_proj.weight")) break;  // checkpoints without MTP weights load without speculation
        MtpWeights m;
        m.e_proj = linear(p + ".e_proj", D, D);
        m.h_proj = linear(p + ".h_proj", D, D);
        m.enorm = small(p + ".enorm.weight", {D});
        m.hnorm = small(p + ".hnorm.weight", {D});
        m.norm = small(p + ".norm.weight", {D});
        m.hc_head = hc_head(p + ".hc_head");
        m.block = block(p, mtp_layer_spec());
        w.mtp.push_back(std::move(m));
      }
    }
    if (c_.expert_dtype == "fp4" && !w.layers.empty() && !w.layers[0].ffn.experts.empty())
      check(w.layers[0].ffn.experts[0].w1.format == WeightFormat::Mxfp4,
            "{}: config.json says expert_dtype 'fp4' but '{}' is {}", src_.where(),
            w.layers[0].ffn.experts[0].w1.name + ".weight", weight_format_name(w.layers[0].ffn.experts[0].w1.format));
    return w;
  }

 private:
  const io::ModelConfig& c_;
  const TensorSource& src_;
};

}  // namespace

ModelWeights load_weights(const io::ModelConfig& config, const TensorSource& source, const LoadOptions& options) {
  return Loader(config, source).model(options);
}

}  // namespace moeserve::model
