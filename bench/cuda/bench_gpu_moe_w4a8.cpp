// Host half of bench_gpu_moe_w4a8 (CMake builds bench/cuda/<name>.cpp and bench/cuda/<name>.cu into one bench
// <name>): the cuBLASLt peer's GEMM call, through the CUDA backend's own wrapper cuda::Blas::gemm_fp8_block
// (kernels/cuda/runtime.h), the configuration CudaGemm.CublasLtBf16AndFp8BlockScaled passes with on the H200.
// runtime.h is C++20 and may throw moeserve::Error, so the .cu (nvcc, C++17) reaches it through these three
// functions, declared identically in bench_gpu_moe_w4a8.cu.
#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "model/routing_histogram.h"

namespace moeserve::bench_moe_w4a8 {

struct LtGemm {
  cuda::Blas blas;
};

LtGemm* lt_gemm_create(std::string* error) {
  try {
    return new LtGemm();
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
}

void lt_gemm_destroy(LtGemm* g) { delete g; }

// y[M, N] (fp32, row stride N) = x[M, K] w[N, K]^T with FP8 e4m3 x (scales 1x128, [K/128][M]) and w (scales
// 128x128, [ceil(N/128)][round_up(K/128, 4)]). 1: enqueued on `stream`; 0: cuBLASLt has no algorithm for the
// shape (nothing enqueued); -1: cuBLASLt failed (message in *error).
int lt_gemm_fp8_block(LtGemm* g, const uint8_t* x, const float* x_scales, const uint8_t* w, const float* w_scales,
                      float* y, int M, int N, int K, cudaStream_t stream, std::string* error) {
  try {
    return g->blas.gemm_fp8_block(x, x_scales, w, w_scales, y, M, N, K, N, stream) ? 1 : 0;
  } catch (const std::exception& e) {
    *error = e.what();
    return -1;
  }
}

// The load shares of E experts (largest first) from a routing histogram file (model/routing_histogram.h); false
// with *error when the file cannot be read or is not a histogram.
bool recorded_load_shares(const std::string& path, int E, std::vector<double>* shares, std::string* error) {
  try {
    *shares = model::expert_load_shares(model::RoutingHistogram::load(path), E);
    return true;
  } catch (const std::exception& e) {
    *error = e.what();
    return false;
  }
}

}  // namespace moeserve::bench_moe_w4a8
