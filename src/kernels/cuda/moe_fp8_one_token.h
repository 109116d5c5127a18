#pragma once
// A decode step's routed FP8 experts at batch 1 in one launch (kernels/cuda/moe_fp8_one_token.cu): for each of the
// token's K routing slots, W13 of its expert, SwiGLU with the clamp and the routing weight, and W2, into the slot's
// row of y. It computes what moe_group, the grouped streaming GEMV (gemv_stream.h) over W13, swiglu and the
// grouped streaming GEMV over W2 compute at one token, bit for bit (the same unit arithmetic and sum order), and
// writes row_of_slot[k] = k so that moe_combine / hc_post_mix read slot k's row where that chain puts it.
// Between W13 and W2 the blocks meet at a grid-wide barrier (every block is resident: one or two per SM), and
// each warp's first W2 loads go out before it, so the W2 stream starts as the W13 stream ends instead of after
// three more launches.
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

// FP8 e4m3 experts stacked [E][rows][cols] with 128-block scales [E][rows >> scale_row_shift][scale_ld] (GemvArgs'
// layout: a copy per row, or the 128 x 128 grid with shift 7).
struct Fp8ExpertWeights {
  const void* w = nullptr;
  const float* row_scale = nullptr;
  int scale_ld = 0;
  int scale_row_shift = 0;
  long long w_stride = 0, scale_stride = 0;  // elements between experts
};

struct MoeFp8OneTokenArgs {
  Fp8ExpertWeights w13;  // [E][2I][D]: gate rows [0, I), up rows [I, 2I)
  Fp8ExpertWeights w2;   // [E][D][I]
  int D = 0, I = 0, K = 0;
  const float* x = nullptr;       // [D], the token's hidden state
  const int* chosen = nullptr;    // [K] expert of each slot (moe_route)
  const float* weight = nullptr;  // [K] routing weight of each slot
  float limit = 0.0f;             // SwiGLU clamp
  bool act_fp8 = false;           // the checkpoint numerics' FP8 activation simulation of x and of W2's input
  float* act = nullptr;           // scratch [slots][I]: W2's input (slots = K, plus one with the shared expert)
  float* y = nullptr;             // [K][D]: slot k's expert output in row k
  int* row_of_slot = nullptr;     // [K]: k
  // Optional: the shared expert as one more slot (index K) of the same launch, with routing weight 1, its W2
  // output written to shared_out [D] (where the routed rows are then added). Its W13 [2I][D] and W2 [D][I] in the
  // experts' layout (strides unused), with the routed experts' I and activation numerics. Null shared_out: none.
  Fp8ExpertWeights shared_w13, shared_w2;
  float* shared_out = nullptr;
  // Two words, zero before the first launch; each launch leaves them ready for the next. One per stream that
  // launches this kernel (two launches in flight at once must not share it).
  unsigned* barrier = nullptr;
};

// D and I multiples of 1024 (a unit is 1024 FP8 weights of a row), at most 16 slots (the shared one included),
// 16-byte aligned x and weights, scale_ld >= D / 128 (W13) and I / 128 (W2).
bool moe_fp8_one_token_fits(const MoeFp8OneTokenArgs& args);
// cudaErrorInvalidValue when !moe_fp8_one_token_fits(args).
cudaError_t moe_fp8_one_token(const MoeFp8OneTokenArgs& args, cudaStream_t stream);

}  // namespace moeserve::cuda
