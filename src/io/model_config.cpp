#include "io/model_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"

namespace moeserve::io {

using nlohmann::json;

const char* attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::Sliding: return "sliding_attention";
    case AttentionKind::CSA: return "compressed_sparse_attention";
    case AttentionKind::HCA: return "heavily_compressed_attention";
  }
  return "?";
}

namespace {

// Every integer of a config is at most this (2^24: 16x V4's context, 130x its vocabulary), so that the sizes
// the planner and the loaders multiply stay far inside 64 bits; the layer count has its own, smaller bound.
constexpr int64_t kMaxConfigInteger = int64_t(1) << 24;
constexpr int64_t kMaxLayers = 4096;

struct Reader {
  const json& j;
  const std::string& source;

  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt, int64_t min = 1,
                  int64_t max = kMaxConfigInteger) const {
    if (!has(key)) {
      check(fallback.has_value(), "{}: missing config field '{}' (expected an integer >= {})", source, key, min);
      return *fallback;
    }
    const json& v = j[key];
    // Range-checked as a double first: a float form past int64 must not reach the conversion.
    const double as_double = v.is_number() ? v.get<double>() : 0.0;
    bool integral = v.is_number_integer() || (v.is_number_float() && std::floor(as_double) == as_double);
    check(integral, "{}: config field '{}' must be an integer, got {}", source, key, v.dump());
    check(as_double >= double(min) && as_double <= double(max), "{}: config field '{}' = {} must be between {} and {}",
          source, key, v.dump(), min, max);
    return v.is_number_integer() ? v.get<int64_t>() : int64_t(as_double);
  }

  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    check(j[key].is_number(), "{}: config field '{}' must be a number, got {}", source, key, j[key].dump());
    return j[key].get<double>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    check(j[key].is_string(), "{}: config field '{}' must be a string, got {}", source, key, j[key].dump());
    return j[key].get<std::string>();
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    check(j[key].is_boolean(), "{}: config field '{}' must be true or false, got {}", source, key, j[key].dump());
    return j[key].get<bool>();
  }
};

RopeSpec parse_rope_dict(const json& d, const std::string& source, const std::string& where, double theta_fallback) {
  check(d.is_object(), "{}: {} must be an object", source, where);
  Reader r{d, source};
  RopeSpec spec;
  spec.theta = r.number("rope_theta", theta_fallback);
  std::string type = r.string("rope_type", r.string("type", "default"));
  check(type == "default" || type == "yarn", "{}: {}.rope_type '{}' is not supported (expected default or yarn)",
        source, where, type);
  if (type == "yarn") {
    spec.yarn = true;
    check(r.has("factor"), "{}: {}: yarn needs 'factor'", source, where);
    check(r.has("original_max_position_embeddings"), "{}: {}: yarn needs 'original_max_position_embeddings'",
          source, where);
    spec.factor = r.number("factor", 1.0);
    spec.original_max_position = r.number("original_max_position_embeddings", 0);
    check(spec.factor > 0 && spec.original_max_position > 0,
          "{}: {}: yarn factor and original_max_position_embeddings must be positive", source, where);
    // HF reads these with `or`, so 0 falls back to the defaults.
    double fast = r.number("beta_fast", 0), slow = r.number("beta_slow", 0);
    spec.beta_fast = fast ? fast : 32.0;
    spec.beta_slow = slow ? slow : 1.0;
    spec.attention_factor = r.number("attention_factor", 1.0);
    spec.truncate = r.boolean("truncate", true);
  }
  check(spec.theta > 0, "{}: {}.rope_theta must be positive", source, where);
  return spec;
}

AttentionKind kind_from_name(const std::string& name, const std::string& source, size_t layer) {
  if (name == "sliding_attention") return AttentionKind::Sliding;
  if (name == "compressed_sparse_attention") return AttentionKind::CSA;
  if (name == "heavily_compressed_attention") return AttentionKind::HCA;
  fail("{}: layer_types[{}] = '{}' (expected sliding_attention, compressed_sparse_attention or "
       "heavily_compressed_attention)",
       source, layer, name);
}

}  // namespace

