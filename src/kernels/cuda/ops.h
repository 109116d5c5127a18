#pragma once
// The DeepSeek-V4 forward's CUDA ops (Hopper, sm_90a): plain pointer APIs, stream-ordered, no allocation, no
// host synchronisation (so a decode step built from them can be captured in a CUDA graph). Each op has the
// semantics of a CPU reference op in kernels/cpu/ or src/model/ (named beside it) and a differential test in
// tests/kernels/cuda/. Every function returns the launch status (cudaGetLastError after the launch).
//
// Plain header (CUDA runtime types only): .cu files (nvcc, C++17) and .cpp files both include it.
// Activations are fp32 row-major; weights are BF16 (uint16_t bits) or FP8 e4m3 (uint8_t) with fp32 scales.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moeserve::cuda {

// Programmatic dependent launch for the forward's kernels (each kernel's launch and weight prologue overlap the
// previous kernel's drain; kernels/cuda/common.cuh launch). On unless the environment sets MOESERVE_PDL=0 (A/B
// timing); set_pdl_enabled overrides for the process.
bool pdl_enabled();
void set_pdl_enabled(bool on);

// ----------------------------------------------------------------------------------------------------------
// The token/sequence layout of one forward over a batch of sequence chunks (model/block.h Segment), all device
// arrays. Token t belongs to sequence tok_seq[t] at position tok_pos[t]; sequence s owns batch rows
// [seq_begin[s], seq_begin[s] + seq_count[s]), its first one at position seq_start[s] (its committed length),
// request slot seq_slot[s] and KV pages page_table[s * page_ld + i]. The host writes them before the step's
// kernels (a copy ahead of them); ops may read them before their dependency wait, so no kernel may write them.
struct BatchDesc {
  int T = 0, S = 0;
  const int* tok_pos = nullptr;
  const int* tok_seq = nullptr;
  const int* tok_id = nullptr;
  const int* seq_begin = nullptr;
  const int* seq_start = nullptr;
  const int* seq_count = nullptr;
  const int* seq_slot = nullptr;
  const int* page_table = nullptr;
  int page_ld = 0;
};

// One attention layer's KV state on the device: the fp32 pools of cache::KvCache, same indexing
// (cache/kv_cache.h): window [slots][num_layers][cap][hd]; compressed entries and indexer keys per page
// [pages][epp][dim]; compressor rings [slots][2 (kv, score)][rows][width] indexed by position % rows.
struct KvLayerView {
  float* window = nullptr;
  int layer = 0, num_layers = 0, cap = 0, hd = 0;
  float* compressed = nullptr;  // null for window-only layers
  float* index_keys = nullptr;  // CSA only
  int epp = 0, ihd = 0;
  float* state = nullptr;
  int state_rows = 0, state_width = 0;
  float* index_state = nullptr;
  int index_width = 0;
};

// ---------------------------------------------------------------------------- elementwise (elementwise.cu)
// h[t, j, :] = table[ids[t], :] for each of hc streams (model.cpp). table: bf16 bits or fp32 [vocab, D].
cudaError_t embed_gather(const void* table, bool table_bf16, int D, const int* ids, int T, int hc, float* h,
                         cudaStream_t stream);
// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) (* w), rows of `dim` (kernels/cpu/norm.h). In place when out == x.
cudaError_t rms_norm(const float* x, int rows, int dim, int ldx, const float* w, float eps, float* out, int ldo,
                     cudaStream_t stream);
// For each token t, each of `heads` rows of head_dim at x + t * ld + h * head_dim: optionally the per-head
// RMSNorm first (norm_eps > 0; weighted by norm_w [head_dim] when given, as rms_norm), then the interleaved
// rotation of the trailing rope_dim values at position pos[t] (kernels/cpu/rope.h RopeTable::apply; inverse =
// conjugate). inv_freq: [rope_dim / 2]. pos is host-written like BatchDesc::tok_pos (read before the dependency
// wait, with the cos/sin it gives). fp8_block > 0: also fp8_block_sim's arithmetic (blocks of fp8_block, a
// trailing partial block its own) on the first head_dim - rope_dim values of each row, after the norm: bit for bit
// rope then fp8_block_sim of those values (the KV head's FP8 storage simulation in one launch). It needs the norm
// (norm_eps > 0), head_dim <= 512 and fp8_block a multiple of 32 (else cudaErrorInvalidValue).
cudaError_t rope(float* x, int T, int heads, int head_dim, int ld, int rope_dim, const int* pos,
                 const float* inv_freq, float attn_scale, bool inverse, float norm_eps, cudaStream_t stream,
                 const float* norm_w = nullptr, int fp8_block = 0);
