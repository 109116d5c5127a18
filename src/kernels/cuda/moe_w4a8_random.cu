// Random packed MXFP4 experts for performance work (--load-format dummy): the packed layout of
// kernels/cpu/moe_w4a8_pack.h filled directly on the GPU, no host copy of the (multi-GB) experts.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cpu/moe_w4a8_pack.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_w4a8.h"

namespace moeserve::cuda {

namespace {

namespace pack = moeserve::kernels::cpu;

__device__ __forceinline__ uint32_t mix32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return uint32_t(x);
}

// Per expert: the chunks (weight bytes uniform: any nibble is an e2m1 code; scale bytes u = 12 - [0, spread],
// i.e. exponents R - [0, spread]), then R[N] = ref_exp.
__global__ void fill_random_packed_kernel(uint32_t* packed, size_t words, size_t expert_words, size_t ref_word,
                                          int ref_exp, int spread, uint64_t seed) {
  dev::pdl_begin();
  constexpr int kWordsPerChunk = pack::kChunkBytes / 4, kWeightWords = pack::kChunkWeightBytes / 4;
  const uint32_t ref4 = uint32_t(ref_exp) * 0x01010101u;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x) {
    const size_t in_expert = i % expert_words;
    const uint32_t r = mix32(seed * 0x9E3779B97F4A7C15ull + i);
    if (in_expert >= ref_word) {
      packed[i] = ref4;
    } else if (int(in_expert % kWordsPerChunk) < kWeightWords) {
      packed[i] = r;
    } else {
      uint32_t v = 0;
      for (int b = 0; b < 4; ++b) v |= uint32_t(12 - int(((r >> (8 * b)) & 0xff) % uint32_t(spread + 1))) << (8 * b);
      packed[i] = v;
    }
  }
}

}  // namespace

cudaError_t moe_w4a8_fill_random(uint8_t* packed, int E, int N, int K, int ref_exp, int spread, uint64_t seed,
                                 cudaStream_t stream) {
  if (!packed || E <= 0 || !pack::moe_w4a8_pack_shape_ok(N, K) || ref_exp < spread || ref_exp > 254 || spread < 0 ||
      spread > pack::kFastSpread)
    return cudaErrorInvalidValue;
  const size_t expert_words = pack::moe_w4a8_packed_expert_bytes(N, K) / 4;
  const size_t ref_word = pack::moe_w4a8_row_ref_offset(N, K) / 4;
  dev::launch(fill_random_packed_kernel, dim3(1024), dim3(256), 0, stream, reinterpret_cast<uint32_t*>(packed),
              expert_words * E, expert_words, ref_word, ref_exp, spread, seed);
  return cudaGetLastError();
}

}  // namespace moeserve::cuda
