#include "model/linear.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"

namespace moeserve::model {

Numerics Numerics::parse(const std::string& name) {
  if (name == "reference") return reference();
  if (name == "checkpoint") return checkpoint();
  fail("--numerics '{}' (expected 'reference' or 'checkpoint')", name);
}

void linear_into(const float* x, int64_t rows, const LinearWeight& w, const Numerics& numerics, float* y) {
  if (numerics.act_fp8 && w.format != WeightFormat::Dense) {
    std::vector<float> q(x, x + rows * w.in);
    kernels::cpu::fp8_block_sim(q.data(), rows, w.in, w.in, 128);
    kernels::cpu::matmul_nt(q.data(), rows, w.in, w.f32.f32(), w.out, y);
    return;
  }
  kernels::cpu::matmul_nt(x, rows, w.in, w.f32.f32(), w.out, y);
}

Tensor linear(const Tensor& x, const LinearWeight& w, const Numerics& numerics) {
  check(x.rank() == 2 && x.dim(1) == w.in, "linear '{}': input {} does not match [*, {}]", w.name,
        shape_string(x.shape()), w.in);
  Tensor y = Tensor::empty(DType::F32, {x.dim(0), w.out});
  linear_into(x.f32(), x.dim(0), w, numerics, y.f32());
  return y;
}

}  // namespace moeserve::model
