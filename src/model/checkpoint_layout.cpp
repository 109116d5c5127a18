#include "model/checkpoint_layout.h"

#include "model/weights.h"

namespace moeserve::model {

const char* param_kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::UnquantizedLinear: return "unquantized linear";
    case ParamKind::QuantizableLinear: return "FP8-quantizable linear";
    case ParamKind::ExpertLinear: return "routed expert linear";
    case ParamKind::Bf16Param: return "BF16 parameter";
    case ParamKind::F32Param: return "F32 parameter";
    case ParamKind::IndexParam: return "I64 table";
  }
  return "?";
}

namespace {

class LayoutBuilder {
 public:
  explicit LayoutBuilder(const io::ModelConfig& config) : c_(config) {}

  void add(std::string name, ParamKind kind, Shape shape) { out_.push_back({std::move(name), kind, std::move(shape)}); }

  void hc(const std::string& prefix) {
    add(prefix + "_fn", ParamKind::F32Param, {c_.hc_mix(), c_.hc_dim()});
    add(prefix + "_base", ParamKind::F32Param, {c_.hc_mix()});
    add(prefix + "_scale", ParamKind::F32Param, {3});
  }

  void hc_head(const std::string& prefix) {
    add(prefix + "_fn", ParamKind::F32Param, {c_.hc_mult, c_.hc_dim()});
    add(prefix + "_base", ParamKind::F32Param, {c_.hc_mult});
    add(prefix + "_scale", ParamKind::F32Param, {1});
  }

  void compressor(const std::string& prefix, int64_t ratio, int64_t dim, bool overlap) {
    const int64_t width = (overlap ? 2 : 1) * dim;
    add(prefix + ".wkv", ParamKind::UnquantizedLinear, {width, c_.hidden_size});
    add(prefix + ".wgate", ParamKind::UnquantizedLinear, {width, c_.hidden_size});
    add(prefix + ".ape", ParamKind::F32Param, {ratio, width});
    add(prefix + ".norm.weight", ParamKind::Bf16Param, {dim});
  }

  void expert(const std::string& prefix, ParamKind kind) {
    const int64_t d = c_.hidden_size, i = c_.moe_intermediate_size;
    add(prefix + ".w1", kind, {i, d});
    add(prefix + ".w2", kind, {d, i});
    add(prefix + ".w3", kind, {i, d});
  }

  void block(const std::string& p, const io::LayerSpec& spec) {
    const int64_t D = c_.hidden_size, H = c_.num_heads, hd = c_.head_dim;
    add(p + ".attn_norm.weight", ParamKind::Bf16Param, {D});
    add(p + ".ffn_norm.weight", ParamKind::Bf16Param, {D});
    hc(p + ".hc_attn");
    hc(p + ".hc_ffn");
    add(p + ".attn.wq_a", ParamKind::QuantizableLinear, {c_.q_lora_rank, D});
    add(p + ".attn.q_norm.weight", ParamKind::Bf16Param, {c_.q_lora_rank});
    add(p + ".attn.wq_b", ParamKind::QuantizableLinear, {H * hd, c_.q_lora_rank});
    add(p + ".attn.wkv", ParamKind::QuantizableLinear, {hd, D});
    add(p + ".attn.kv_norm.weight", ParamKind::Bf16Param, {hd});
    add(p + ".attn.wo_a", ParamKind::QuantizableLinear, {c_.o_groups * c_.o_lora_rank, H * hd / c_.o_groups});
    add(p + ".attn.wo_b", ParamKind::QuantizableLinear, {D, c_.o_groups * c_.o_lora_rank});
    add(p + ".attn.attn_sink", ParamKind::F32Param, {H});
    if (spec.attention != io::AttentionKind::Sliding) {
      const bool csa = spec.attention == io::AttentionKind::CSA;
      compressor(p + ".attn.compressor", spec.compress_ratio, hd, csa);
      if (csa) {
        add(p + ".attn.indexer.wq_b", ParamKind::QuantizableLinear,
            {c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank});
        add(p + ".attn.indexer.weights_proj", ParamKind::UnquantizedLinear, {c_.index_n_heads, D});
        compressor(p + ".attn.indexer.compressor", spec.compress_ratio, c_.index_head_dim, true);
      }
    }
    add(p + ".ffn.gate", ParamKind::UnquantizedLinear, {c_.n_routed_experts, D});
    if (spec.hash_moe)
      add(p + ".ffn.gate.tid2eid", ParamKind::IndexParam, {c_.vocab_size, c_.experts_per_token});
    else
      add(p + ".ffn.gate.bias", ParamKind::F32Param, {c_.n_routed_experts});
    for (int64_t e = 0; e < c_.n_routed_experts; ++e)
      expert(p + ".ffn.experts." + std::to_string(e), ParamKind::ExpertLinear);
    expert(p + ".ffn.shared_experts", ParamKind::QuantizableLinear);
  }

  std::vector<ParamSpec> build(int64_t mtp_layers) {
    const int64_t D = c_.hidden_size;
    add("embed.weight", ParamKind::Bf16Param, {c_.vocab_size, D});
    add("head", ParamKind::UnquantizedLinear, {c_.vocab_size, D});
    add("norm.weight", ParamKind::Bf16Param, {D});
    hc_head("hc_head");
    for (int64_t l = 0; l < c_.num_layers; ++l) block("layers." + std::to_string(l), c_.layers[size_t(l)]);
    for (int64_t i = 0; i < mtp_layers; ++i) {
      const std::string p = "mtp." + std::to_string(i);
      add(p + ".e_proj", ParamKind::QuantizableLinear, {D, D});
      add(p + ".h_proj", ParamKind::QuantizableLinear, {D, D});
      add(p + ".enorm.weight", ParamKind::Bf16Param, {D});
      add(p + ".hnorm.weight", ParamKind::Bf16Param, {D});
      add(p + ".norm.weight", ParamKind::Bf16Param, {D});
      hc_head(p + ".hc_head");
      block(p, mtp_layer_spec());
    }
    return std::move(out_);
  }

 private:
  const io::ModelConfig& c_;
  std::vector<ParamSpec> out_;
};

}  // namespace

std::vector<ParamSpec> checkpoint_layout(const io::ModelConfig& config, int64_t mtp_layers) {
  return LayoutBuilder(config).build(mtp_layers);
}

}  // namespace moeserve::model
