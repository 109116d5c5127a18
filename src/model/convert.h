#pragma once
// `moeserve convert`: rewrite a DeepSeek-V4 checkpoint (any naming dialect, any supported format) in the
// official layout as
//  - bf16:      every linear BF16 (quantized sources dequantized);
//  - fp8:       every linear the official FP8 checkpoints quantize (attention wq_a/wq_b/wkv/wo_a/wo_b, indexer
//               wq_b, shared and routed experts, MTP e_proj/h_proj) as F8_E4M3 with one E8M0 scale per 128x128
//               block (power-of-two scales 2^ceil(log2(amax/448)): nothing clips, and dequantizing is exact);
//  - mxfp4-fp8: the same, but routed experts as MXFP4 (e2m1 two per byte, one E8M0 scale per 32 inputs).
// The other parameters take the dtypes of the official checkpoints (BF16 embed/head/norms/compressor/indexer
// weights_proj/router gate; F32 hc, ape, sinks, router bias; I64 tid2eid). MTP tensors are converted when
// present; tensors the layout does not know are copied unchanged. config.json is the source's with
// quantization_config / expert_dtype set for the target; tokenizer files are copied. Output is one
// model.safetensors, or shards plus model.safetensors.index.json when larger than the shard size.
#include <cstdint>
#include <string>
#include <vector>

#include "model/checkpoint_names.h"

namespace moeserve::model {

enum class WeightsTarget { Bf16, Fp8, Mxfp4Fp8 };
const char* weights_target_name(WeightsTarget target);
// "bf16" | "fp8" | "mxfp4-fp8"; throws naming `flag` otherwise.
WeightsTarget parse_weights_target(const std::string& text, const std::string& flag);

struct ConvertOptions {
  WeightsTarget weights = WeightsTarget::Fp8;
  NameDialect names = NameDialect::Official;  // Official or HfSavePretrained
  int64_t max_shard_bytes = 5000000000;  // "5GB", transformers' default max_shard_size
};

struct ConvertReport {
  int64_t tensors = 0;  // tensors written
  int64_t bytes = 0;    // tensor bytes written
  std::vector<std::string> files;        // safetensors files written (names within the output directory)
  std::vector<std::string> passthrough;  // source tensors the layout does not know, copied unchanged
  std::vector<std::string> copied;       // non-weight files copied (tokenizer, generation config)
  int64_t mtp_layers = 0;                // MTP blocks converted
};

// Converts the model directory `from` into `to` (created; must not already hold a model).
ConvertReport convert_checkpoint(const std::string& from, const std::string& to, const ConvertOptions& options);

}  // namespace moeserve::model
