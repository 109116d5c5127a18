#pragma once
// Reference ops for the routed-expert MoE with MXFP4 weights and FP8 activations (the official
// DeepSeek-V4 `mxfp4-fp8` numerics), the ground truth for kernels/cuda/moe_w4a8.h. Plain loops,
// fp32 accumulation in k order.
//
// Row layouts shared with the CUDA ops ("grouped rows"): every (token, top-k slot) pair gets one row of
// a grouped activation matrix, rows of one expert together.
//   contiguous (prefill): expert e owns rows [offset_e, offset_e + counts[e]), offset_e = sum of counts
//     of the experts before e; total rows = tokens * topk.
//   masked (decode): expert e owns rows [e * cap, e * cap + counts[e]); counts[e] <= cap (slots beyond
//     cap are dropped: their row is -1); rows past counts[e] are never read meaningfully nor written.
// Within an expert, rows follow slot order (slot = token * topk + j), so the layout is deterministic.
//
// Activations: FP8 e4m3 [rows][K], each row's 128-channel groups in the W4A8 activation channel order
// (kernels/cpu/moe_w4a8_pack.h: moe_w4a8_act_pos gives channel k's byte; the GEMM's weights are packed to match),
// with one fp32 scale per (row, 128 channels), stored group-major:
//   sa[(k / 128) * sa_ld + row] (sa_ld >= rows, a multiple of 4: the layout the GPU GEMM loads with TMA).
// Scales are powers of two (DeepSeek act_quant with scale_fmt=ue8m0, kernels/cpu/quant.h fp8_pow2_scale):
// s = 2^ceil(log2(max(amax, 1e-4) * fp32(1/448))) from the exponent bits, q = e4m3(clamp(x / s, +-448)).
#include <cstddef>
#include <cstdint>

namespace moeserve::kernels::cpu {

// Per-128 power-of-two FP8 quantization of n values (n % 128 == 0): q[n] in natural channel order (the W4A8
// ops below store their rows through moe_w4a8_order_activations), scales[n / 128] (strided by scale_stride). The
// scale of one group: `act_quant_scale(amax)`.
float act_quant_scale(float amax);
void act_quant_fp8(const float* x, int n, uint8_t* q, float* scales, int scale_stride);

// y[row][n] = sum_k (e4m3(a[row][act_pos(k)]) * sa[k/128][row]) * (e2m1(w[e][n][k]) * e8m0(sw[e][n][k/32])), for
// every row of every expert, in fp32, k ascending. w: [E][N][K/2] (low nibble = even k), sw: [E][N][K/32].
// cap == 0: contiguous layout; cap > 0: masked layout. Rows outside the experts' ranges are not written.
void moe_grouped_gemm_w4a8(const uint8_t* a, const float* sa, int sa_ld, const uint8_t* w, const uint8_t* sw,
                           const int* counts, int E, int N, int K, int cap, float* y);

// Routing -> grouped rows. topk_ids: [T][topk] expert ids. Outputs: counts[E] (for masked, the number kept,
// <= cap), row_of_slot[T * topk] (-1 when dropped), slot_of_row[rows] (-1 for unused rows; rows = T * topk
// contiguous, E * cap masked). cap == 0: contiguous; cap > 0: masked.
void moe_route_rows(const int* topk_ids, int T, int topk, int E, int cap, int* counts, int* row_of_slot,
                    int* slot_of_row);

// Gathers and quantizes the expert input: for every row with slot_of_row >= 0, a[row] = act_quant(x[slot / topk])
// where x is bf16 [T][D]. sa: [D/128][sa_ld]. Rows with slot -1 are left untouched.
void moe_gather_quant(const uint16_t* x, int D, const int* slot_of_row, int rows, int topk, uint8_t* a, float* sa,
                      int sa_ld);
// The same from fp32 x [T][D] (the engine's activations).
void moe_gather_quant_f32(const float* x, int D, const int* slot_of_row, int rows, int topk, uint8_t* a, float* sa,
                          int sa_ld);

// W2's input from W13's output h: bf16 [rows][2I] (gate = columns [0, I), up = [I, 2I)), per row:
//   x = weight[slot] * silu(min(gate, limit)) * clamp(up, -limit, limit)      (fp32, silu = g / (1 + exp(-g)))
//   x = bf16(x) if round_bf16 (the official Expert casts to the model dtype before w2), then act_quant.
// weights: [T * topk] routing weights by slot. Rows with slot -1 are left untouched.
void moe_swiglu_quant(const uint16_t* h, int I, const int* slot_of_row, int rows, const float* weights,
                      float limit, bool round_bf16, uint8_t* a2, float* sa2, int sa_ld);
// The same from fp32 h [rows][2I] (W13 with fp32 output), no bf16 rounding (the fp32 engine's numerics).
void moe_swiglu_quant_f32(const float* h, int I, const int* slot_of_row, int rows, const float* weights, float limit,
                          uint8_t* a2, float* sa2, int sa_ld);

// out[t][d] = sum over the token's slots, in ascending expert id, of bf16 y2[row_of_slot][d] (fp32 sum;
// dropped slots skipped). The routing weight was applied before W2.
void moe_combine(const uint16_t* y2, int D, const int* row_of_slot, const int* topk_ids, int T, int topk,
                 float* out);

}  // namespace moeserve::kernels::cpu
