#pragma once
// DeepSeek-V4 weights on the GPU (CUDA backend). BF16 linears stay BF16; FP8 linears stay FP8 e4m3 with their
// 128x128 block scales in fp32 as the block grid in cuBLASLt's BLK128x128 layout, which the GEMVs, the skinny GEMMs
// and cuBLASLt read; where a GEMV cannot read the grid (rows or inputs not 128-aligned, grouped problems not on
// 128-row blocks) or MOESERVE_GEMV_BLOCK_SCALES=0 says not to, also one scale per (row, 128 inputs)
// (kernels/cuda/ops.h gemv's copies per row, 1/32 of the weight bytes). MXFP4 routed
// experts stay MXFP4 (GpuMxfp4Experts, the W4A8 grouped GEMM's packed layout) when the model runs the fast
// numerics with FP8 activations; otherwise (the exact parity numerics) they are expanded to BF16, exactly.
// Small parameters are fp32.
// Built either from loaded ModelWeights or, for performance work, as random weights of a config's shapes
// created directly on the GPU (no files).
#if MOESERVE_WITH_CUDA
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "io/model_config.h"
#include "kernels/cuda/moe_w4a8.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "model/mxfp4_experts.h"
#include "model/weights.h"

namespace moeserve::model {

// Whether the GEMVs read FP8 weights' 128 x 128 grid of scales where a linear has it (the default), or the per-row
// copies (MOESERVE_GEMV_BLOCK_SCALES=0, for A/B runs: the copies add 3 % to a one-row GEMV's bytes).
bool gemv_reads_block_scales();

// A matrix (or a stack of equally shaped matrices, e.g. one per expert) as the GEMMs consume it.
struct GemmView {
  cuda::WeightType type = cuda::WeightType::BF16;
  const void* w = nullptr;          // [N, K]
  const float* row_scale = nullptr;  // FP8: [N, scale_ld], or null where the GEMVs read blk_scale
  int scale_ld = 0;
  const float* blk_scale = nullptr;  // FP8, cuBLASLt layout [N/128, blk_ld]; null when not 128-aligned
  int blk_ld = 0;
  int N = 0, K = 0;
  bool act_quant = false;  // a checkpoint FP8/FP4 linear: the FP8 activation numerics apply
};

struct GpuLinear {
  cuda::WeightType type = cuda::WeightType::BF16;
  int out = 0, in = 0, count = 1;  // count stacked [out, in] matrices
  bool act_quant = false;
  cuda::DeviceBuffer w;
  cuda::DeviceArray<float> row_scale;
  int scale_ld = 0;
  cuda::DeviceArray<float> blk_scale;
  int blk_ld = 0;

  bool defined() const { return out > 0; }
  size_t element_bytes() const { return type == cuda::WeightType::FP8 ? 1 : 2; }
  size_t bytes() const { return w.bytes() + row_scale.bytes() + blk_scale.bytes(); }
  // FP8: whether the per-row copies of the scales are kept beside the grid (`grid`: the linear has one), for GEMVs
  // over problems of group_rows rows (0: the whole matrix).
  static bool keeps_row_copies(bool grid, int group_rows);
  // Matrix `index` of the stack, rows [row_begin, row_begin + rows) (rows < 0: to the end).
  GemmView view(int index = 0, int row_begin = 0, int rows = -1) const;

  // The rows of each part stacked, `count` times (parts[i * per + j]: matrix i, part j). All parts share a
  // format; Dense/MXFP4 parts become BF16. group_rows: as keeps_row_copies.
  static GpuLinear upload(const std::vector<const LinearWeight*>& parts, int count, const std::string& name,
                          int group_rows = 0);
  // Random weights (bf16, or fp8 with random power-of-two block scales) of `count` [out, in] matrices.
  static GpuLinear random(cuda::WeightType type, int out, int in, int count, float scale, uint64_t seed,
                          cudaStream_t stream, const std::string& name, int group_rows = 0);
};

// Routed experts kept MXFP4 in HBM, repacked once for the W4A8 grouped GEMM (kernels/cpu/moe_w4a8_pack.h):
// W13 = [w1 rows; w3 rows] (N = 2I, K = D) and W2 (N = D, K = I) per expert. The same bytes as the
// checkpoint, no dequantized copy.
struct GpuMxfp4Experts {
  int E = 0, D = 0, I = 0;
  cuda::DeviceBuffer w13, w13_flags, w2, w2_flags;

  bool defined() const { return E > 0; }
  size_t bytes() const { return w13.bytes() + w13_flags.bytes() + w2.bytes() + w2_flags.bytes(); }
  cuda::MoeW4A8Weights w13_view() const;
  cuda::MoeW4A8Weights w2_view() const;
  // From the loaded MXFP4 experts (every expert's w1/w3/w2 must be WeightFormat::Mxfp4).
  static GpuMxfp4Experts upload(const std::vector<ExpertWeights>& experts, const std::string& name);
  // Random codes with scales around 1/sqrt(K) (performance work).
  static GpuMxfp4Experts random(int E, int D, int I, uint64_t seed, cudaStream_t stream, const std::string& name);

 private:
  static GpuMxfp4Experts allocate(int E, int D, int I, const std::string& name);  // device buffers, uninitialised
};

struct GpuCompressor {
  int ratio = 0, dim = 0;
  bool overlap = false;
  GpuLinear wkv_gate;  // [2 * width, D]: wkv rows then wgate rows (width = coff * dim)
  cuda::DeviceArray<float> ape, norm;
};

struct GpuLayer {
  cuda::DeviceArray<float> attn_norm, ffn_norm;
  cuda::DeviceArray<float> hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  GpuLinear wq_a, wq_b, wkv, wo_a, wo_b;
  cuda::DeviceArray<float> q_norm, kv_norm, sink;
  std::optional<GpuCompressor> compressor;
  std::optional<GpuCompressor> index_compressor;
  GpuLinear index_wq_b, index_weights_proj;
  GpuLinear gate;  // router [E, D]
  cuda::DeviceArray<float> gate_bias;
  cuda::DeviceArray<int> tid2eid;
  bool tid2eid_distinct = false;  // every token's hash experts distinct: an expert gets at most one row per token
  GpuLinear experts_w13, experts_w2;  // E stacked [2I, D], [D, I]; empty when experts_mxfp4 holds them
  GpuMxfp4Experts experts_mxfp4;
  GpuLinear shared_w13, shared_w2;
};

struct GpuWeights {
  cuda::DeviceBuffer embed;  // [vocab, D] bf16 (when exact) or fp32
  bool embed_bf16 = true;
  GpuLinear head;
  cuda::DeviceArray<float> norm, hc_head_fn, hc_head_base, hc_head_scale;
  std::vector<GpuLayer> layers;
  size_t bytes = 0;  // device bytes of all weights

  // mxfp4_experts: keep MXFP4 routed experts packed for the W4A8 GEMM (when every expert is MXFP4 and the
  // shapes fit mxfp4_experts_shape_ok), instead of expanding them to BF16.
  static GpuWeights upload(const io::ModelConfig& config, const ModelWeights& weights, bool mxfp4_experts = false);
  // Random weights of the config's shapes (BF16 or FP8 linears; routed experts `expert_type`, MXFP4 allowed).
  static GpuWeights random(const io::ModelConfig& config, cuda::WeightType linear_type, cuda::WeightType expert_type,
                           uint64_t seed, cudaStream_t stream);
};

}  // namespace moeserve::model
#endif
