#pragma once
// Routed-expert MoE on Hopper with MXFP4 weights and FP8 activations (W4A8), the official DeepSeek-V4
// `mxfp4-fp8` numerics. Reference semantics and row layouts: kernels/cpu/moe_w4a8.h. Weight layout:
// kernels/cpu/moe_w4a8_pack.h (repack once at load with moe_w4a8_pack_expert, upload, keep MXFP4 in HBM).
//
// A layer on the GPU, for T tokens with top-k routing (all launches stream-ordered, no host sync, no
// allocation: the decode path is CUDA-graph capturable):
//   moe_route_rows      topk_ids -> counts, row_of_slot, slot_of_row    (workspace: moe_route_rows_workspace)
//   moe_gather_quant    bf16 hidden -> FP8 grouped rows + per-128 scales
//   moe_grouped_gemm_w4a8_{contiguous,masked}   W13 (N = 2I: w1 rows then w3 rows), bf16 out
//   moe_swiglu_quant    routing weight * SwiGLU(clamp) -> FP8 rows + scales for W2
//   moe_grouped_gemm_w4a8_{contiguous,masked}   W2 (N = D), bf16 out
//   moe_combine         sum of the token's expert rows in expert order -> fp32 [T][D]
//
// Plain header (CUDA runtime types only) so .cu and .cpp files can both include it.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace moeserve::cuda {

struct MoeW4A8Weights {
  const uint8_t* packed = nullptr;       // [E] x moe_w4a8_packed_expert_bytes(N, K)
  const uint64_t* wide_flags = nullptr;  // [E] x moe_w4a8_flag_expert_words(N, K)
  int E = 0, N = 0, K = 0;               // N % 128 == 0, K % 256 == 0, E <= 512
};

struct MoeW4A8Input {
  const uint8_t* a = nullptr;  // FP8 e4m3 [rows][K], 16-byte aligned
  const float* sa = nullptr;   // [K/128][sa_ld] power-of-two scales
  int rows = 0;                // allocated rows of a (and of y): contiguous T*topk, masked E*cap
  int sa_ld = 0;               // >= rows, multiple of 4
};

enum class MoeOutType : int { BF16 = 0, F32 = 1 };

// Tile configurations (the tuning space). Tokens of one expert form the wgmma N dimension (swap-AB: the
// dequantized weights are the register A operand, 64 weight rows per consumer warpgroup).
struct MoeW4A8Config {
  int block_tokens;      // tokens per tile: 8..240 (the wgmmas take up to 160 at a time)
  int warpgroups;        // consumer warpgroups per CTA (64 weight rows each)
  int groups_per_stage;  // 128-k groups per pipeline stage
  int stages;
  int ctas_per_sm;       // occupancy the config is built for
  const char* name;
};
int moe_w4a8_config_count();
const MoeW4A8Config& moe_w4a8_config(int id);
// The config named `name`, or -1.
int moe_w4a8_config_by_name(const char* name);
// Whether config `id` runs N x K experts (its stage divides K's 128-groups, its weight rows divide N);
// the GEMM calls return cudaErrorInvalidValue otherwise.
bool moe_w4a8_config_fits(int id, int N, int K);
// Config from the checked-in dispatch table (kernels/cuda/moe_w4a8_dispatch.cpp) for a shape and the step's
// routed slots (tokens x top-k); a heuristic when the table has no entry. Slots, not rows per active expert: one
// token and 32 both give about one row per active expert, but 384 work items against ~9000, which want different
// tiles (the V4-Flash layer at 32 tokens: 23 us apart, docs/benchmarks/cuda-ops.md, thirteenth session).
int moe_w4a8_pick_config(int E, int N, int K, int slots);
// The same for a GPU by name (moe_w4a8_pick_config passes the current device's; tests read the table without one).
int moe_w4a8_pick_config_for(const char* gpu, int E, int N, int K, int slots);
// Experts split by load, for decode steps with skewed routing: the experts with more than `rows` rows run in a
// launch of their own with tile config `config` (wide token tiles), the others in the launch of the main config. A
// token tile converts its 64-row weight blocks once, so an expert of 100 rows costs 13 conversions of its weights
// in 8-token tiles and 2 in 64-token ones. config < 0: one launch. Same outputs as one launch of either config (up
// to the accumulation order inside a 128-k group's wgmmas).
struct MoeW4A8Split {
  int config = -1;
  int rows = 0;
};
// The dispatch table's split for a shape and routed slots (none when its entry has none).
MoeW4A8Split moe_w4a8_pick_split(int E, int N, int K, int slots);
MoeW4A8Split moe_w4a8_pick_split_for(const char* gpu, int E, int N, int K, int slots);
// The GPUs the table was tuned on, in its order, and whether it has entries for a GPU at a shape (without them
// the picks above are the heuristic's; scripts/device-w4a8-tune.sh tunes a GPU).
std::vector<std::string> moe_w4a8_table_gpus();
bool moe_w4a8_table_has(const char* gpu, int E, int N, int K);

