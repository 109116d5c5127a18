#pragma once
// Hopper (sm_90a) device helpers shared by the TMA + wgmma kernels (moe_w4a8_gemm.cu, gemm_fp8_skinny.cu):
// mbarriers, TMA and bulk copies into shared memory, 32-bit shared-memory loads, wgmma fences and the 128-byte
// swizzled K-major operand descriptor; and the host's tensor-map encoder (the driver entry point, found once).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace moeserve::cuda::hopper {

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// The arrive on the mbarrier at shared address `addr` (mbar_arrive and mbar_arrive_after).
__device__ __forceinline__ void mbar_arrive_at(uint32_t addr) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(addr) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) { mbar_arrive_at(smem_addr(bar)); }
// mbar_arrive issued only once `loaded` is in registers: give it values the thread read from the stage and a zero the
// compiler cannot fold (`runtime_zero`, from a kernel parameter); the barrier's address then depends on the loads.
// ptxas otherwise may issue a release's arrive between shared-memory loads and their first use (moe_w4a8_gemm's
// SASS: LDS, LDS, SYNCS.ARRIVE, FFMA), which leaves the loads to the hardware's ordering; under compute-sanitizer
// initcheck on H100s a load in flight at the arrive read the producer's next chunk (moe-w4a8.md, fifty-ninth session).
__device__ __forceinline__ void mbar_arrive_after(uint64_t* bar, uint32_t loaded, uint32_t runtime_zero) {
  mbar_arrive_at(smem_addr(bar) + (loaded & runtime_zero));
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// Whether the barrier's phase of this parity has completed, without waiting (one lane's answer for the warp, so
// that the warp takes one branch).
__device__ __forceinline__ bool mbar_ready_warp(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return __shfl_sync(0xffffffffu, done, 0) != 0;
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");  // non-.aligned: safe after divergence
}
// The value unchanged, but opaque to the compiler's arithmetic (it cannot re-associate through it).
__device__ __forceinline__ uint32_t opaque_u32(uint32_t v) {
  uint32_t r;
  asm("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
}
// Shared-memory loads by 32-bit shared address (generic pointers cost 64-bit address arithmetic per load).
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr)
               : "memory");
  return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t lds_u8(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u8 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ float lds_f32(uint32_t addr) { return __uint_as_float(lds32(addr)); }
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
// Thread 0 initializes S full barriers (one arrival: the producer's, plus the TMA bytes) and S empty barriers (one
// arrival per consumer warp) and fences them for the async proxy; the caller synchronizes the block before any
// other thread uses them.
template <int S>
__device__ __forceinline__ void init_stage_barriers(uint64_t* full, uint64_t* empty, int consumer_warps) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], uint32_t(consumer_warps));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// K-major, 128-byte-swizzled wgmma operand descriptor: rows of 128 bytes, 8-row atoms 1024 bytes apart. The high
// word is the same for every operand (stride byte offset 1024, 128-byte swizzle): only the low word (start address
// and a leading byte offset unused for swizzled K-major) is computed, so the compiler moves one register, not two,
// into the uniform registers wgmma reads.
constexpr uint32_t kSw128DescHi = (1024 >> 4) | (1u << 30);
__device__ __forceinline__ uint32_t sw128_desc_lo(uint32_t smem_byte_addr) {
  return ((smem_byte_addr & 0x3ffff) >> 4) | (1u << 16);
}
__device__ __forceinline__ uint64_t sw128_desc(uint32_t lo) { return (uint64_t(kSw128DescHi) << 32) | lo; }


// ---- host: cuTensorMapEncodeTiled through the runtime's driver entry point (null when unavailable)
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiled encode_fn() {
  static EncodeTiled fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return EncodeTiled(nullptr);
    return reinterpret_cast<EncodeTiled>(ptr);
  }();
  return fn;
}

// Row-major 2-D tensor [rows][cols] of `elem_bytes`-byte elements with a {box_cols, box_rows} box (box_cols x
// elem_bytes = 128) and the 128-byte swizzle that the K-major descriptors expect; rows past `rows` read as zeros.
inline bool make_map_2d(CUtensorMap* map, const void* base, CUtensorMapDataType type, int elem_bytes, int rows,
                        int cols, int box_cols, int box_rows) {
  EncodeTiled enc = encode_fn();
  if (!enc) return false;
  cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  cuuint64_t strides[1] = {cuuint64_t(cols) * cuuint64_t(elem_bytes)};
  cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  cuuint32_t estr[2] = {1, 1};
  return enc(map, type, 2, const_cast<void*>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace moeserve::cuda::hopper