// The indexer's queries in one launch: rope (no norm, not inverse), then hadamard_fp4_sim(fp4) of each row, with
// the same arithmetic as the two ops in turn. head_dim must be 128 and rope_dim even and at most head_dim
// (cudaErrorInvalidValue otherwise).
cudaError_t rope_hadamard(float* x, int T, int heads, int head_dim, int ld, int rope_dim, const int* pos,
                          const float* inv_freq, float attn_scale, bool fp4, cudaStream_t stream);
// In place: each `block` of the first `width` values of each row -> fp8(clamp(x / s)) * s, s the power-of-two
// scale of the block's amax (kernels/cpu/quant.h fp8_block_sim; a trailing partial block is its own block).
cudaError_t fp8_block_sim(float* x, int rows, int ld, int width, int block, cudaStream_t stream);
// The same, out of place: y = sim(x) (rows of width floats; x and y may be the same).
cudaError_t fp8_block_sim_to(const float* x, int ldx, float* y, int ldy, int rows, int width, int block,
                             cudaStream_t stream);
// In place: orthonormal Walsh-Hadamard rotation of each row (dim a power of two, <= 1024), then (fp4) the
// FP4 e2m1 simulation per 32 (kernels/cpu/quant.h hadamard_rotate + fp4_block_sim).
cudaError_t hadamard_fp4_sim(float* x, int rows, int dim, bool fp4, cudaStream_t stream);
// The FP8 activation quantizer of the official act_quant (per token, per 128 channels, power-of-two scales):
// q [M][K] e4m3 (row stride K), scales [K/128][M] fp32 (cuBLASLt VEC128 layout). K % 128 == 0.
cudaError_t act_quant_fp8(const float* x, int M, int K, int ldx, uint8_t* q, float* scales, cudaStream_t stream);
// Skinny FP8 GEMM on tensor cores (gemm_fp8_skinny.cu, sm_90a) for 1..64 rows: y[m][n] (ldy) = sum over 128-k
// blocks kb of w_scales[n / 128][kb] * x_scales[kb][m] * sum_{k in kb} W[n][k] xq[m][k], with xq [M][K] e4m3 and
// x_scales [K/128][xs_ld] as act_quant_fp8 writes them (xs_ld = M), W [N][K] e4m3 with 128x128 block scales
// [N/128][ws_ld] (cuBLASLt's layout). fp32 accumulation, per block as cuBLASLt's block-scaling mode.
// Weights of few rows split K over more CTAs into `workspace` (gemm_fp8_skinny_workspace_floats; without it, no
// split) and add the splits in a second launch, in split order. cudaErrorInvalidValue outside
// gemm_fp8_skinny_fits or for misaligned (16-byte) operands.
bool gemm_fp8_skinny_fits(int M, int N, int K);
int gemm_fp8_skinny_splits(int N, int K);
size_t gemm_fp8_skinny_workspace_floats(int M, int N, int K);
cudaError_t gemm_fp8_skinny(const uint8_t* xq, const float* x_scales, int xs_ld, int M, const uint8_t* w,
                            const float* w_scales, int ws_ld, int N, int K, float* y, int ldy, float* workspace,
                            size_t workspace_floats, cudaStream_t stream);
// gemm_fp8_skinny over MoE groups (the routing's moe_group output, on the device): group z < *num_groups multiplies
// its expert group_expert[z]'s weights (rows [e N, (e + 1) N) of w, block scales at w_scales + e ws_expert_stride)
// with activation rows [group_offset[z], + group_count[z]) of xq [rows][K] (scales [K/128][xs_ld]) into the same
// rows of y. Every group has at most max_rows <= 64 rows; max_groups bounds *num_groups (the grid). No K split.
cudaError_t gemm_fp8_skinny_grouped(const uint8_t* xq, const float* x_scales, int xs_ld, int rows, int max_rows,
                                    const uint8_t* w, const float* w_scales, int ws_ld, size_t ws_expert_stride,
                                    int experts, int N, int K, const int* group_expert, const int* group_offset,
                                    const int* group_count, const int* num_groups, int max_groups, float* y, int ldy,
                                    cudaStream_t stream);
