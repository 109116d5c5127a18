#include "kernels/cuda/runtime.h"

#include <cublasLt.h>

#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace moeserve::cuda {

void require_device() {
  const DeviceInfo& info = device_info();
  check(info.available, "the CUDA backend cannot run: {}", info.reason);
}

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  if (bytes == 0) return;
  cudaError_t st = cudaMalloc(&ptr_, bytes);
  if (st == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    ptr_ = nullptr;
    fail("out of GPU memory allocating {}: {} bytes ({:.2f} GiB) asked, {} bytes ({:.2f} GiB) free of {:.2f} GiB",
         what, bytes, double(bytes) / (1 << 30), free_b, double(free_b) / (1 << 30), double(total_b) / (1 << 30));
  }
  if (st != cudaSuccess) {
    ptr_ = nullptr;
    fail("cudaMalloc of {} bytes for {} failed: {}", bytes, what, cudaGetErrorString(st));
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

template <class T>
void DeviceArray<T>::upload(std::span<const T> host, cudaStream_t stream) {
  check(host.size() <= count_, "device array upload of {} elements into {}", host.size(), count_);
  copy_to_device(data(), host.data(), host.size_bytes(), stream, "upload");
}

template <class T>
std::vector<T> DeviceArray<T>::download(cudaStream_t stream) const {
  std::vector<T> out(count_);
  copy_to_host(out.data(), data(), count_ * sizeof(T), stream, "download");
  return out;
}

template <class T>
void DeviceArray<T>::fill_bytes(int value, cudaStream_t stream) {
  if (count_ == 0) return;
  MOESERVE_CUDA_CHECK(cudaMemsetAsync(data(), value, count_ * sizeof(T), stream));
}

template class DeviceArray<float>;
template class DeviceArray<double>;
template class DeviceArray<int>;
template class DeviceArray<uint8_t>;
template class DeviceArray<uint16_t>;
template class DeviceArray<uint32_t>;
template class DeviceArray<SampleRow>;

Stream::Stream(StreamPriority priority) {
  if (priority == StreamPriority::Normal) {
    MOESERVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    return;
  }
  int least = 0, greatest = 0;  // numerically: greatest priority is the lowest number
  MOESERVE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  MOESERVE_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking,
                                                   priority == StreamPriority::High ? greatest : least));
}
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}
void Stream::synchronize() const { MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* what) {
  if (bytes == 0) return;
  cudaError_t st = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream);
  if (st == cudaSuccess) st = cudaStreamSynchronize(stream);
  check(st == cudaSuccess, "copy of {} bytes to the GPU ({}) failed: {}", bytes, what, cudaGetErrorString(st));
}

void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream, const char* what) {
  if (bytes == 0) return;
  cudaError_t st = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  if (st == cudaSuccess) st = cudaStreamSynchronize(stream);
  check(st == cudaSuccess, "copy of {} bytes from the GPU ({}) failed: {}", bytes, what, cudaGetErrorString(st));
}

namespace {

void lt_check(cublasStatus_t st, const char* what) {
  check(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt {} failed with status {}", what, int(st));
}

struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
};

// Plans are cached by (kind, M, N, K, ldy, workspace size); the scale pointers are set per call.
std::mutex plan_mutex;
std::map<std::tuple<int, int, int, int, int, size_t>, LtPlan> plans;

LtPlan& plan_for(cublasLtHandle_t h, int kind, int M, int N, int K, int ldy, size_t workspace) {
  std::lock_guard<std::mutex> lock(plan_mutex);
  auto key = std::make_tuple(kind, M, N, K, ldy, workspace);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  LtPlan p;
  const bool fp8 = kind == 1;
  lt_check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (fp8) {
    cublasLtMatmulMatrixScale_t blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    cublasLtMatmulMatrixScale_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &blk, sizeof(blk));
    cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof(vec));
  }
  const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  // Column-major view: A = W as K x N (ld K), op T -> N x K; B = x as K x M (ld K); D = N x M (ld N) = y[M, N].
  lt_check(cublasLtMatrixLayoutCreate(&p.a, in, K, N, K), "MatrixLayoutCreate A");
  lt_check(cublasLtMatrixLayoutCreate(&p.b, in, K, M, K), "MatrixLayoutCreate B");
  lt_check(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, N, M, ldy), "MatrixLayoutCreate D");
  if (fp8) {  // dummy scale pointers for the heuristic query
    static float one = 1.0f;
    const void* ptr = &one;
    cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ptr, sizeof(ptr));
    cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ptr, sizeof(ptr));
  }
  cublasLtMatmulPreference_t pref;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, p.op, p.a, p.b, p.d, p.d, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.ok) p.algo = res.algo;
  return plans.emplace(key, p).first->second;
}

}  // namespace

