#include "model/mxfp4_experts.h"

#include <atomic>
#include <cstring>

#include "core/error.h"
#include "core/threads.h"
#include "kernels/cpu/moe_w4a8_pack.h"

namespace moeserve::model {

namespace pk = kernels::cpu;

namespace {

// Packs one [N, K] matrix made of the row blocks `parts` (each MXFP4 [rows, K]).
int64_t pack_rows(const std::vector<const LinearWeight*>& parts, int K, uint8_t* packed, uint64_t* flags) {
  int N = 0;
  for (const LinearWeight* p : parts) N += int(p->out);
  std::vector<uint8_t> weight(size_t(N) * (K / 2)), scale(size_t(N) * (K / 32));
  size_t row = 0;
  for (const LinearWeight* p : parts) {
    std::memcpy(weight.data() + row * (K / 2), p->weight.raw(), size_t(p->out) * (K / 2));
    std::memcpy(scale.data() + row * (K / 32), p->scale.raw(), size_t(p->out) * (K / 32));
    row += size_t(p->out);
  }
  return pk::moe_w4a8_pack_expert(weight.data(), scale.data(), N, K, packed, flags);
}

}  // namespace

bool mxfp4_experts_shape_ok(int64_t D, int64_t I) { return D > 0 && I > 0 && D % 256 == 0 && I % 256 == 0; }

DummyWeightTypes dummy_weight_types(const io::ModelConfig& config, bool exact) {
  const bool fp8 = config.quantization.has_value();
  return {fp8, fp8 && config.expert_dtype == "fp4" && !exact &&
                   mxfp4_experts_shape_ok(config.hidden_size, config.moe_intermediate_size)};
}

PackedMxfp4Experts pack_mxfp4_experts(const std::vector<ExpertWeights>& experts, int first, int count) {
  check(first >= 0 && count > 0 && size_t(first) + size_t(count) <= experts.size(),
        "internal: experts [{}, {}) of {}", first, first + count, experts.size());
  PackedMxfp4Experts p;
  p.first = first;
  p.count = count;
  p.D = int(experts[size_t(first)].w1.in);
  p.I = int(experts[size_t(first)].w1.out);
  check(mxfp4_experts_shape_ok(p.D, p.I), "MXFP4 experts: hidden {} / expert width {} do not fit the W4A8 GEMM "
        "(both must be multiples of 256)", p.D, p.I);
  for (int e = first; e < first + count; ++e) {
    const ExpertWeights& x = experts[size_t(e)];
    for (const LinearWeight* w : {&x.w1, &x.w3, &x.w2})
      check(w->format == WeightFormat::Mxfp4, "{}: expected MXFP4 (all routed experts of a layer share a format)",
            w->name);
    check(x.w1.in == p.D && x.w3.in == p.D && x.w1.out == p.I && x.w3.out == p.I && x.w2.out == p.D && x.w2.in == p.I,
          "{}: shape differs from the layer's other experts", x.w1.name);
  }
  p.w13_bytes = pk::moe_w4a8_packed_expert_bytes(2 * p.I, p.D);
  p.w2_bytes = pk::moe_w4a8_packed_expert_bytes(p.D, p.I);
  p.w13_flag_words = pk::moe_w4a8_flag_expert_words(2 * p.I, p.D);
  p.w2_flag_words = pk::moe_w4a8_flag_expert_words(p.D, p.I);
  p.w13.resize(p.w13_bytes * size_t(count));
  p.w2.resize(p.w2_bytes * size_t(count));
  p.w13_flags.resize(p.w13_flag_words * size_t(count));
  p.w2_flags.resize(p.w2_flag_words * size_t(count));
  std::atomic<int64_t> wide{0};
  parallel_for(count, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const ExpertWeights& x = experts[size_t(first + i)];
      wide += pack_rows({&x.w1, &x.w3}, p.D, p.w13.data() + size_t(i) * p.w13_bytes,
                        p.w13_flags.data() + size_t(i) * p.w13_flag_words);
      wide += pack_rows({&x.w2}, p.I, p.w2.data() + size_t(i) * p.w2_bytes,
                        p.w2_flags.data() + size_t(i) * p.w2_flag_words);
    }
  });
  p.wide_groups = wide.load();
  return p;
}

}  // namespace moeserve::model
