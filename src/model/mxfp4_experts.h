#pragma once
// A layer's MXFP4 routed experts repacked on the host for the W4A8 grouped GEMM (kernels/cpu/moe_w4a8_pack.h):
// W13 = [w1 rows; w3 rows] (N = 2I, K = D) and W2 (N = D, K = I) per expert, in the GEMM's packed layout. The
// GPU weights (model/gpu_weights.h) upload these; packing runs one expert per worker, since a V4 checkpoint has
// thousands of experts and one expert takes tens of milliseconds.
#include <cstdint>
#include <vector>

#include "model/weights.h"

namespace moeserve::model {

struct PackedMxfp4Experts {
  int first = 0, count = 0;  // experts [first, first + count) of the layer
  int D = 0, I = 0;
  size_t w13_bytes = 0, w2_bytes = 0, w13_flag_words = 0, w2_flag_words = 0;  // per expert
  std::vector<uint8_t> w13, w2;                                               // count x per-expert bytes
  std::vector<uint64_t> w13_flags, w2_flags;
  int64_t wide_groups = 0;  // (64-row block, 128-k group) pairs on the GEMM's exact slow path
};

// The W4A8 GEMM's shape rules for both matrices (N % 128, K % 256): D % 256 == 0 and I % 256 == 0.
bool mxfp4_experts_shape_ok(int64_t D, int64_t I);
// The types random weights of `config` get (--load-format dummy), in one place for the weights (GpuModel::dummy)
// and the memory plan (engine/startup.cpp): FP8 linears when the config has a quantization_config, else BF16. The
// experts are MXFP4 when the config's experts are FP4 in an FP8 checkpoint, the GEMMs are not the exact ones (the
// W4A8 GEMM quantizes activations to FP8) and the shapes fit; otherwise they take the linears' type.
struct DummyWeightTypes {
  bool fp8_linears = false;
  bool mxfp4_experts = false;
};
DummyWeightTypes dummy_weight_types(const io::ModelConfig& config, bool exact);

// Packs experts [first, first + count). Every expert's w1/w3/w2 must be WeightFormat::Mxfp4 of one shape
// (w1, w3: [I, D]; w2: [D, I]); throws naming the expert otherwise.
PackedMxfp4Experts pack_mxfp4_experts(const std::vector<ExpertWeights>& experts, int first, int count);

}  // namespace moeserve::model