ModelConfig parse_model_config(const json& j, const std::string& source) {
  check(j.is_object(), "{}: config must be a JSON object", source);
  Reader r{j, source};
  ModelConfig c;
  c.source = source;
  if (r.has("model_type")) {
    std::string type = r.string("model_type", "");
    check(type == "deepseek_v4", "{}: model_type is '{}' (expected 'deepseek_v4')", source, type);
  }
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.num_layers = r.integer("num_hidden_layers", std::nullopt, 1, kMaxLayers);
  c.num_heads = r.integer("num_attention_heads");
  int64_t kv_heads = r.integer("num_key_value_heads", 1);
  check(kv_heads == 1, "{}: num_key_value_heads = {} (DeepSeek-V4 uses one shared KV head: expected 1)", source,
        kv_heads);
  c.head_dim = r.integer("head_dim");
  c.q_lora_rank = r.integer("q_lora_rank");
  c.o_groups = r.integer("o_groups");
  c.o_lora_rank = r.integer("o_lora_rank");
  c.n_routed_experts = r.integer("n_routed_experts");
  c.n_shared_experts = r.integer("n_shared_experts", 1);
  check(c.n_shared_experts == 1, "{}: n_shared_experts = {} (expected 1)", source, c.n_shared_experts);
  c.experts_per_token = r.integer("num_experts_per_tok");
  c.moe_intermediate_size = r.integer("moe_intermediate_size");
  c.scoring_func = r.string("scoring_func", "sqrtsoftplus");
  check(c.scoring_func == "sqrtsoftplus" || c.scoring_func == "softmax" || c.scoring_func == "sigmoid",
        "{}: scoring_func '{}' (expected sqrtsoftplus, softmax or sigmoid)", source, c.scoring_func);
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  c.routed_scaling_factor = r.number("routed_scaling_factor", 1.0);
  c.swiglu_limit = r.number("swiglu_limit", 10.0);
  check(c.swiglu_limit >= 0, "{}: swiglu_limit must be >= 0", source);
  c.index_n_heads = r.integer("index_n_heads", 64);
  c.index_head_dim = r.integer("index_head_dim", 128);
  c.index_topk = r.integer("index_topk", 512);
  c.sliding_window = r.integer("sliding_window", 128);
  c.hc_mult = r.integer("hc_mult", 4);
  c.hc_sinkhorn_iters = r.integer("hc_sinkhorn_iters", 20);
  c.hc_eps = r.number("hc_eps", 1e-6);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.num_mtp_layers = r.integer("num_nextn_predict_layers", 0, 0);
  c.max_position_embeddings = r.integer("max_position_embeddings", 1 << 20);
  c.bos_token_id = r.integer("bos_token_id", 0, 0);
  if (r.has("eos_token_id")) {
    const json& e = j["eos_token_id"];
    if (e.is_array()) {
      for (const auto& id : e) {
        check(id.is_number_integer(), "{}: eos_token_id entries must be integers", source);
        c.eos_token_ids.push_back(id.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(r.integer("eos_token_id", 1, 0));
    }
  } else {
    c.eos_token_ids.push_back(1);
  }
  // Special ids index the embedding and the logits: one outside the vocabulary would make a stop condition that can
  // never fire (or a BOS the embedding cannot look up), so it is an error here rather than a silent never-stop.
  check(c.bos_token_id < c.vocab_size, "{}: bos_token_id = {} must be below vocab_size = {}", source, c.bos_token_id,
        c.vocab_size);
  for (int64_t id : c.eos_token_ids)
    check(id >= 0 && id < c.vocab_size, "{}: eos_token_id {} must be in [0, vocab_size = {})", source, id,
          c.vocab_size);
  check(!r.boolean("tie_word_embeddings", false), "{}: tie_word_embeddings must be false for DeepSeek-V4", source);

  // Rotary dims: partial_rotary_factor (HF) or qk_rope_head_dim (official); they must agree when both are given.
  int64_t rope_dim = 0;
  if (r.has("qk_rope_head_dim")) rope_dim = r.integer("qk_rope_head_dim");
  if (r.has("partial_rotary_factor")) {
    double factor = r.number("partial_rotary_factor", 0);
    check(factor > 0 && factor <= 1, "{}: partial_rotary_factor = {} must be in (0, 1]", source, factor);
    int64_t from_factor = int64_t(double(c.head_dim) * factor);
    check(rope_dim == 0 || rope_dim == from_factor,
          "{}: qk_rope_head_dim = {} contradicts partial_rotary_factor = {} (head_dim {} gives {})", source, rope_dim,
          factor, c.head_dim, from_factor);
    rope_dim = from_factor;
  }
  c.rope_dim = rope_dim ? rope_dim : 64;
  check(c.rope_dim > 0 && c.rope_dim % 2 == 0 && c.rope_dim <= c.head_dim,
        "{}: rotary dims {} must be even and at most head_dim {}", source, c.rope_dim, c.head_dim);
  check(c.rope_dim <= c.index_head_dim, "{}: rotary dims {} must be at most index_head_dim {}", source, c.rope_dim,
        c.index_head_dim);

  // RoPE: nested rope_parameters {main, compress} (HF), or flat rope_parameters / rope_scaling (official).
  double theta_main = r.number("rope_theta", 10000.0);
  double theta_compress = r.number("compress_rope_theta", 160000.0);
  const json* rp = r.has("rope_parameters") ? &j["rope_parameters"] : nullptr;
  if (rp && rp->is_object() && rp->contains("main") && rp->contains("compress")) {
    c.rope_main = parse_rope_dict((*rp)["main"], source, "rope_parameters.main", theta_main);
    c.rope_compress = parse_rope_dict((*rp)["compress"], source, "rope_parameters.compress", theta_compress);
  } else {
    const json* scaling = rp ? rp : (r.has("rope_scaling") ? &j["rope_scaling"] : nullptr);
    c.rope_main.theta = theta_main;
    if (scaling) {
      json compress = *scaling;
      compress["rope_theta"] = theta_compress;
      c.rope_compress = parse_rope_dict(compress, source, rp ? "rope_parameters" : "rope_scaling", theta_compress);
    } else {
      c.rope_compress.theta = theta_compress;
    }
  }
  check(!c.rope_main.yarn, "{}: the main (window-only) rope must not use yarn", source);

  // Layer schedule.
  std::map<std::string, int64_t> rates = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
  if (r.has("compress_rates")) {
    check(j["compress_rates"].is_object(), "{}: compress_rates must be an object", source);
    for (auto it = j["compress_rates"].begin(); it != j["compress_rates"].end(); ++it) {
      check(it.value().is_number_integer() && it.value().get<int64_t>() > 1 &&
                it.value().get<int64_t>() <= kMaxConfigInteger,
            "{}: compress_rates['{}'] must be an integer between 2 and {}", source, it.key(), kMaxConfigInteger);
      rates[it.key()] = it.value().get<int64_t>();
    }
  }
  if (r.has("compress_rate_csa")) rates["compressed_sparse_attention"] = r.integer("compress_rate_csa", 4, 2);
  if (r.has("compress_rate_hca")) rates["heavily_compressed_attention"] = r.integer("compress_rate_hca", 128, 2);

  c.layers.resize(size_t(c.num_layers));
  bool have_types = r.has("layer_types"), have_ratios = r.has("compress_ratios");
  check(have_types || have_ratios, "{}: missing layer schedule: expected 'layer_types' (HF form) or "
        "'compress_ratios' (official form)", source);
  if (have_ratios) {
    const json& ratios = j["compress_ratios"];
    check(ratios.is_array() && int64_t(ratios.size()) >= c.num_layers,
          "{}: compress_ratios must be an array of at least num_hidden_layers = {} integers", source, c.num_layers);
    for (int64_t i = 0; i < c.num_layers; ++i) {
      check(ratios[i].is_number_integer() && ratios[i].get<int64_t>() >= 0 && ratios[i].get<int64_t>() != 1 &&
                ratios[i].get<int64_t>() <= kMaxConfigInteger,
            "{}: compress_ratios[{}] = {} (expected 0 or an integer from 2 to {})", source, i, ratios[i].dump(),
            kMaxConfigInteger);
      int64_t ratio = ratios[i].get<int64_t>();
      LayerSpec& layer = c.layers[size_t(i)];
      layer.compress_ratio = ratio;
      layer.attention = ratio == 0 ? AttentionKind::Sliding : ratio == 4 ? AttentionKind::CSA : AttentionKind::HCA;
    }
  }
  if (have_types) {
    const json& types = j["layer_types"];
    check(types.is_array() && int64_t(types.size()) >= c.num_layers,
          "{}: layer_types must be an array of num_hidden_layers = {} names", source, c.num_layers);
    for (int64_t i = 0; i < c.num_layers; ++i) {
      check(types[i].is_string(), "{}: layer_types[{}] must be a string", source, i);
      AttentionKind kind = kind_from_name(types[i].get<std::string>(), source, size_t(i));
      int64_t ratio = kind == AttentionKind::Sliding ? 0 : rates.at(attention_kind_name(kind));
      LayerSpec& layer = c.layers[size_t(i)];
      if (have_ratios)
        check(layer.attention == kind && layer.compress_ratio == ratio,
              "{}: layer {}: layer_types says {} (ratio {}) but compress_ratios says ratio {}", source, i,
              attention_kind_name(kind), ratio, layer.compress_ratio);
      layer.attention = kind;
      layer.compress_ratio = ratio;
    }
  }

  // MoE schedule: mlp_layer_types (HF) or num_hash_layers (official, default 3).
  int64_t n_hash = r.has("num_hash_layers") ? r.integer("num_hash_layers", 3, 0) : -1;
  if (r.has("mlp_layer_types")) {
    const json& types = j["mlp_layer_types"];
    check(types.is_array() && int64_t(types.size()) >= c.num_layers,
          "{}: mlp_layer_types must be an array of num_hidden_layers = {} names", source, c.num_layers);
    int64_t hash_count = 0;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      check(types[i].is_string() && (types[i] == "hash_moe" || types[i] == "moe"),
            "{}: mlp_layer_types[{}] = {} (expected \"hash_moe\" or \"moe\")", source, i, types[i].dump());
      c.layers[size_t(i)].hash_moe = types[i] == "hash_moe";
      hash_count += c.layers[size_t(i)].hash_moe;
    }
    if (n_hash >= 0)
      for (int64_t i = 0; i < c.num_layers; ++i)
        check(c.layers[size_t(i)].hash_moe == (i < n_hash),
              "{}: mlp_layer_types contradicts num_hash_layers = {} at layer {}", source, n_hash, i);
  } else {
    if (n_hash < 0) n_hash = 3;
    for (int64_t i = 0; i < c.num_layers; ++i) c.layers[size_t(i)].hash_moe = i < n_hash;
  }

  // Geometry checks the forward relies on.
  check(c.num_heads * c.head_dim % c.o_groups == 0, "{}: num_attention_heads * head_dim = {} is not divisible by "
        "o_groups = {}", source, c.num_heads * c.head_dim, c.o_groups);
  check(c.num_heads % c.o_groups == 0, "{}: num_attention_heads = {} is not divisible by o_groups = {}", source,
        c.num_heads, c.o_groups);
  check(c.experts_per_token <= c.n_routed_experts, "{}: num_experts_per_tok = {} exceeds n_routed_experts = {}",
        source, c.experts_per_token, c.n_routed_experts);
  check(c.hc_eps >= 0 && c.rms_norm_eps > 0, "{}: hc_eps and rms_norm_eps must be positive", source);
  // The fields are bounded one by one; their products too, through a rough count of the largest weights (in
  // double, so that the check itself cannot overflow): the exact counts downstream then fit 64 bits many times over.
  const double h = double(c.hidden_size), hd = double(c.num_heads) * double(c.head_dim);
  const double per_layer = 3.0 * double(c.n_routed_experts + 1) * double(c.moe_intermediate_size) * h +
                           double(c.q_lora_rank) * (h + hd + double(c.index_n_heads) * double(c.index_head_dim)) +
                           hd * double(c.o_lora_rank) + double(c.o_groups) * double(c.o_lora_rank) * h +
                           double(c.n_routed_experts) * h + h * double(c.head_dim);
  const double weights = double(c.num_layers) * per_layer + 2.0 * double(c.vocab_size) * h;
  check(weights <= 0x1p48, "{}: the config describes ~{:.3g} weights; at most 2^48 (~2.8e14) are supported", source,
        weights);

  if (r.has("quantization_config")) {
    const json& q = j["quantization_config"];
    check(q.is_object(), "{}: quantization_config must be an object", source);
    Reader qr{q, source};
    QuantizationConfig qc;
    qc.quant_method = qr.string("quant_method", "");
    check(qc.quant_method == "fp8", "{}: quantization_config.quant_method '{}' (expected 'fp8')", source,
          qc.quant_method);
    qc.fmt = qr.string("fmt", "e4m3");
    check(qc.fmt == "e4m3", "{}: quantization_config.fmt '{}' (expected 'e4m3')", source, qc.fmt);
    qc.scale_fmt = qr.string("scale_fmt", "");
    check(qc.scale_fmt.empty() || qc.scale_fmt == "ue8m0",
          "{}: quantization_config.scale_fmt '{}' (expected 'ue8m0' or absent)", source, qc.scale_fmt);
    qc.activation_scheme = qr.string("activation_scheme", "dynamic");
    if (q.contains("weight_block_size")) {
      const json& b = q["weight_block_size"];
      check(b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer(),
            "{}: quantization_config.weight_block_size must be [rows, cols]", source);
      qc.block_rows = b[0].get<int64_t>();
      qc.block_cols = b[1].get<int64_t>();
      check(qc.block_rows == 128 && qc.block_cols == 128,
            "{}: quantization_config.weight_block_size [{}, {}] (expected [128, 128])", source, qc.block_rows,
            qc.block_cols);
    }
    c.quantization = qc;
  }
  c.expert_dtype = r.string("expert_dtype", "");
  check(c.expert_dtype.empty() || c.expert_dtype == "fp4" || c.expert_dtype == "fp8",
        "{}: expert_dtype '{}' (expected 'fp4' or 'fp8')", source, c.expert_dtype);
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  return parse_model_config(read_json_file(path, "config"), path);
}

void keep_first_layers(ModelConfig& config, int64_t n) {
  if (n <= 0 || n >= config.num_layers) return;
  config.num_layers = n;
  config.layers.resize(size_t(n));
}

json model_config_to_official_json(const ModelConfig& c) {
  json j;
  j["architectures"] = {"DeepseekV4ForCausalLM"};
  j["model_type"] = "deepseek_v4";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = c.head_dim;
  j["qk_rope_head_dim"] = c.rope_dim;
  j["q_lora_rank"] = c.q_lora_rank;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["scoring_func"] = c.scoring_func;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["swiglu_limit"] = c.swiglu_limit;
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["sliding_window"] = c.sliding_window;
  j["rope_theta"] = c.rope_main.theta;
  j["compress_rope_theta"] = c.rope_compress.theta;
  if (c.rope_compress.yarn)
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", c.rope_compress.factor},
                         {"original_max_position_embeddings", c.rope_compress.original_max_position},
                         {"beta_fast", c.rope_compress.beta_fast},
                         {"beta_slow", c.rope_compress.beta_slow}};
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["hc_eps"] = c.hc_eps;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["num_nextn_predict_layers"] = c.num_mtp_layers;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  j["tie_word_embeddings"] = false;
  json ratios = json::array();
  int64_t n_hash = 0;
  for (const auto& layer : c.layers) ratios.push_back(layer.compress_ratio);
  for (int64_t i = 0; i < c.num_mtp_layers; ++i) ratios.push_back(0);
  for (const auto& layer : c.layers) {
    if (!layer.hash_moe) break;
    ++n_hash;
  }
  j["compress_ratios"] = ratios;
  j["num_hash_layers"] = n_hash;
  if (c.quantization) {
    j["quantization_config"] = {{"quant_method", c.quantization->quant_method},
                                {"fmt", c.quantization->fmt},
                                {"activation_scheme", c.quantization->activation_scheme},
                                {"weight_block_size", {c.quantization->block_rows, c.quantization->block_cols}}};
    if (!c.quantization->scale_fmt.empty()) j["quantization_config"]["scale_fmt"] = c.quantization->scale_fmt;
  }
  if (!c.expert_dtype.empty()) j["expert_dtype"] = c.expert_dtype;
  return j;
}

}  // namespace moeserve::io
