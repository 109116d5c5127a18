#pragma once
// The oracle fixtures of tests/fixtures/models/<name>: HF transformers 5.17 full-forward fp32 logits.
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "test_paths.h"

namespace moeserve::testing {

struct Oracle {
  std::vector<int32_t> ids;  // prompt + greedy continuation, P + N
  int64_t prompt_len = 0;
  Tensor logits;             // [P + N - 1, vocab]
};

inline std::string model_fixture(const std::string& name) { return fixture("models/" + name); }

inline Oracle load_oracle(const std::string& name) {
  auto ckpt = io::Checkpoint::open_files({model_fixture(name) + "/oracle.safetensors"});
  Oracle o;
  const Tensor& ids = ckpt.get("input_ids").tensor;
  for (int64_t i = 0; i < ids.numel(); ++i) o.ids.push_back(int32_t(ids.data<int64_t>()[i]));
  o.prompt_len = ckpt.get("prompt_len").tensor.data<int64_t>()[0];
  o.logits = ckpt.get("logits").tensor.clone();
  return o;
}

// Largest |a - b| over two equally shaped fp32 tensors.
inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  float worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    float d = std::fabs(a.f32()[i] - b.f32()[i]);
    if (!(d <= worst)) worst = d;  // NaN propagates as a failure
  }
  return worst;
}

}  // namespace moeserve::testing
