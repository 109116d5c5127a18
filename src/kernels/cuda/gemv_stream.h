#pragma once
// The streaming skinny GEMM for one activation row (kernels/cuda/gemv_stream.cu): ops.h gemv's semantics for a
// dense GemvArgs with M == 1 (problems as blockIdx.y, accumulate, act_fp8), or a grouped one whose groups hold one
// row each (max_group_rows == 1: a decode step's experts at batch 1), persistent warps that keep their weight loads
// in flight across rows. gemv() routes to it when it fits and the weights are wide enough to fill
// the GPU (gemv_stream_preferred); callable directly for tests and benchmarks.
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

constexpr int kGemvStreamMaxK = 16384;  // x is staged in shared memory (4 bytes per k)

// Dense with M == 1, or grouped with max_group_rows == 1 (x rows 16-byte aligned: ldx % 4 == 0); K <=
// kGemvStreamMaxK and a multiple of the 16-byte load (16 FP8 / 8 BF16 weights; 128 with act_fp8), 16-byte aligned
// x and weights.
bool gemv_stream_fits(const GemvArgs& args);
// Whether gemv() routes args here (FP8 weights that fit).
bool gemv_stream_preferred(const GemvArgs& args);
// cudaErrorInvalidValue when !gemv_stream_fits(args).
cudaError_t gemv_stream(const GemvArgs& args, cudaStream_t stream);

}  // namespace moeserve::cuda
