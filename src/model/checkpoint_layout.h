#pragma once
// Every parameter tensor of a DeepSeek-V4 checkpoint, by official name, with the form the official checkpoints
// store it in (docs/numerics.md; the official inference code's Linear dtypes):
//  - linears the official code keeps unquantized (BF16 on disk): compressor wkv/wgate, indexer weights_proj,
//    router gate, head;
//  - linears that are FP8 (128x128 E8M0 block scales) in quantized checkpoints: wq_a, wq_b, wkv, wo_a (the
//    official code dequantizes it to BF16 at load and never quantizes its input), wo_b, indexer wq_b, shared
//    experts, MTP e_proj/h_proj;
//  - routed experts: FP8, or MXFP4 (e2m1 + per-32 E8M0) in FP4 checkpoints;
//  - BF16 parameters: embed, norms; F32 parameters: hc_*, compressor ape, attn_sink, router bias; I64 tid2eid.
// The loader (weights.cpp) checks tensors against these roles; `moeserve convert` walks this list.
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/model_config.h"

namespace moeserve::model {

enum class ParamKind {
  UnquantizedLinear,  // BF16 in every checkpoint
  QuantizableLinear,  // FP8 in quantized checkpoints, else BF16
  ExpertLinear,       // routed expert: FP8 or MXFP4 in quantized checkpoints, else BF16
  Bf16Param,
  F32Param,
  IndexParam,  // I64 (tid2eid)
};
const char* param_kind_name(ParamKind kind);
inline bool is_linear(ParamKind kind) {
  return kind == ParamKind::UnquantizedLinear || kind == ParamKind::QuantizableLinear || kind == ParamKind::ExpertLinear;
}

struct ParamSpec {
  std::string name;  // linears: the prefix ("layers.0.attn.wq_a"; tensors prefix.weight and prefix.scale); else the tensor
  ParamKind kind;
  Shape shape;  // linears: the logical [out, in]
};

// The main model's parameters, then those of the first `mtp_layers` MTP blocks, in a stable order
// (embed, head, final norm and hc_head, then layer by layer).
std::vector<ParamSpec> checkpoint_layout(const io::ModelConfig& config, int64_t mtp_layers);

}  // namespace moeserve::model