// Skinny GEMM of BF16 activations and FP8 weights on BF16 tensor cores (gemm_bf16_fp8w_skinny.cu, sm_90a), for
// 1..64 rows, `problems` side by side (V4's grouped wo_a: a BF16 einsum on the dequantized FP8 weight): problem p,
// y[m][p N + n] (ldy) = sum over 128-k blocks kb of w_scales[(p N + n) / 128][kb] * sum_{k in kb} bf16(x[m][p K + k])
// * e4m3(W[p N + n][k]), fp32 accumulation. xb [M][problems K] is bf16_permute16's output (the k order the kernel's
// register fragments want), W [problems N][K] e4m3 with 128x128 block scales [problems N / 128][ws_ld]. K splits
// and the workspace as gemm_fp8_skinny's. cudaErrorInvalidValue outside the fits or for misaligned operands.
// terms = 2 or 3: xb holds terms x M rows, bf16_permute16's hi rows, then its lo rows (then its lo2 rows), and y is
// the sum of the products: an fp32-input product (to ~16 or all 24 significant bits), as the reference engine
// computes wo_a; the workspace is then required (workspace_floats with the same terms).
// bf16_permute16: with lo (and lo2), also the further terms of to_bf16_split, in the same order.
cudaError_t bf16_permute16(const float* x, int M, int K, int ldx, uint16_t* out, cudaStream_t stream,
                           uint16_t* lo = nullptr, uint16_t* lo2 = nullptr);
bool gemm_bf16_fp8w_skinny_fits(int M, int N, int K);
int gemm_bf16_fp8w_skinny_splits(int N, int K, int problems);
size_t gemm_bf16_fp8w_skinny_workspace_floats(int M, int N, int K, int problems, int terms = 1);
cudaError_t gemm_bf16_fp8w_skinny(const uint16_t* xb, int M, int problems, const uint8_t* w, const float* w_scales,
                                  int ws_ld, int N, int K, float* y, int ldy, float* workspace,
                                  size_t workspace_floats, cudaStream_t stream, int terms = 1);
// bf16 copy (round to nearest even): out [M][K] (row stride K).
cudaError_t to_bf16(const float* x, int M, int K, int ldx, uint16_t* out, cudaStream_t stream);
// x split into two bf16 terms (round to nearest even): hi = bf16(x), lo = bf16(x - hi), so hi + lo carries ~16
// significant bits; BF16 GEMMs over the terms stand in for an fp32-input GEMM. With lo2, a third term
// lo2 = bf16(x - hi - lo): the three carry all of x's 24. hi, lo, lo2 [M][K] (row stride K).
cudaError_t to_bf16_split(const float* x, int M, int K, int ldx, uint16_t* hi, uint16_t* lo, cudaStream_t stream,
                          uint16_t* lo2 = nullptr);
// y[m][n] (ldy) = parts[0][m][n] + parts[1][m][n] + ... in that order: `count` [M][N] parts (row stride ld),
// `stride` floats apart (the skinny GEMMs' K splits and terms, the terms of Blas::gemm_bf16_terms' stacked GEMM).
cudaError_t add_parts(const float* parts, int count, size_t stride, int M, int N, int ld, float* y, int ldy,
                      cudaStream_t stream);
// FP8 weights to bf16 (round to nearest even): out[n][k] = bf16(e4m3(w[n][k]) * row_scale[(n >> scale_row_shift) *
// scale_ld + k / 128]) (GemvArgs' scale layouts: 0 a copy per row, 7 the 128 x 128 grid). Exact for power-of-two
// (E8M0) scales.
cudaError_t fp8_weights_to_bf16(const uint8_t* w, const float* row_scale, int N, int K, int scale_ld, uint16_t* out,
                                cudaStream_t stream, int scale_row_shift = 0);
// score[t, :] += ape[pos[t] % ratio, :] (model/attention.cpp add_ape). score row stride ld, width columns.
cudaError_t add_ape(float* score, int T, int width, int ld, const int* pos, const float* ape, int ratio,
                    cudaStream_t stream);
// act[r, i] = silu(min(g, limit)) * clamp(u, -limit, limit) * (row_weight ? row_weight[r] : 1), with
// g = h[r, i], u = h[r, I + i] (model/moe.cpp swiglu; limit <= 0: no clamp). rows: device count or host.
cudaError_t swiglu(const float* h, int rows, const int* rows_dev, int I, float limit, const float* row_weight,
                   float* act, cudaStream_t stream);
