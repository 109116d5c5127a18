#pragma once
// y = x W^T for a checkpoint linear on the CPU reference path: the dequantized fp32 weight, and under
// checkpoint numerics the FP8 (per token, per 128 channels, power-of-two scale) activation the official
// kernels feed FP8/FP4 weights with.
#include "core/tensor.h"
#include "model/numerics.h"
#include "model/weights.h"

namespace moeserve::model {

// x [rows, in] fp32 -> [rows, out] fp32.
Tensor linear(const Tensor& x, const LinearWeight& w, const Numerics& numerics);
void linear_into(const float* x, int64_t rows, const LinearWeight& w, const Numerics& numerics, float* y);

}  // namespace moeserve::model
