#pragma once
// The DeepSeek-V4 model configuration, read from config.json in either form:
//  - HF transformers form: layer_types, compress_rates, mlp_layer_types, rope_parameters {main, compress},
//    partial_rotary_factor;
//  - official form (the checkpoints' config.json): compress_ratios (one per layer, plus MTP entries;
//    4 = overlapping CSA with an indexer, 0 = window only, other = HCA), num_hash_layers,
//    qk_rope_head_dim, rope_scaling (YaRN), quantization_config.
// Every field the forward relies on is validated; errors name the file and the field.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace moeserve::io {

enum class AttentionKind { Sliding, CSA, HCA };
const char* attention_kind_name(AttentionKind kind);

struct RopeSpec {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  double original_max_position = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 1.0;  // multiplies cos/sin; DeepSeek-V4 uses 1 (no mscale)
  bool truncate = true;
};

struct QuantizationConfig {
  std::string quant_method;      // "fp8"
  std::string fmt;               // "e4m3"
  std::string scale_fmt;         // "ue8m0" or "" (fp32 scales)
  int64_t block_rows = 128, block_cols = 128;
  std::string activation_scheme;  // "dynamic"
};

struct LayerSpec {
  AttentionKind attention = AttentionKind::Sliding;
  int64_t compress_ratio = 0;  // 0 for window-only layers
  bool hash_moe = false;
};

struct ModelConfig {
  std::string source;  // file it came from, for messages
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t rope_dim = 0;  // trailing rotary dims of each head
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 1;
  int64_t experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  std::string scoring_func = "sqrtsoftplus";  // sqrtsoftplus | softmax | sigmoid
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;  // 0 = no clamp
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t sliding_window = 0;
  RopeSpec rope_main, rope_compress;
  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;
  int64_t num_mtp_layers = 0;
  int64_t max_position_embeddings = 0;
  int64_t bos_token_id = 0;
  std::vector<int64_t> eos_token_ids;
  std::vector<LayerSpec> layers;  // main layers only
  std::optional<QuantizationConfig> quantization;
  std::string expert_dtype;  // "" (same as the rest), "fp4" or "fp8"

  int64_t hc_dim() const { return hc_mult * hidden_size; }
  int64_t hc_mix() const { return (2 + hc_mult) * hc_mult; }
  int64_t nope_dim() const { return head_dim - rope_dim; }
  const RopeSpec& rope_for(const LayerSpec& layer) const {
    return layer.attention == AttentionKind::Sliding ? rope_main : rope_compress;
  }
};

ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source);
ModelConfig load_model_config(const std::string& path);  // a config.json file
// Keeps the first n main layers (n <= 0 or >= num_layers: all): --num-layers of dummy weights.
void keep_first_layers(ModelConfig& config, int64_t n);

// Writes the official form (compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling).
nlohmann::json model_config_to_official_json(const ModelConfig& config);

}  // namespace moeserve::io