// x[i] *= s for n values.
cudaError_t scale_values(float* x, size_t n, float s, cudaStream_t stream);
// out[r, :] = x[rows[r], :] (D wide).
cudaError_t gather_rows(const float* x, int D, const int* rows, int count, float* out, cudaStream_t stream);
// Random fill for dummy weights (counter-based hash of (seed, index), uniform in [-scale, scale]): fp32, bf16 bits,
// or e4m3 bytes (values uniform in [-scale, scale] before rounding; scale <= 448).
cudaError_t fill_uniform(void* dst, size_t n, int kind /*0 f32, 1 bf16, 2 fp8*/, float scale, uint64_t seed,
                         cudaStream_t stream);
// dst[i] = value (fp32).
cudaError_t fill_value(float* dst, size_t n, float value, cudaStream_t stream);

// ------------------------------------------------------------------------------------------- mHC (hc.cu)
// Split-K partial sums of one pass over h [T, width]: partial[s][t][0..mix) = h[t] . fn[m] over split s of the
// width, partial[s][t][mix] = sum of squares. splits * chunk >= width with chunk a multiple of 4.
int hc_mix_splits(int width);  // the most (workspace sizes); the next: the count for T tokens
int hc_mix_splits(int width, int T);
cudaError_t hc_mix_partial(const float* h, int T, int width, const float* fn, int mix, int splits, float* partial,
                           cudaStream_t stream);
// hc_pre (kernels/cpu/hyper_connection.h) from the partials: pre/post/comb (Sinkhorn), collapsed = sum_j pre_j
// h_j, then collapsed is RMS-normed with norm_w when norm_w != null (the block's attn_norm/ffn_norm). head mode
// (mix == hc): hc_head: pre only, no post/comb. post [T, hc], comb [T, hc, hc] (ignored in head mode).
// hc in {1, 2, 4, 8}, dim a multiple of 4, mix <= 63 (else cudaErrorInvalidValue).
// part splits the launch in two, each bit for bit its share of All: Collapse writes only collapsed (post, comb
// untouched, may be null; no Sinkhorn), Mix only post and comb (collapsed untouched; h, norm_w, collapsed may be
// null), so the Sinkhorn can run off the critical path. Mix in head mode is cudaErrorInvalidValue.
enum class HcFinishPart { All, Collapse, Mix };
cudaError_t hc_pre_finish(const float* partial, int splits, const float* h, int T, int hc, int dim, int mix,
                          const float* base, const float* scale, int sinkhorn_iters, float hc_eps, float norm_eps,
                          const float* norm_w, float* collapsed, float* post, float* comb, cudaStream_t stream,
                          HcFinishPart part = HcFinishPart::All);
// In place: h[t, k] = post[t, k] * y[t] + sum_j comb[t, j, k] * h[t, j].
cudaError_t hc_post(float* h, int T, int hc, int dim, const float* y, const float* post, const float* comb,
                    cudaStream_t stream);
// hc_post, then hc_mix_partial of the updated h with the next mix weights fn, in one pass (for decode-sized T:
// fn is read once per token): partial gets hc_post_mix_splits(hc, dim) splits in hc_mix_partial's layout, for
// hc_pre_finish. hc == 4, mix 24 (a block's pre) or 4 (the head).
// add: the sublayer output is y plus, per token t, rows[row_of_slot[t * K + j]] for j < K added in that order
// (moe_combine's sum, bit for bit, without its launch).
struct HcAddRows {
  const float* rows = nullptr;  // [*][dim]
  const int* row_of_slot = nullptr;
  int K = 0;
};
int hc_post_mix_splits(int hc, int dim);
cudaError_t hc_post_mix(float* h, int T, int hc, int dim, const float* y, const float* post, const float* comb,
                        const float* fn, int mix, float* partial, cudaStream_t stream, const HcAddRows& add = {});