// How a GEMM sits in the decode chain (all optional; none changes the results):
//  - prefetch_next: after its last work items' weight loads, each CTA asks L2 for the first prefix_bytes of the
//    next GEMM's row blocks that correspond to its rows (W13 -> W2 of the same expert), so that the next GEMM's
//    first stages come from L2;
//  - counts_settled: counts were written by a kernel that completed before the previous kernel in the stream
//    started (W2 after W13: the routing glue ran before W13), so the schedule and the first weight loads run
//    before pdl_wait;
//  - settled_ids (contiguous layout): the slots' expert ids [in.rows], written by a kernel that completed before the
//    previous kernel started (W13 after the router's choice and then the placement + gather launch); the GEMM counts
//    them itself, before pdl_wait, instead of reading counts (which its predecessor is still writing), and takes the
//    settled path. The counts it derives are the placement's (the same ids, expert order).
//  - item_counter: a device int, 0 before the first launch that uses it (cudaMemset), for the launches of one stream
//    only: when a launch has more work items than CTAs, each CTA takes its first item by its index and the next ones
//    from this counter as it finishes issuing the previous one's loads, so that CTAs that progress faster take more
//    items (the configs without copier warps, but the 160-token tile; the others keep the fixed order). The launch
//    leaves it 0 again (graphs replay). Same results, bit for bit.
//  - every_thread_releases: every consumer thread arrives on a stage's empty barrier, not one lane per warp after
//    __syncwarp: the order compute-sanitizer's racecheck follows (it reports WAR hazards on the weights' bulk copies
//    in the default form); slower at some prefill shapes. MOESERVE_W4A8_EVERY_THREAD_RELEASES=1 sets it for every
//    launch of the process (scripts/device-sanitize.sh). Same results, bit for bit.
struct MoeW4A8Chain {
  const MoeW4A8Weights* prefetch_next = nullptr;
  unsigned prefix_bytes = 0;  // per 64-row block of the next weights, multiple of 16 (moe_w4a8_prefetch_prefix)
  bool counts_settled = false;
  const int* settled_ids = nullptr;
  int* item_counter = nullptr;
  bool every_thread_releases = false;
};
// Bytes per 64-row block to prefetch so that `slots` experts' blocks of N x K weights fit in `budget` bytes
// (at most a whole block; multiple of 16; 0 when not even 16 bytes fit).
unsigned moe_w4a8_prefetch_prefix(int N, int K, int slots, size_t budget);

// y[row][n] for the rows of every expert (contiguous layout: expert e owns rows from the prefix sum of
// counts). y: [in.rows][N], bf16 or fp32; rows of no expert are not written. config = -1: the dispatch table's
// config and split for `slots` (moe_w4a8_pick_config, moe_w4a8_pick_split); a split given here applies to an
// explicit config too.
cudaError_t moe_grouped_gemm_w4a8_contiguous(const MoeW4A8Weights& w, const MoeW4A8Input& in, const int* counts,
                                             void* y, MoeOutType out, int slots, int config,
                                             cudaStream_t stream, const MoeW4A8Chain& chain = {},
                                             const MoeW4A8Split& split = {});
// Masked layout: expert e owns rows [e*cap, e*cap + min(counts[e], cap)). Fixed launch shape.
cudaError_t moe_grouped_gemm_w4a8_masked(const MoeW4A8Weights& w, const MoeW4A8Input& in, const int* counts,
                                         int cap, void* y, MoeOutType out, int slots, int config,
                                         cudaStream_t stream, const MoeW4A8Chain& chain = {},
                                         const MoeW4A8Split& split = {});

