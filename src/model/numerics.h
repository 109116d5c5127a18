#pragma once
// Which of DeepSeek-V4's training-time quantization semantics the forward applies.
//  reference:  none (exact fp32 math on the stored weights; the HF transformers parity path);
//  checkpoint: FP8 activations before every FP8/FP4 linear, FP8 simulation of the non-RoPE KV dims (window
//              KV and compressed entries), Hadamard + FP4 simulation of the indexer's queries and keys.
#include <string>

namespace moeserve::model {

struct Numerics {
  bool act_fp8 = false;
  bool kv_fp8 = false;
  bool indexer_fp4 = false;

  static Numerics reference() { return {}; }
  static Numerics checkpoint() { return {true, true, true}; }
  // "reference" | "checkpoint"; throws on anything else.
  static Numerics parse(const std::string& name);
};

}  // namespace moeserve::model