// ---------------------------------------------------------------------------------------- GEMV (gemv.cu)
// y[m, n] (+)= sum_k x[m, k] * W[n, k] with fp32 activations and fp32 accumulation, for few rows m (decode,
// the exact path): weights read once per 8 rows. W: BF16 [N, K] or FP8 e4m3 [N, K] with 128-block scales
// row_scale[(n >> scale_row_shift) * scale_ld + k / 128] (fp32): a copy per row (shift 0: each weight row carries
// its 128x128 block's scale) or the checkpoint's block grid itself (shift 7: one row of scales per 128 rows).
// Batched/grouped: blockIdx.y = p indexes a problem: W + p * w_stride, row scales + p * scale_stride,
// x + p * x_stride, y + p * y_stride (grouped output projection, stacked experts). Grouped rows (MoE): with
// group_count != null, problem p (< *num_groups) is expert group_expert[p] (its weights), rows
// [group_offset[p], + group_count[p]) of y, x rows gathered through x_rows[row] (or the row itself).
// MXFP4 is for routed experts only (kept packed for the W4A8 grouped GEMM, kernels/cuda/moe_w4a8.h); no
// gemv operand is ever MXFP4.
enum class WeightType : int { BF16 = 0, FP8 = 1, MXFP4 = 2 };
struct GemvArgs {
  WeightType wtype = WeightType::BF16;
  const void* w = nullptr;
  const float* row_scale = nullptr;
  int N = 0, K = 0, scale_ld = 0;
  // FP8: weight rows n share the row of scales n >> scale_row_shift. 0: a copy per row ([N, scale_ld]); 7: the
  // 128 x 128 blocks ([ceil(N / 128), scale_ld]), which a one-row GEMV reads 1/128 as much of (the copies add 3 %
  // to its weight bytes). gemv_small takes 0 only; the other kernels both.
  int scale_row_shift = 0;
  long long w_stride = 0, scale_stride = 0;
  const float* x = nullptr;
  int ldx = 0;
  long long x_stride = 0;
  float* y = nullptr;
  int ldy = 0;
  long long y_stride = 0;
  int M = 0;        // rows per problem (ungrouped)
  int problems = 1;  // grid.y (grouped: the most groups there can be)
  bool accumulate = false;
  const int* group_expert = nullptr;
  const int* group_offset = nullptr;
  const int* group_count = nullptr;
  const int* num_groups = nullptr;
  const int* x_rows = nullptr;
  int max_group_rows = 0;  // grouped: an upper bound on any group's rows (0: unknown); picks rows per pass
  // The checkpoint numerics' FP8 activation simulation (fp8_block_sim with 128-wide blocks along K) applied to
  // x as it is loaded, instead of a packed copy and a launch of its own. Needs gemv_fuses_act_fp8(args).
  bool act_fp8 = false;
  // The streaming one-row kernel (gemv_stream.h) fills every SM with two persistent blocks; on a concurrent
  // branch it leaves this many SMs with one, so that the main stream's small kernels can start beside it.
  int leave_sms = 0;
};
// One row over FP8 weights (dense M == 1, or groups of one row) runs the streaming kernel (gemv_stream.h;
// MOESERVE_GEMV_STREAM=0: not).
cudaError_t gemv(const GemvArgs& args, cudaStream_t stream);
// The activation layout of G problems on K-slices of M rows (the grouped low-rank output projection wo_a): problem g
// reads x[m][g K, (g + 1) K) and writes y[m][g N, (g + 1) N). The weight fields are the caller's.
GemvArgs gemv_args_on_slices(int G, int N, int K, const float* x, float* y, int M);
// Whether gemv can apply act_fp8 on the load: one row per pass (M == 1, or grouped with max_group_rows == 1:
// with more rows the per-load simulation costs more issue than the weight stream leaves), the vectorized path
// (16-byte aligned rows) and K % 128 == 0.
bool gemv_fuses_act_fp8(const GemvArgs& args);

// ------------------------------------------------------------------------- compressor / indexer (kv.cu)
// One compressor (model/attention.cpp compress_entry): for every token t whose block completes
// ((pos + 1) % ratio == 0), entry e = pos / ratio is the per-feature softmax pool of the rows of its block (and,
// with overlap, the first half of the previous block's), RMS-normed with norm_w, rotated at e * ratio, then
// fp8-simulated on the first `nope` dims (post = 1) or Hadamard + FP4 simulated (post = 2), and written to
// pool + (page_table[seq][e / epp] * epp + e % epp) * dim. Rows at positions inside the chunk come from
// kv/score [T, width] (ld), earlier ones from the ring (state: [slots][2][rows][width]).
struct CompressorArgs {
  const float* kv = nullptr;
  const float* score = nullptr;
  int ld = 0;
  float* state = nullptr;
  int rows = 0, width = 0;
  int ratio = 0, dim = 0;
  bool overlap = false;
  const float* norm_w = nullptr;
  float eps = 1e-6f;
  const float* inv_freq = nullptr;
  int rope_dim = 0;
  float rope_scale = 1.0f;
  int post = 0;  // 0 none, 1 fp8 simulation of [0, nope) in blocks of 64, 2 Hadamard + FP4
  int nope = 0;
  float* pool = nullptr;
  int epp = 0;
};
cudaError_t compressor_emit(const BatchDesc& b, const CompressorArgs& a, cudaStream_t stream);
// Ring update after the chunk: the last `rows` tokens of each sequence write their kv/score rows.
cudaError_t compressor_store(const BatchDesc& b, const CompressorArgs& a, cudaStream_t stream);
// Window ring update: the last `cap` tokens of each sequence write kv [T, hd] to window[slot][layer][pos % cap].
cudaError_t window_store(const BatchDesc& b, const KvLayerView& v, const float* kv, cudaStream_t stream);