// Timeline probe (builds with MOESERVE_W4A8_PROBE bit 16 in moe_w4a8_gemm.cu, `PROBES=16
// scripts/device-prepare.sh`): each CTA of a launch stores the global timer (ns) at these points; a CTA's slot keeps
// the last launch that ran it. moe_w4a8_timeline copies the array out ([kMoeW4A8TimelineCtas][kMoeW4A8TimelineEvents],
// 0 where a CTA did not reach a point) and clears it; it returns the CTA slots, 0 in other builds (events left
// empty), -1 on a CUDA error.
enum MoeW4A8TimelineEvent {
  kTlStart,        // the CTA's first instruction
  kTlWait,         // past griddepcontrol.wait (consumer thread 0; before the schedule unless the counts are settled)
  kTlScheduled,    // the work list computed
  kTlFirstIssued,  // the producer's first stage issued
  kTlFirstLanded,  // the consumers' first stage landed
  kTlLoopDone,     // the last item's main loop done (before its epilogue)
  kTlEnd,          // the CTA's last instruction
};
constexpr int kMoeW4A8TimelineCtas = 1024, kMoeW4A8TimelineEvents = 7;
int moe_w4a8_timeline(std::vector<uint64_t>* events);

// Random packed experts (performance work, --load-format dummy): E experts of [N, K], uniform e2m1 codes,
// every row's reference exponent ref_exp and its blocks' exponents in [ref_exp - spread, ref_exp] with
// spread <= kFastSpread, so no group is wide (the flags stay zero: the caller clears them).
cudaError_t moe_w4a8_fill_random(uint8_t* packed, int E, int N, int K, int ref_exp, int spread, uint64_t seed,
                                 cudaStream_t stream);

// Glue (semantics: kernels/cpu/moe_w4a8.h).
size_t moe_route_rows_workspace(int T, int topk, int E);
cudaError_t moe_route_rows(const int* topk_ids, int T, int topk, int E, int cap, int* counts, int* row_of_slot,
                           int* slot_of_row, void* workspace, size_t workspace_bytes, cudaStream_t stream);
cudaError_t moe_gather_quant(const uint16_t* x, int D, const int* slot_of_row, int rows, int topk, uint8_t* a,
                             float* sa, int sa_ld, cudaStream_t stream);
cudaError_t moe_gather_quant_f32(const float* x, int D, const int* slot_of_row, int rows, int topk, uint8_t* a,
                                 float* sa, int sa_ld, cudaStream_t stream);
// moe_route_rows (contiguous, cap 0) and moe_gather_quant_f32 in one launch, for at most
// moe_route_gather_max_slots() slots (T * topk): the same outputs, bit for bit.
int moe_route_gather_max_slots();
cudaError_t moe_route_gather_quant_f32(const int* topk_ids, int T, int topk, int E, const float* x, int D, int* counts,
                                       int* row_of_slot, int* slot_of_row, uint8_t* a, float* sa, int sa_ld,
                                       cudaStream_t stream);
// The router's choice (moe_route, kernels/cuda/ops.h, bit for bit) folded into moe_route_gather_quant_f32, for a
// decode step of at most moe_route_logits_max_tokens() tokens: every block routes all tokens from the gate logits.
struct RouteLogits {
  const float* logits = nullptr;  // [T][E]
  int T = 0, E = 0, K = 0;        // E <= 512, K <= 8
  int func = 0;                   // 0 sqrtsoftplus, 1 sigmoid, 2 softmax
  const float* bias = nullptr;    // [E] score correction (top-k only), or
  const int* tid2eid = nullptr;   // hash routing: [vocab][K], with token_ids [T]
  const int* token_ids = nullptr;
  bool norm_topk = true;
  float route_scale = 1.0f;
  int* chosen = nullptr;    // [T][K] out
  float* weight = nullptr;  // [T][K] out
};
int moe_route_logits_max_tokens();
cudaError_t moe_route_logits_gather_quant_f32(const RouteLogits& r, const float* x, int D, int* counts, int* row_of_slot,
                                              int* slot_of_row, uint8_t* a, float* sa, int sa_ld, cudaStream_t stream);
cudaError_t moe_swiglu_quant(const uint16_t* h, int I, const int* slot_of_row, int rows, const float* weights,
                             float limit, bool round_bf16, uint8_t* a2, float* sa2, int sa_ld, cudaStream_t stream);
// release_first: the launch releases the next one before its own wait, so that a W2 with settled counts
// (MoeW4A8Chain::counts_settled) can take the SMs that W13's CTAs free and load its first weight stages while W13
// still runs. Only for a next kernel that reads nothing of this chain's before its own wait. Same outputs.
cudaError_t moe_swiglu_quant_f32(const float* h, int I, const int* slot_of_row, int rows, const float* weights,
                                 float limit, uint8_t* a2, float* sa2, int sa_ld, cudaStream_t stream,
                                 bool release_first = false);
cudaError_t moe_combine(const uint16_t* y2, int D, const int* row_of_slot, const int* topk_ids, int T, int topk,
                        float* out, cudaStream_t stream);

}  // namespace moeserve::cuda
