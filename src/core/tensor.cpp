#include "core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace moeserve {

std::string shape_string(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::optional<int64_t> shape_bytes(DType dtype, const Shape& shape) {
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) return std::nullopt;
  if (std::count(shape.begin(), shape.end(), 0)) return 0;  // empty, however large the other dimensions
  int64_t bytes = int64_t(dtype_size(dtype));
  for (int64_t d : shape)
    if (__builtin_mul_overflow(bytes, d, &bytes)) return std::nullopt;
  return bytes;
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  for (int64_t d : shape) check(d >= 0, "negative dimension in shape {}", shape_string(shape));
  // An allocation sized by a wrapped count would be too small for the shape it claims.
  check(shape_bytes(dtype, shape).has_value(), "shape {} of {}: more bytes than 64 bits hold", shape_string(shape),
        dtype_name(dtype));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  size_t bytes = (t.nbytes() + 63) / 64 * 64;
  void* memory = bytes ? std::aligned_alloc(64, bytes) : nullptr;
  if (bytes && !memory) fail("out of host memory allocating {} bytes", bytes);
  t.owner_ = std::shared_ptr<void>(memory, [](void* p) { std::free(p); });
  t.data_ = memory;
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  if (t.nbytes()) std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::borrow(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::from_f32(Shape shape, const std::vector<float>& values) {
  Tensor t = empty(DType::F32, std::move(shape));
  check(size_t(t.numel()) == values.size(), "from_f32: {} values for shape {}", values.size(),
        shape_string(t.shape_));
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  check(shape_numel(shape) == numel(), "cannot reshape {} to {}", shape_string(shape_), shape_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  check(!shape_.empty() && begin >= 0 && begin <= end && end <= shape_[0], "bad row slice [{}, {}) of {}",
        begin, end, shape_string(shape_));
  int64_t row = shape_[0] ? numel() / shape_[0] : 0;
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + size_t(begin * row) * dtype_size(dtype_);
  return t;
}

float element_to_f32(DType dtype, const void* base, int64_t i) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::F64: return float(static_cast<const double*>(base)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::F8_E4M3: return fp8_e4m3_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::F8_E8M0: return e8m0_to_f32(static_cast<const uint8_t*>(base)[i]);
    default: fail("cannot read {} elements as floats", dtype_name(dtype));
  }
}

Tensor Tensor::to_f32() const {
  Tensor out = empty(DType::F32, shape_);
  int64_t n = numel();
  float* dst = out.f32();
  if (dtype_ == DType::F32) {
    if (n) std::memcpy(dst, data_, size_t(n) * 4);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = element_to_f32(dtype_, data_, i);
  }
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(out.data_, data_, nbytes());
  return out;
}

}  // namespace moeserve
