#include "model/checkpoint_names.h"

#include <regex>
#include <utility>
#include <vector>

namespace moeserve::model {

const char* dialect_name(NameDialect dialect) {
  switch (dialect) {
    case NameDialect::Official: return "official DeepSeek names";
    case NameDialect::HfSavePretrained: return "transformers save_pretrained names";
    case NameDialect::HfModules: return "transformers module names";
  }
  return "?";
}

namespace {

// Official suffix within a layer -> transformers module suffix.
const std::vector<std::pair<std::string, std::string>>& module_suffixes() {
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"hc_attn_fn", "attn_hc.fn"},
      {"hc_attn_base", "attn_hc.base"},
      {"hc_attn_scale", "attn_hc.scale"},
      {"hc_ffn_fn", "ffn_hc.fn"},
      {"hc_ffn_base", "ffn_hc.base"},
      {"hc_ffn_scale", "ffn_hc.scale"},
      {"attn.wq_a.weight", "self_attn.q_a_proj.weight"},
      {"attn.q_norm.weight", "self_attn.q_a_norm.weight"},
      {"attn.wq_b.weight", "self_attn.q_b_proj.weight"},
      {"attn.wkv.weight", "self_attn.kv_proj.weight"},
      {"attn.kv_norm.weight", "self_attn.kv_norm.weight"},
      {"attn.wo_a.weight", "self_attn.o_a_proj.weight"},
      {"attn.wo_b.weight", "self_attn.o_b_proj.weight"},
      {"attn.attn_sink", "self_attn.sinks"},
      {"attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"},
      {"attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"},
      {"attn.compressor.ape", "self_attn.compressor.position_bias"},
      {"attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"},
      {"attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"},
      {"attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"},
      {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
      {"attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"},
      {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"},
      {"attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"},
      {"ffn.gate.weight", "mlp.gate.weight"},
      {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn.gate.tid2eid", "mlp.gate.tid2eid"},
      {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
      {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
      {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
  };
  return table;
}

const std::regex kLayerName(R"(^layers\.(\d+)\.(.*)$)");
const std::regex kExpertName(R"(^layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.weight$)");

NameDialect detect(const io::Checkpoint& ckpt) {
  if (ckpt.has("embed.weight")) return NameDialect::Official;
  for (const auto& [name, entry] : ckpt.entries())
    if (name.find(".self_attn.") != std::string::npos || name.find(".mlp.") != std::string::npos)
      return NameDialect::HfModules;
  if (ckpt.has("model.embed_tokens.weight")) return NameDialect::HfSavePretrained;
  fail("{}: cannot tell the tensor naming (expected 'embed.weight' (official), 'model.embed_tokens.weight' "
       "(transformers) or transformers module names)",
       ckpt.source());
}

}  // namespace

TensorSource::TensorSource(io::Checkpoint checkpoint)
    : checkpoint_(std::move(checkpoint)), dialect_(detect(checkpoint_)) {}

std::string TensorSource::stored_name(const std::string& official) const { return name_in_dialect(official, dialect_); }

std::string name_in_dialect(const std::string& official, NameDialect dialect) {
  if (dialect == NameDialect::Official) return official;
  if (official == "embed.weight") return "model.embed_tokens.weight";
  if (official == "norm.weight") return "model.norm.weight";
  if (official == "head.weight") return dialect == NameDialect::HfModules ? "lm_head.weight" : "head.weight";
  if (official.rfind("hc_head_", 0) == 0) return "model.hc_head.hc_" + official.substr(8);
  std::smatch m;
  if (!std::regex_match(official, m, kLayerName)) return official;  // mtp.* and others: unchanged
  std::string layer = m[1], rest = m[2];
  if (dialect == NameDialect::HfSavePretrained) {
    if (rest == "attn.kv_norm.weight") rest = "attn.norm.weight";
    return "model.layers." + layer + "." + rest;
  }
  std::smatch e;
  if (std::regex_match(official, e, kExpertName))
    return "model.layers." + layer + ".mlp.experts." + (e[3] == "w2" ? "down_proj" : "gate_up_proj");
  for (const auto& [off, mod] : module_suffixes())
    if (rest == off) return "model.layers." + layer + "." + mod;
  return "model.layers." + layer + "." + rest;
}

bool TensorSource::has(const std::string& official) const { return checkpoint_.has(stored_name(official)); }

Tensor TensorSource::get(const std::string& official) const {
  std::string stored = stored_name(official);
  if (!checkpoint_.has(stored)) {
    if (stored == official) fail("{}: missing tensor '{}'", where(), official);
    fail("{}: missing tensor '{}' (stored as '{}' in {})", where(), official, stored, dialect_name(dialect_));
  }
  const Tensor& t = checkpoint_.get(stored).tensor;
  std::smatch e;
  if (dialect_ != NameDialect::HfModules || !std::regex_match(official, e, kExpertName)) return t;
  // Slice one expert out of the stacked tensor: gate_up_proj [E, 2I, D] holds w1 then w3; down_proj [E, D, I].
  int64_t expert = std::stoll(e[2]);
  check(t.rank() == 3 && expert < t.dim(0), "{}: '{}' has shape {}; expected [experts, rows, cols] with more than {} "
        "experts", where(), stored, shape_string(t.shape()), expert);
  Tensor one = t.reshape({t.dim(0), t.dim(1) * t.dim(2)}).slice_rows(expert, expert + 1).reshape({t.dim(1), t.dim(2)});
  if (e[3] == "w2") return one;
  check(t.dim(1) % 2 == 0, "{}: '{}' has an odd gate_up width {}", where(), stored, t.dim(1));
  int64_t half = t.dim(1) / 2;
  return e[3] == "w1" ? one.slice_rows(0, half) : one.slice_rows(half, 2 * half);
}

}  // namespace moeserve::model