Blas::Blas() {
  cublasLtHandle_t h = nullptr;
  lt_check(cublasLtCreate(&h), "Create");
  handle_ = h;
  size_t bytes;
  workspace(0, &bytes);
}

Blas::~Blas() {
  for (void* w : workspaces_)
    if (w) cudaFree(w);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

void* Blas::workspace(int slot, size_t* bytes) {
  check(slot >= 0 && slot < kSlots, "cuBLASLt workspace slot {}: expected 0..{}", slot, kSlots - 1);
  *bytes = slot == 0 ? size_t(64) << 20 : size_t(16) << 20;
  if (!workspaces_[slot]) MOESERVE_CUDA_CHECK(cudaMalloc(&workspaces_[slot], *bytes));
  return workspaces_[slot];
}

bool Blas::gemm_bf16(const uint16_t* x, const uint16_t* w, float* y, int M, int N, int K, int ldy,
                     cudaStream_t stream, bool accumulate, int slot) {
  auto h = static_cast<cublasLtHandle_t>(handle_);
  size_t bytes;
  void* ws = workspace(slot, &bytes);
  LtPlan& p = plan_for(h, 0, M, N, K, ldy, bytes);
  if (!p.ok) return false;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  cublasStatus_t st =
      cublasLtMatmul(h, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &p.algo, ws, bytes, stream);
  lt_check(st, "Matmul (bf16)");
  return true;
}

bool Blas::gemm_bf16_terms(const uint16_t* terms, int nterms, const uint16_t* w, float* y, int M, int N, int K,
                           int ldy, float* parts, cudaStream_t stream, int slot) {
  if (nterms > 1 && M <= kStackedRows) {
    if (!gemm_bf16(terms, w, parts, nterms * M, N, K, N, stream, false, slot)) return false;
    MOESERVE_CUDA_CHECK(add_parts(parts, nterms, size_t(M) * N, M, N, N, y, ldy, stream));
    return true;
  }
  for (int t = 0; t < nterms; ++t)
    if (!gemm_bf16(terms + size_t(t) * M * K, w, y, M, N, K, ldy, stream, /*accumulate=*/t > 0, slot)) return false;
  return true;
}

namespace {

size_t round_256(size_t n) { return (n + 255) / 256 * 256; }
int padded_rows(int M) { return (M + 15) / 16 * 16; }

// linear_fp8_block's plan: the rows the GEMM runs (M, or M padded with zero rows to a multiple of 16 where cuBLASLt
// has no algorithm for M) and where its pieces lie in the scratch: the quantized x at 0, its scales, then (padded
// only) the padded x and y. plan is null when neither row count has an algorithm.
struct Fp8LinearPlan {
  LtPlan* plan = nullptr;
  bool direct = false;
  int rows = 0;
  size_t scales = 0, padded_x = 0, padded_y = 0, bytes = 0;
};

Fp8LinearPlan fp8_linear_plan(cublasLtHandle_t h, size_t workspace, int M, int N, int K, int ldy) {
  Fp8LinearPlan s;
  LtPlan& direct = plan_for(h, 1, M, N, K, ldy, workspace);
  s.direct = direct.ok;
  s.rows = s.direct ? M : padded_rows(M);
  if (s.direct) {
    s.plan = &direct;
  } else if (LtPlan& padded = plan_for(h, 1, s.rows, N, K, N, workspace); padded.ok) {
    s.plan = &padded;
  }
  const size_t rows = size_t(s.rows);
  s.scales = round_256(rows * K);
  s.padded_x = s.scales + round_256(rows * (K / 128) * 4);
  s.padded_y = s.padded_x + round_256(rows * K * 4);
  s.bytes = s.direct ? s.padded_x : s.padded_y + round_256(rows * N * 4);
  return s;
}

// y = x W^T through plan p (cuBLASLt's block-scaled FP8 GEMM), the scale pointers set for this call.
void matmul_fp8_block(cublasLtHandle_t h, LtPlan& p, void* ws, size_t ws_bytes, const uint8_t* x,
                      const float* x_scales, const uint8_t* w, const float* w_scales, float* y, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(plan_mutex);  // the scale pointers live in the shared descriptor
  cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales));
  cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales));
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t st =
      cublasLtMatmul(h, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &p.algo, ws, ws_bytes, stream);
  lt_check(st, "Matmul (fp8 block-scaled)");
}

}  // namespace

