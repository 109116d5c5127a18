#pragma once
// The one-batch GEMV for one activation row over a small dense matrix (kernels/cuda/gemv_small.cu): ops.h gemv's
// semantics for a dense GemvArgs with M == 1 (problems as blockIdx.y, accumulate, act_fp8) whose weights fit the
// shared memory of one block per SM (up to ~26 MB): each block's rows are bulk-copied in before the dependency
// wait. gemv() routes the sizes where that measured faster here (gemv_small_preferred), before the streaming kernel
// (gemv_stream.h).
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

// Rows per block the kernel would use for args (a multiple of 8), or 0 when it does not fit: dense, M == 1, rows
// of 2, 3, 4, 6, 8, 12, 14 or 16 times 512 bytes, every row of every problem in one block per SM (leave_sms SMs left
// free), at most 220 KB of weights, scales, x and partial sums per block, 16-byte aligned x / weights / scales / strides.
int gemv_small_rows_per_block(const GemvArgs& args);
// Whether gemv() routes args here (it fits, and is of the sizes where the kernel measured faster; BF16 only unless
// MOESERVE_GEMV_SMALL=fp8, never with MOESERVE_GEMV_SMALL=0).
bool gemv_small_preferred(const GemvArgs& args);
// cudaErrorInvalidValue when gemv_small_rows_per_block(args) == 0.
cudaError_t gemv_small(const GemvArgs& args, cudaStream_t stream);
// Whether `blocks` blocks of rows cover at least 3/4 of the GPU's SMs: both kernels here are routed only then (on
// fewer blocks the streaming kernel, which spreads every matrix over all SMs, measured faster).
bool gemv_blocks_cover_most_sms(long long blocks);

// The same for FP8 weights on FP16 tensor cores (kernels/cuda/gemv_small_tc.cu: the rows by TMA tensor copies with
// the 128-byte swizzle, mma.sync m16n8k16 on x split into exact f16 terms). Rows per block (16, 32 or 64), or 0
// when it does not fit: FP8, dense, M == 1, one problem, K = 1024, 2048 or 4096, at most 64 KB of weights per block
// over all SMs (leave_sms does not apply: its blocks are short), 16-byte aligned x / weights / scales and scale rows.
int gemv_small_tc_rows_per_block(const GemvArgs& args);
// Whether gemv() routes args there: it fits, and its N x K is the indexer's wq_b or the shared expert's w2 (the shapes
// measured in the layer: gemv_small_tc.cu's kDefaultTcShapes), or MOESERVE_GEMV_TC=1 (every shape) or lists it
// (NxK,...); =0: none.
bool gemv_small_tc_preferred(const GemvArgs& args);
// cudaErrorInvalidValue when gemv_small_tc_rows_per_block(args) == 0.
cudaError_t gemv_small_tc(const GemvArgs& args, cudaStream_t stream);

}  // namespace moeserve::cuda
