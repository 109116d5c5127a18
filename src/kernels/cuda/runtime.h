#pragma once
// Host-side CUDA runtime pieces for the backend (g++ only: may throw moeserve::Error): device memory with RAII
// and clear out-of-memory messages, typed device arrays, a stream, and the cuBLASLt handle with the BF16 and
// block-scaled FP8 GEMMs the prefill path uses.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace moeserve::cuda {

// Throws unless a Hopper GPU is usable (names the reason: no driver, no device, not sm_90).
void require_device();

// Device memory. allocate() throws with the bytes asked and the bytes free when the GPU is out of memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(size_t count, const std::string& what) : buf_(count * sizeof(T), what), count_(count) {}
  static DeviceArray from(std::span<const T> host, const std::string& what) {
    DeviceArray a(host.size(), what);
    a.upload(host);
    return a;
  }
  T* data() const { return static_cast<T*>(buf_.data()); }
  size_t size() const { return count_; }
  size_t bytes() const { return buf_.bytes(); }
  void upload(std::span<const T> host, cudaStream_t stream = nullptr);
  std::vector<T> download(cudaStream_t stream = nullptr) const;
  void fill_bytes(int value, cudaStream_t stream = nullptr);

 private:
  DeviceBuffer buf_;
  size_t count_ = 0;
};

// Stream priorities: kernels of a higher-priority stream are given free SMs first (CUDA graphs keep the
// priority of the stream each kernel was captured on).
enum class StreamPriority { Normal, High, Low };

class Stream {
 public:
  explicit Stream(StreamPriority priority = StreamPriority::Normal);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// Copies with checks (named for messages).
void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* what);
void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* what);

// The cuBLASLt handle and its workspace. GEMMs compute y[M, N] (fp32, row-major, row stride ldy >= N) = x[M, K] W[N, K]^T.
class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // Workspaces: slot 0 (64 MB, every call's default) and, for calls that may run concurrently with it on other
  // streams, slots 1..kSlots-1 (16 MB each, allocated at their first use, which must be outside graph capture).
  static constexpr int kSlots = 8;
  // BF16 x BF16 -> fp32 (fp32 accumulation); accumulate: y += instead of y =. Returns false when cuBLASLt has
  // no algorithm for the shape.
  bool gemm_bf16(const uint16_t* x, const uint16_t* w, float* y, int M, int N, int K, int ldy, cudaStream_t stream,
                 bool accumulate = false, int slot = 0);
  // y = x W^T for an fp32 x given as `nterms` bf16 terms (to_bf16_split's hi, lo, lo2: [nterms][M][K] back to
  // back; one term is a plain gemm_bf16). Up to kStackedRows rows the terms are stacked as the nterms x M rows of
  // one GEMM (one pass over W) into `parts` ([nterms][M][N]) and added in order (add_parts); past that, one GEMM
  // per term, each after the first accumulating into y. False when cuBLASLt has no algorithm for a shape.
  static constexpr int kStackedRows = 64;
  bool gemm_bf16_terms(const uint16_t* terms, int nterms, const uint16_t* w, float* y, int M, int N, int K, int ldy,
                       float* parts, cudaStream_t stream, int slot = 0);
  // FP8 e4m3 with DeepSeek block scaling: activations 1x128 (x_scales [K/128][M]), weights 128x128
  // (w_scales [ceil(N/128)][ld = round_up(K/128, 4)]). fp32 out. False when unsupported.
  bool gemm_fp8_block(const uint8_t* x, const float* x_scales, const uint8_t* w, const float* w_scales, float* y,
                      int M, int N, int K, int ldy, cudaStream_t stream);
  // y [M][ldy] = x W^T for an fp32 x [M][ldx] through the official FP8 quantizer (act_quant_fp8) and gemm_fp8_block.
  // cuBLASLt has algorithms for some row counts only (none for 769: a server step of three 256-token prompts and a
  // decode row): those rows run padded with zero rows to a multiple of 16, through the scratch. False when there
  // is no algorithm even then. scratch: linear_fp8_block_scratch(M, N, K, ldy) bytes, 256-byte aligned (the
  // quantized x, and where the rows need padding, the padded x and y).
  bool linear_fp8_block(const float* x, int M, int K, int ldx, const uint8_t* w, const float* w_scales, int N, float* y,
                        int ldy, void* scratch, cudaStream_t stream);
  size_t linear_fp8_block_scratch(int M, int N, int K, int ldy);
  void* handle() const { return handle_; }

 private:
  void* workspace(int slot, size_t* bytes);

  void* handle_ = nullptr;
  void* workspaces_[kSlots] = {};
};

}  // namespace moeserve::cuda
