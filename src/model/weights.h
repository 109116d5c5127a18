#pragma once
// DeepSeek-V4 weights, loaded by official name from any dialect and checked against the config.
// Linear weights keep their checkpoint tensors (BF16/F32, FP8 + 128x128 block scales, or packed MXFP4 +
// per-32 scales) for the fast backends, and a dequantized fp32 copy for the CPU reference path.
// Small parameters (norms, hc, sinks, ape, router bias) are fp32 copies.
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/model_config.h"
#include "model/checkpoint_layout.h"
#include "model/checkpoint_names.h"

namespace moeserve::model {

enum class WeightFormat { Dense, Fp8Block, Mxfp4 };
const char* weight_format_name(WeightFormat format);

struct LinearWeight {
  std::string name;
  WeightFormat format = WeightFormat::Dense;
  int64_t out = 0, in = 0;
  Tensor weight;  // as stored: [out, in] BF16/F16/F32 | [out, in] F8_E4M3 | [out, in/2] I8 (two e2m1 per byte)
  Tensor scale;   // Fp8Block: [ceil(out/128), ceil(in/128)] F8_E8M0 or F32; Mxfp4: [out, in/32] F8_E8M0
  Tensor f32;     // dequantized [out, in] fp32 for the CPU reference path
};

struct CompressorWeights {
  int64_t ratio = 0, dim = 0;
  bool overlap = false;  // CSA (ratio 4): two series, each entry spans the previous and current block
  LinearWeight wkv, wgate;  // [coff*dim, hidden], coff = 1 + overlap
  Tensor ape;               // [ratio, coff*dim] fp32, added to the gate scores by slot
  Tensor norm;              // [dim] fp32
};

struct IndexerWeights {
  LinearWeight wq_b;          // [index_heads*index_dim, q_lora_rank]
  LinearWeight weights_proj;  // [index_heads, hidden]
  CompressorWeights compressor;
};

struct AttentionWeights {
  LinearWeight wq_a, wq_b, wkv, wo_a, wo_b;
  Tensor q_norm, kv_norm, sink;  // fp32
  std::optional<CompressorWeights> compressor;
  std::optional<IndexerWeights> indexer;
};

struct HcWeights {
  Tensor fn, base, scale;  // fp32 [mix, hc*D], [mix], [3]
};

struct ExpertWeights {
  LinearWeight w1, w2, w3;  // gate [I, D], down [D, I], up [I, D]
};

struct MoeWeights {
  LinearWeight gate;  // router [E, D] (fp32 math)
  Tensor bias;        // [E] fp32, top-k layers only
  Tensor tid2eid;     // [vocab, k] int64, hash layers only
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

struct BlockWeights {
  Tensor attn_norm, ffn_norm;  // fp32 [D]
  HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
};

struct HcHeadWeights {
  Tensor fn, base, scale;  // fp32 [hc, hc*D], [hc], [1]
};

struct MtpWeights {
  LinearWeight e_proj, h_proj;
  Tensor enorm, hnorm, norm;  // fp32 [D]
  HcHeadWeights hc_head;
  BlockWeights block;  // a window-only block with its own (non-hash) MoE
};

struct ModelWeights {
  Tensor embed;  // [vocab, D] fp32
  LinearWeight head;
  Tensor norm;  // [D] fp32
  HcHeadWeights hc_head;
  std::vector<BlockWeights> layers;
  std::vector<MtpWeights> mtp;  // empty when the checkpoint has no mtp.* tensors
};

struct LoadOptions {
  bool load_mtp = true;  // load mtp.* when present
};

ModelWeights load_weights(const io::ModelConfig& config, const TensorSource& source, const LoadOptions& options = {});

// One linear `name` (tensors name.weight, name.scale) of logical shape [out, in], checked the way load_weights
// checks it against its role and config.json, with its fp32 dequantization (for `moeserve convert`).
LinearWeight load_linear(const io::ModelConfig& config, const TensorSource& source, const std::string& name,
                         int64_t out, int64_t in, ParamKind kind);

// The layer spec of an MTP block: window-only attention, top-k (non-hash) MoE.
io::LayerSpec mtp_layer_spec();

}  // namespace moeserve::model
