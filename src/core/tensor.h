#pragma once
// A dense, row-major tensor: dtype, shape and a shared storage. Views share storage.
// The CPU reference computes in fp32; weights keep their checkpoint dtype until an op reads them.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace moeserve {

enum class Device : uint8_t { CPU, CUDA };

using Shape = std::vector<int64_t>;

std::string shape_string(const Shape& shape);
int64_t shape_numel(const Shape& shape);
// The bytes a tensor of `shape` holds, counted without wrapping: nullopt when a dimension is negative or the
// count passes int64 (a shape from a file must be checked with this before numel() or nbytes() are trusted).
std::optional<int64_t> shape_bytes(DType dtype, const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Freshly allocated (64-byte aligned), contents undefined / zero.
  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // Wraps memory owned by `owner` (an mmap, another tensor).
  static Tensor borrow(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner);
  // A copy of fp32 values.
  static Tensor from_f32(Shape shape, const std::vector<float>& values);

  bool defined() const { return data_ != nullptr || !shape_.empty(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int axis) const { return shape_.at(axis < 0 ? shape_.size() + axis : axis); }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  float* f32() const {
    check(dtype_ == DType::F32, "expected an F32 tensor, got {}", dtype_name(dtype_));
    return static_cast<float*>(data_);
  }

  // Same storage, new shape (numel must match).
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) along axis 0, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Deep copy converted to fp32 (any float dtype).
  Tensor to_f32() const;
  Tensor clone() const;

 private:
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
  Shape shape_;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

// Element of any float dtype as fp32 (F32, F16, BF16, F8_E4M3, F8_E8M0).
float element_to_f32(DType dtype, const void* base, int64_t index);

}  // namespace moeserve