// Lightning indexer scores (kernels/cpu/attention.h indexer_scores): for token t and key i < (pos + 1) / ratio,
// scores[t * ld + i] = sum_h relu(q[t, h] . K[i]) * scale * w[t, h]; keys read from the indexer-key pool.
// max_keys bounds the keys of any token (grid size).
cudaError_t indexer_scores(const BatchDesc& b, const float* q, const float* w, int heads, int dim, const float* keys,
                           int epp, int ratio, float scale, int max_keys, float* scores, int ld,
                           cudaStream_t stream);
// The same scores on BF16 tensor cores (indexer_scores_bf16.cu), for queries and keys whose values bf16 holds
// exactly (the checkpoint numerics' FP4 simulation: e2m1 times a power of two); other values are rounded to bf16.
// 64 heads of dim 128 only (indexer_scores_bf16_fits); fp32 accumulation in another order than indexer_scores.
bool indexer_scores_bf16_fits(int heads, int dim);
cudaError_t indexer_scores_bf16(const BatchDesc& b, const float* q, const float* w, int heads, int dim,
                                const float* keys, int epp, int ratio, float scale, int max_keys, float* scores, int ld,
                                cudaStream_t stream);
// Top-k per token over its valid keys: the set kernels/cpu/attention.h top_k chooses (the k largest scores, ties
// to the lower index), written in ascending index order (the attention's sum is order-free up to rounding, and
// no sort is needed): idx[t * k + j], -1 past min(k, valid).
cudaError_t indexer_topk(const BatchDesc& b, const float* scores, int ld, int ratio, int k, int* idx,
                         cudaStream_t stream);

// ------------------------------------------------------------------------------ attention (attention.cu)
// Sparse attention with per-head sinks (kernels/cpu/attention.h sink_attention) for every token and head: keys
// are the window (positions (pos - W, pos], from kv [T, hd] inside the chunk, the window ring before it) then
// the compressed entries: all i < (pos + 1) / ratio (topk == null) or topk[t * k + j] (>= 0). The output's
// trailing rope_dim values are de-rotated at pos. o: [T, H * hd].
struct AttentionArgs {
  const float* q = nullptr;   // [T, H, hd]
  const float* kv = nullptr;  // [T, hd]
  KvLayerView view;
  int H = 0, hd = 0, window = 0;
  int ratio = 0;              // 0: window only
  const int* topk = nullptr;
  int k = 0;
  int max_keys = 0;           // bound on any token's key count (window + compressed)
  const float* sinks = nullptr;
  float scale = 1.0f;
  const float* inv_freq = nullptr;
  int rope_dim = 0;
  float rope_scale = 1.0f;
  float* o = nullptr;
  float* partial = nullptr;   // workspace: attention_workspace_floats
  int splits = 1;             // key splits (flash-decoding); attention_splits picks
  // Optional, for sparse_attention's fp32 kernel: arrival_slots counters, zero, one per (token, head block), which
  // its key splits count so that the last to arrive adds them (no combine launch); each launch leaves them zero.
  // Used where they cover the step (a head block is at least 4 heads: T * H / 4 suffice); else combine_kernel.
  int* arrivals = nullptr;
  int arrival_slots = 0;
  // The keys' first hd - rope_dim dims are exact in bf16 (the FP8 KV simulation of the checkpoint numerics): steps
  // of 2 or more tokens, or over 512 or more keys, then take sparse_attention_mma (MOESERVE_ATTN_MMA_MIN_T=N: from
  // N tokens on).
  bool keys_bf16_nope = false;
  // Optional, for sparse_attention_mma at prefill sizes: a workspace of attention_key_image_elems bf16 into which
  // the call first converts every key row the step can reach, once, so that each block copies its keys' rows
  // ready for the tensor cores instead of converting them itself (each row once per token and 32 heads).
  // image_comp: compressed entries per sequence it holds, at least (max_pos + 1) / ratio of the step.
  uint16_t* key_image = nullptr;
  int image_comp = 0;
};
int attention_splits(int T, int H, int max_keys);
size_t attention_workspace_floats(int T, int H, int hd, int splits);
cudaError_t sparse_attention(const BatchDesc& b, const AttentionArgs& a, cudaStream_t stream);
// The same on BF16 tensor cores (attention_mma.cu), for keys whose non-rope dims are exact in bf16; the fp32 queries,
// rope dims and probabilities enter as three bf16 terms each, so the products are exact and only the fp32 summation
// order differs from sparse_attention. Key splits and their workspace as there (it may take fewer splits than
// a.splits). Shapes: hd 512, rope_dim 64, H a multiple of 32, at most 2048 keys per token.
bool sparse_attention_mma_fits(int H, int hd, int rope_dim, int max_keys);
// Rows and bf16 elements of a.key_image for a step of T tokens in S sequences (window W, comp compressed entries
// per sequence): the chunk's kv rows, each sequence's window-ring rows before its chunk, its compressed entries.
size_t attention_key_image_rows(int T, int S, int window, int comp);
size_t attention_key_image_elems(int T, int S, int window, int comp);
cudaError_t sparse_attention_mma(const BatchDesc& b, const AttentionArgs& a, cudaStream_t stream);

