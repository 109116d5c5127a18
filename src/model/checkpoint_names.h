#pragma once
// The three tensor-name dialects a DeepSeek-V4 checkpoint comes in, all read through official names:
//  - Official DeepSeek names of the real checkpoints: embed.weight, layers.0.attn.kv_norm.weight,
//    layers.0.ffn.experts.5.w1.weight, hc_head_fn, mtp.0.*;
//  - what transformers' save_pretrained writes: "model." + official names, with the quirks
//    model.embed_tokens.weight, bare head.weight, model.norm.weight, model.hc_head.hc_{fn,base,scale} and
//    model.layers.L.attn.norm.weight for the attention kv_norm;
//  - transformers' module names: model.layers.L.self_attn.q_a_proj.weight, ..., with stacked experts
//    mlp.experts.gate_up_proj [E, 2I, D] (w1 rows then w3 rows) and mlp.experts.down_proj [E, D, I].
#include <string>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace moeserve::model {

enum class NameDialect { Official, HfSavePretrained, HfModules };
const char* dialect_name(NameDialect dialect);

// The name `official` is stored under in a checkpoint of `dialect` (for stacked HF-module experts: the name of
// the stacked tensor that holds it).
std::string name_in_dialect(const std::string& official, NameDialect dialect);

// Reads tensors by official name from a checkpoint of any dialect.
class TensorSource {
 public:
  explicit TensorSource(io::Checkpoint checkpoint);
  NameDialect dialect() const { return dialect_; }
  const std::string& where() const { return checkpoint_.source(); }
  bool has(const std::string& official) const;
  // The tensor (a view into the mapping; expert slices of stacked tensors are views too).
  Tensor get(const std::string& official) const;
  // The name this dialect stores `official` under (for messages).
  std::string stored_name(const std::string& official) const;
  const io::Checkpoint& checkpoint() const { return checkpoint_; }

 private:
  io::Checkpoint checkpoint_;
  NameDialect dialect_;
};

}  // namespace moeserve::model