size_t Blas::linear_fp8_block_scratch(int M, int N, int K, int ldy) {
  size_t bytes;
  workspace(0, &bytes);
  return fp8_linear_plan(static_cast<cublasLtHandle_t>(handle_), bytes, M, N, K, ldy).bytes;
}

bool Blas::linear_fp8_block(const float* x, int M, int K, int ldx, const uint8_t* w, const float* w_scales, int N,
                            float* y, int ldy, void* scratch, cudaStream_t stream) {
  size_t bytes;
  void* ws = workspace(0, &bytes);
  const auto h = static_cast<cublasLtHandle_t>(handle_);
  const Fp8LinearPlan s = fp8_linear_plan(h, bytes, M, N, K, ldy);
  if (!s.plan) return false;
  char* p = static_cast<char*>(scratch);
  auto* xq = reinterpret_cast<uint8_t*>(p);
  auto* xs = reinterpret_cast<float*>(p + s.scales);
  auto* xp = reinterpret_cast<float*>(p + s.padded_x);
  auto* yp = reinterpret_cast<float*>(p + s.padded_y);
  const float* xin = x;
  int ld = ldx;
  if (!s.direct) {  // zero rows quantize to zero codes: they add nothing and their outputs are dropped
    MOESERVE_CUDA_CHECK(cudaMemcpy2DAsync(xp, size_t(K) * 4, x, size_t(ldx) * 4, size_t(K) * 4, size_t(M),
                                          cudaMemcpyDeviceToDevice, stream));
    MOESERVE_CUDA_CHECK(cudaMemsetAsync(xp + size_t(M) * K, 0, size_t(s.rows - M) * K * 4, stream));
    xin = xp;
    ld = K;
  }
  MOESERVE_CUDA_CHECK(act_quant_fp8(xin, s.rows, K, ld, xq, xs, stream));
  matmul_fp8_block(h, *s.plan, ws, bytes, xq, xs, w, w_scales, s.direct ? y : yp, stream);
  if (!s.direct)
    MOESERVE_CUDA_CHECK(cudaMemcpy2DAsync(y, size_t(ldy) * 4, yp, size_t(N) * 4, size_t(N) * 4, size_t(M),
                                          cudaMemcpyDeviceToDevice, stream));
  return true;
}

bool Blas::gemm_fp8_block(const uint8_t* x, const float* x_scales, const uint8_t* w, const float* w_scales, float* y,
                          int M, int N, int K, int ldy, cudaStream_t stream) {
  auto h = static_cast<cublasLtHandle_t>(handle_);
  size_t bytes;
  void* ws = workspace(0, &bytes);
  LtPlan& p = plan_for(h, 1, M, N, K, ldy, bytes);
  if (!p.ok) return false;
  matmul_fp8_block(h, p, ws, bytes, x, x_scales, w, w_scales, y, stream);
  return true;
}

}  // namespace moeserve::cuda