// ------------------------------------------------------------------------------------------- MoE (moe.cu)
// Router (model/moe.cpp): scores = act(logits) (func 0 sqrtsoftplus, 1 sigmoid, 2 softmax); experts =
// tid2eid[token] (hash) or the top-k of scores + bias (ties to the lower id); weights = scores[chosen],
// normalised (norm_topk), times route_scale. chosen/weight: [T, K].
cudaError_t moe_route(const float* logits, int T, int E, int K, int func, const float* bias, const int* tid2eid,
                      const int* token_ids, bool norm_topk, float route_scale, int* chosen, float* weight,
                      cudaStream_t stream);
// Grouped rows: counts per expert, active groups (expert, offset, count), num_groups, and for every slot
// t * K + k its row (row_of_slot), each row's token and routing weight. work: moe_group_work_ints(E) ints.
int moe_group_work_ints(int E);
cudaError_t moe_group(const int* chosen, const float* weight, int T, int K, int E, int* work, int* group_expert,
                      int* group_offset, int* group_count, int* num_groups, int* row_of_slot, int* token_of_row,
                      float* weight_of_row, cudaStream_t stream);
// out[t] += sum over k of y[row_of_slot[t * K + k]] in k order.
cudaError_t moe_combine(const float* y, int D, const int* row_of_slot, int T, int K, float* out,
                        cudaStream_t stream);

// ------------------------------------------------------------------------------------ sampling (sample.cu)
// One row's settings (engine::SamplingParams) and its uniform draw u in [0, 1) (unused when greedy).
struct SampleRow {
  double u = 0.0;
  float temperature = 0.0f;  // <= 0: greedy
  float top_p = 1.0f;        // (0, 1]
  int top_k = 0;             // <= 0: off
  int reserved = 0;
};
// The phases a launch runs: a batch without sampled rows needs only the argmax, without top-k / top-p rows no
// selects (a phase left out acts as off for every row: draw off makes every row greedy).
struct SampleSteps {
  bool draw = true, top_k = true, top_p = true;
};
// What the rows need (host copies of the settings).
SampleSteps sample_steps(const SampleRow* rows, size_t n);
// engine/sampler.h for each row of logits [rows, vocab] with its own settings (rows: a device array): greedy
// (argmax, ties to the lowest id) or temperature + top-k + top-p, then the token whose cumulative probability (id
// order) first exceeds u. probs (optional, [rows, vocab]): the distribution drawn from. A row's token does not
// depend on the other rows. work: sample_work_bytes(rows, vocab).
size_t sample_work_bytes(int rows, int vocab);
cudaError_t sample_rows(const float* logits, int rows, int vocab, const SampleRow* params, int* tokens, float* probs,
                        void* work, cudaStream_t stream, SampleSteps steps = {});

}  // namespace moeserve::cuda
