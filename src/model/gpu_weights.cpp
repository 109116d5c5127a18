#if MOESERVE_WITH_CUDA
#include "model/gpu_weights.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/cpu/moe_w4a8_pack.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/device.h"

namespace moeserve::model {

namespace {

using cuda::DeviceArray;
using cuda::WeightType;

DeviceArray<float> upload_f32(const Tensor& t, const std::string& name) {
  if (!t.defined() || t.numel() == 0) return {};
  Tensor f = t.dtype() == DType::F32 ? t : t.to_f32();
  return DeviceArray<float>::from(std::span<const float>(f.f32(), size_t(f.numel())), name);
}

DeviceArray<float> filled(size_t n, float value, cudaStream_t stream, const std::string& name) {
  DeviceArray<float> a(n, name);
  MOESERVE_CUDA_CHECK(cuda::fill_value(a.data(), n, value, stream));
  return a;
}

DeviceArray<float> random_f32(size_t n, float scale, uint64_t seed, cudaStream_t stream, const std::string& name) {
  DeviceArray<float> a(n, name);
  MOESERVE_CUDA_CHECK(cuda::fill_uniform(a.data(), n, 0, scale, seed, stream));
  return a;
}

// Whether each row of `width` ids holds distinct values (tid2eid: a token's hash experts).
bool rows_distinct(const std::vector<int>& ids, size_t width) {
  for (size_t r = 0; width > 0 && r + width <= ids.size(); r += width)
    for (size_t i = r; i < r + width; ++i)
      for (size_t j = r; j < i; ++j)
        if (ids[i] == ids[j]) return false;
  return true;
}

float scale_at(const LinearWeight& w, int64_t br, int64_t bc) {
  const int64_t cols = w.scale.dim(1);
  if (w.scale.dtype() == DType::F32) return w.scale.f32()[br * cols + bc];
  return e8m0_to_f32(w.scale.data<uint8_t>()[br * cols + bc]);
}

}  // namespace

GemmView GpuLinear::view(int index, int row_begin, int rows) const {
  GemmView v;
  v.type = type;
  v.N = rows < 0 ? out - row_begin : rows;
  v.K = in;
  v.act_quant = act_quant;
  const size_t matrix = size_t(out) * in;
  v.w = static_cast<const char*>(w.data()) + (size_t(index) * matrix + size_t(row_begin) * in) * element_bytes();
  if (type == WeightType::FP8) {
    if (row_scale.size() > 0) v.row_scale = row_scale.data() + (size_t(index) * out + row_begin) * scale_ld;
    v.scale_ld = scale_ld;
    if (blk_scale.size() > 0 && row_begin % 128 == 0 && v.N % 128 == 0) {
      v.blk_scale = blk_scale.data() + (size_t(index) * (out / 128) + row_begin / 128) * blk_ld;
      v.blk_ld = blk_ld;
    }
  }
  return v;
}

bool gemv_reads_block_scales() {
  static const bool on = !env_is("MOESERVE_GEMV_BLOCK_SCALES", "0");
  return on;
}

bool GpuLinear::keeps_row_copies(bool grid, int group_rows) {
  return !grid || group_rows % 128 != 0 || !gemv_reads_block_scales();
}

GpuLinear GpuLinear::upload(const std::vector<const LinearWeight*>& parts, int count, const std::string& name,
                            int group_rows) {
  check(!parts.empty() && parts.size() % size_t(count) == 0, "internal: bad linear parts for {}", name);
  const size_t per = parts.size() / size_t(count);
  GpuLinear g;
  g.count = count;
  g.in = int(parts[0]->in);
  for (size_t j = 0; j < per; ++j) g.out += int(parts[j]->out);
  const bool fp8 = parts[0]->format == WeightFormat::Fp8Block;
  g.act_quant = parts[0]->format != WeightFormat::Dense;
  for (const LinearWeight* p : parts) {
    check(p->in == g.in, "{}: stacked parts disagree on the input width", name);
    check((p->format == WeightFormat::Fp8Block) == fp8, "{}: stacked parts mix FP8 and non-FP8 formats", name);
  }
  g.type = fp8 ? WeightType::FP8 : WeightType::BF16;
  const size_t matrix = size_t(g.out) * g.in;
  g.w = cuda::DeviceBuffer(matrix * count * g.element_bytes(), name);
  if (!fp8) {
    std::vector<uint16_t> host(matrix);
    for (int i = 0; i < count; ++i) {
      size_t row = 0;
      for (size_t j = 0; j < per; ++j) {
        const LinearWeight& p = *parts[size_t(i) * per + j];
        const float* src = p.f32.f32();
        for (size_t k = 0; k < size_t(p.out) * g.in; ++k) host[row * g.in + k] = f32_to_bf16(src[k]);
        row += size_t(p.out);
      }
      cuda::copy_to_device(static_cast<uint16_t*>(g.w.data()) + size_t(i) * matrix, host.data(),
                           matrix * sizeof(uint16_t), nullptr, name.c_str());
    }
    return g;
  }
  g.scale_ld = (g.in + 127) / 128;
  const bool aligned = g.out % 128 == 0 && g.in % 128 == 0;
  bool parts_aligned = true;
  for (size_t j = 0; j < per; ++j) parts_aligned &= parts[j]->out % 128 == 0;
  g.blk_ld = (g.scale_ld + 3) / 4 * 4;
  const bool grid = aligned && parts_aligned;
  if (keeps_row_copies(grid, group_rows))
    g.row_scale = DeviceArray<float>(size_t(count) * g.out * g.scale_ld, name + " row scales");
  if (grid) g.blk_scale = DeviceArray<float>(size_t(count) * (g.out / 128) * g.blk_ld, name + " block scales");
  std::vector<uint8_t> q(matrix);
  std::vector<float> rs(g.row_scale.size() ? size_t(g.out) * g.scale_ld : 0),
      bs(g.blk_scale.size() ? size_t(g.out / 128) * g.blk_ld : 0, 0.0f);
  for (int i = 0; i < count; ++i) {
    size_t row = 0;
    for (size_t j = 0; j < per; ++j) {
      const LinearWeight& p = *parts[size_t(i) * per + j];
      std::memcpy(q.data() + row * g.in, p.weight.raw(), size_t(p.out) * g.in);
      if (!rs.empty())
        for (int64_t r = 0; r < p.out; ++r)
          for (int64_t kb = 0; kb < g.scale_ld; ++kb)
            rs[(row + size_t(r)) * g.scale_ld + size_t(kb)] = scale_at(p, r / 128, kb);
      if (!bs.empty())
        for (int64_t br = 0; br < p.out / 128; ++br)
          for (int64_t kb = 0; kb < g.scale_ld; ++kb) bs[(row / 128 + size_t(br)) * g.blk_ld + size_t(kb)] = scale_at(p, br, kb);
      row += size_t(p.out);
    }
    cuda::copy_to_device(static_cast<uint8_t*>(g.w.data()) + size_t(i) * matrix, q.data(), matrix, nullptr, name.c_str());
    if (!rs.empty())
      cuda::copy_to_device(g.row_scale.data() + size_t(i) * rs.size(), rs.data(), rs.size() * sizeof(float), nullptr,
                           name.c_str());
    if (!bs.empty())
      cuda::copy_to_device(g.blk_scale.data() + size_t(i) * bs.size(), bs.data(), bs.size() * sizeof(float), nullptr,
                           name.c_str());
  }
  return g;
}

GpuLinear GpuLinear::random(WeightType type, int out, int in, int count, float scale, uint64_t seed,
                            cudaStream_t stream, const std::string& name, int group_rows) {
  check(type != WeightType::MXFP4, "internal: {}: MXFP4 is for routed experts (GpuMxfp4Experts)", name);
  GpuLinear g;
  g.type = type;
  g.out = out;
  g.in = in;
  g.count = count;
  g.act_quant = type == WeightType::FP8;
  const size_t n = size_t(out) * in * count;
  g.w = cuda::DeviceBuffer(n * g.element_bytes(), name);
  if (type == WeightType::BF16) {
    MOESERVE_CUDA_CHECK(cuda::fill_uniform(g.w.data(), n, 1, scale, seed, stream));
    return g;
  }
  // FP8: e4m3 values uniform in [-448, 448], every block scale scale / 448 (a power of two, as E8M0).
  MOESERVE_CUDA_CHECK(cuda::fill_uniform(g.w.data(), n, 2, 448.0f, seed, stream));
  const float s = kernels::cpu::pow2_ceil(scale / 448.0f);
  g.scale_ld = (in + 127) / 128;
  const bool grid = out % 128 == 0 && in % 128 == 0;
  if (keeps_row_copies(grid, group_rows))
    g.row_scale = filled(size_t(count) * out * g.scale_ld, s, stream, name + " row scales");
  if (grid) {
    g.blk_ld = (g.scale_ld + 3) / 4 * 4;
    g.blk_scale = filled(size_t(count) * (out / 128) * g.blk_ld, s, stream, name + " block scales");
  }
  return g;
}

cuda::MoeW4A8Weights GpuMxfp4Experts::w13_view() const {
  cuda::MoeW4A8Weights v;
  v.packed = static_cast<const uint8_t*>(w13.data());
  v.wide_flags = static_cast<const uint64_t*>(w13_flags.data());
  v.E = E, v.N = 2 * I, v.K = D;
  return v;
}

cuda::MoeW4A8Weights GpuMxfp4Experts::w2_view() const {
  cuda::MoeW4A8Weights v;
  v.packed = static_cast<const uint8_t*>(w2.data());
  v.wide_flags = static_cast<const uint64_t*>(w2_flags.data());
  v.E = E, v.N = D, v.K = I;
  return v;
}

namespace pk = kernels::cpu;

GpuMxfp4Experts GpuMxfp4Experts::allocate(int E, int D, int I, const std::string& name) {
  GpuMxfp4Experts g;
  g.E = E, g.D = D, g.I = I;
  g.w13 = cuda::DeviceBuffer(pk::moe_w4a8_packed_expert_bytes(2 * I, D) * E, name + " w1+w3 (mxfp4)");
  g.w13_flags = cuda::DeviceBuffer(pk::moe_w4a8_flag_expert_words(2 * I, D) * 8 * E, name + " w1+w3 flags");
  g.w2 = cuda::DeviceBuffer(pk::moe_w4a8_packed_expert_bytes(D, I) * E, name + " w2 (mxfp4)");
  g.w2_flags = cuda::DeviceBuffer(pk::moe_w4a8_flag_expert_words(D, I) * 8 * E, name + " w2 flags");
  return g;
}

GpuMxfp4Experts GpuMxfp4Experts::upload(const std::vector<ExpertWeights>& experts, const std::string& name) {
  check(!experts.empty(), "internal: {} has no experts", name);
  GpuMxfp4Experts g = allocate(int(experts.size()), int(experts[0].w1.in), int(experts[0].w1.out), name);
  // Batches of experts packed in parallel on the host, then copied.
  const int batch = std::max(1, worker_count());
  for (int first = 0; first < g.E; first += batch) {
    const PackedMxfp4Experts p = pack_mxfp4_experts(experts, first, std::min(batch, g.E - first));
    cuda::copy_to_device(static_cast<uint8_t*>(g.w13.data()) + first * p.w13_bytes, p.w13.data(), p.w13.size(),
                         nullptr, name.c_str());
    cuda::copy_to_device(static_cast<uint64_t*>(g.w13_flags.data()) + first * p.w13_flag_words, p.w13_flags.data(),
                         p.w13_flags.size() * 8, nullptr, name.c_str());
    cuda::copy_to_device(static_cast<uint8_t*>(g.w2.data()) + first * p.w2_bytes, p.w2.data(), p.w2.size(), nullptr,
                         name.c_str());
    cuda::copy_to_device(static_cast<uint64_t*>(g.w2_flags.data()) + first * p.w2_flag_words, p.w2_flags.data(),
                         p.w2_flags.size() * 8, nullptr, name.c_str());
  }
  return g;
}

GpuMxfp4Experts GpuMxfp4Experts::random(int E, int D, int I, uint64_t seed, cudaStream_t stream,
                                        const std::string& name) {
  check(mxfp4_experts_shape_ok(D, I), "--load-format dummy: MXFP4 experts need hidden_size % 256 == 0 and "
        "moe_intermediate_size % 256 == 0 (the W4A8 GEMM's tiles); got {} and {}", D, I);
  GpuMxfp4Experts g = allocate(E, D, I, name);
  // Uniform e2m1 codes have an RMS of about 2.9; scales 2^[R - 2, R] put a row's RMS near 1/sqrt(K).
  auto ref_exp = [](int K) { return 127 + int(std::lround(std::log2(1.0 / (2.9 * std::sqrt(double(K)))))) + 1; };
  MOESERVE_CUDA_CHECK(cuda::moe_w4a8_fill_random(static_cast<uint8_t*>(g.w13.data()), E, 2 * I, D, ref_exp(D), 2,
                                                 seed, stream));
  MOESERVE_CUDA_CHECK(cuda::moe_w4a8_fill_random(static_cast<uint8_t*>(g.w2.data()), E, D, I, ref_exp(I), 2, seed + 1,
                                                 stream));
  MOESERVE_CUDA_CHECK(cudaMemsetAsync(g.w13_flags.data(), 0, g.w13_flags.bytes(), stream));
  MOESERVE_CUDA_CHECK(cudaMemsetAsync(g.w2_flags.data(), 0, g.w2_flags.bytes(), stream));
  return g;
}

namespace {

GpuCompressor upload_compressor(const CompressorWeights& c, const std::string& name) {
  GpuCompressor g;
  g.ratio = int(c.ratio);
  g.dim = int(c.dim);
  g.overlap = c.overlap;
  g.wkv_gate = GpuLinear::upload({&c.wkv, &c.wgate}, 1, name + ".wkv+wgate");
  g.ape = upload_f32(c.ape, name + ".ape");
  g.norm = upload_f32(c.norm, name + ".norm");
  return g;
}

size_t linear_bytes(const GpuLinear& l) { return l.bytes(); }

}  // namespace

GpuWeights GpuWeights::upload(const io::ModelConfig& c, const ModelWeights& w, bool mxfp4_experts) {
  cuda::require_device();
  GpuWeights g;
  // The embedding: bf16 when every value is one (the checkpoints'), else fp32.
  const Tensor& e = w.embed;
  bool bf16 = true;
  for (int64_t i = 0; i < e.numel() && bf16; ++i) bf16 = round_to_bf16(e.f32()[i]) == e.f32()[i];
  g.embed_bf16 = bf16;
  if (bf16) {
    std::vector<uint16_t> host(size_t(e.numel()));
    for (size_t i = 0; i < host.size(); ++i) host[i] = f32_to_bf16(e.f32()[i]);
    g.embed = cuda::DeviceBuffer(host.size() * 2, "embedding");
    cuda::copy_to_device(g.embed.data(), host.data(), host.size() * 2, nullptr, "embedding");
  } else {
    g.embed = cuda::DeviceBuffer(e.nbytes(), "embedding");
    cuda::copy_to_device(g.embed.data(), e.f32(), e.nbytes(), nullptr, "embedding");
  }
  g.head = GpuLinear::upload({&w.head}, 1, "head");
  g.norm = upload_f32(w.norm, "norm");
  g.hc_head_fn = upload_f32(w.hc_head.fn, "hc_head_fn");
  g.hc_head_base = upload_f32(w.hc_head.base, "hc_head_base");
  g.hc_head_scale = upload_f32(w.hc_head.scale, "hc_head_scale");
  g.bytes = g.embed.bytes() + g.head.bytes();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const BlockWeights& b = w.layers[size_t(l)];
    const std::string p = "layers." + std::to_string(l);
    GpuLayer L;
    L.attn_norm = upload_f32(b.attn_norm, p + ".attn_norm");
    L.ffn_norm = upload_f32(b.ffn_norm, p + ".ffn_norm");
    L.hc_attn_fn = upload_f32(b.hc_attn.fn, p + ".hc_attn_fn");
    L.hc_attn_base = upload_f32(b.hc_attn.base, p + ".hc_attn_base");
    L.hc_attn_scale = upload_f32(b.hc_attn.scale, p + ".hc_attn_scale");
    L.hc_ffn_fn = upload_f32(b.hc_ffn.fn, p + ".hc_ffn_fn");
    L.hc_ffn_base = upload_f32(b.hc_ffn.base, p + ".hc_ffn_base");
    L.hc_ffn_scale = upload_f32(b.hc_ffn.scale, p + ".hc_ffn_scale");
    const AttentionWeights& a = b.attn;
    L.wq_a = GpuLinear::upload({&a.wq_a}, 1, p + ".attn.wq_a");
    L.wq_b = GpuLinear::upload({&a.wq_b}, 1, p + ".attn.wq_b");
    L.wkv = GpuLinear::upload({&a.wkv}, 1, p + ".attn.wkv");
    L.wo_a = GpuLinear::upload({&a.wo_a}, 1, p + ".attn.wo_a", int(c.o_lora_rank));  // GEMVs per group
    L.wo_a.act_quant = false;  // the grouped projection runs on the dequantized weights (model/attention.cpp)
    L.wo_b = GpuLinear::upload({&a.wo_b}, 1, p + ".attn.wo_b");
    L.q_norm = upload_f32(a.q_norm, p + ".attn.q_norm");
    L.kv_norm = upload_f32(a.kv_norm, p + ".attn.kv_norm");
    L.sink = upload_f32(a.sink, p + ".attn.attn_sink");
    if (a.compressor) L.compressor = upload_compressor(*a.compressor, p + ".attn.compressor");
    if (a.indexer) {
      L.index_compressor = upload_compressor(a.indexer->compressor, p + ".attn.indexer.compressor");
      L.index_wq_b = GpuLinear::upload({&a.indexer->wq_b}, 1, p + ".attn.indexer.wq_b");
      L.index_weights_proj = GpuLinear::upload({&a.indexer->weights_proj}, 1, p + ".attn.indexer.weights_proj");
    }
    const MoeWeights& m = b.ffn;
    L.gate = GpuLinear::upload({&m.gate}, 1, p + ".ffn.gate");
    L.gate.act_quant = false;  // the router is computed in fp32 on the stored weights
    L.gate_bias = upload_f32(m.bias, p + ".ffn.gate.bias");
    if (m.tid2eid.defined() && m.tid2eid.numel() > 0) {
      std::vector<int> ids(size_t(m.tid2eid.numel()));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int(m.tid2eid.data<int64_t>()[i]);
      L.tid2eid = DeviceArray<int>::from(std::span<const int>(ids), p + ".ffn.gate.tid2eid");
      L.tid2eid_distinct = rows_distinct(ids, size_t(m.tid2eid.dim(1)));
    }
    std::vector<const LinearWeight*> w13, w2;
    for (const ExpertWeights& x : m.experts) {
      w13.push_back(&x.w1);
      w13.push_back(&x.w3);
      w2.push_back(&x.w2);
    }
    const int E = int(m.experts.size());
    bool packed = mxfp4_experts && mxfp4_experts_shape_ok(c.hidden_size, c.moe_intermediate_size);
    for (const LinearWeight* x : w13) packed &= x->format == WeightFormat::Mxfp4;
    if (packed) {
      L.experts_mxfp4 = GpuMxfp4Experts::upload(m.experts, p + ".ffn.experts");
      g.bytes += L.experts_mxfp4.bytes();
    } else {
      L.experts_w13 = GpuLinear::upload(w13, E, p + ".ffn.experts.w1+w3");
      L.experts_w2 = GpuLinear::upload(w2, E, p + ".ffn.experts.w2");
    }
    L.shared_w13 = GpuLinear::upload({&m.shared.w1, &m.shared.w3}, 1, p + ".ffn.shared_experts.w1+w3");
    L.shared_w2 = GpuLinear::upload({&m.shared.w2}, 1, p + ".ffn.shared_experts.w2");
    for (const GpuLinear* x : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.index_wq_b, &L.index_weights_proj,
                               &L.gate, &L.experts_w13, &L.experts_w2, &L.shared_w13, &L.shared_w2})
      g.bytes += linear_bytes(*x);
    if (L.compressor) g.bytes += L.compressor->wkv_gate.bytes();
    if (L.index_compressor) g.bytes += L.index_compressor->wkv_gate.bytes();
    g.layers.push_back(std::move(L));
  }
  return g;
}

GpuWeights GpuWeights::random(const io::ModelConfig& c, WeightType lt, WeightType et, uint64_t seed,
                              cudaStream_t stream) {
  cuda::require_device();
  GpuWeights g;
  const int D = int(c.hidden_size), H = int(c.num_heads), hd = int(c.head_dim), hc = int(c.hc_mult);
  const int mix = int(c.hc_mix()), E = int(c.n_routed_experts), I = int(c.moe_intermediate_size);
  uint64_t s = seed;
  auto next = [&] { return ++s * 0x2545F4914F6CDD1Dull; };
  auto lin = [&](int out, int in, int count, WeightType t, const std::string& name, int group_rows = 0) {
    return GpuLinear::random(t, out, in, count, 1.0f / std::sqrt(float(in)), next(), stream, name, group_rows);
  };
  g.embed_bf16 = true;
  g.embed = cuda::DeviceBuffer(size_t(c.vocab_size) * D * 2, "embedding");
  MOESERVE_CUDA_CHECK(cuda::fill_uniform(g.embed.data(), size_t(c.vocab_size) * D, 1, 1.0f, next(), stream));
  g.head = lin(int(c.vocab_size), D, 1, WeightType::BF16, "head");
  g.norm = filled(size_t(D), 1.0f, stream, "norm");
  g.hc_head_fn = random_f32(size_t(hc) * hc * D, 1e-3f, next(), stream, "hc_head_fn");
  g.hc_head_base = random_f32(size_t(hc), 0.1f, next(), stream, "hc_head_base");
  g.hc_head_scale = filled(1, 1.0f, stream, "hc_head_scale");
  g.bytes = g.embed.bytes() + g.head.bytes();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const io::LayerSpec& spec = c.layers[size_t(l)];
    const std::string p = "layers." + std::to_string(l);
    GpuLayer L;
    L.attn_norm = filled(size_t(D), 1.0f, stream, p + ".attn_norm");
    L.ffn_norm = filled(size_t(D), 1.0f, stream, p + ".ffn_norm");
    L.hc_attn_fn = random_f32(size_t(mix) * hc * D, 1e-3f, next(), stream, p + ".hc_attn_fn");
    L.hc_attn_base = random_f32(size_t(mix), 0.1f, next(), stream, p + ".hc_attn_base");
    L.hc_attn_scale = filled(3, 1.0f, stream, p + ".hc_attn_scale");
    L.hc_ffn_fn = random_f32(size_t(mix) * hc * D, 1e-3f, next(), stream, p + ".hc_ffn_fn");
    L.hc_ffn_base = random_f32(size_t(mix), 0.1f, next(), stream, p + ".hc_ffn_base");
    L.hc_ffn_scale = filled(3, 1.0f, stream, p + ".hc_ffn_scale");
    L.wq_a = lin(int(c.q_lora_rank), D, 1, lt, p + ".wq_a");
    L.wq_b = lin(H * hd, int(c.q_lora_rank), 1, lt, p + ".wq_b");
    L.wkv = lin(hd, D, 1, lt, p + ".wkv");
    const int group_in = H * hd / int(c.o_groups);
    // As a quantized checkpoint stores it (FP8 with block scales, the linear type), read by the decode GEMV
    // without activation quantization (upload() above: the grouped projection's input stays unquantized).
    L.wo_a = lin(int(c.o_groups * c.o_lora_rank), group_in, 1, lt, p + ".wo_a", int(c.o_lora_rank));
    L.wo_a.act_quant = false;
    L.wo_b = lin(D, int(c.o_groups * c.o_lora_rank), 1, lt, p + ".wo_b");
    L.q_norm = filled(size_t(c.q_lora_rank), 1.0f, stream, p + ".q_norm");
    L.kv_norm = filled(size_t(hd), 1.0f, stream, p + ".kv_norm");
    L.sink = random_f32(size_t(H), 1.0f, next(), stream, p + ".sink");
    auto comp = [&](int ratio, int dim, bool overlap, const std::string& name) {
      GpuCompressor x;
      x.ratio = ratio;
      x.dim = dim;
      x.overlap = overlap;
      const int width = (overlap ? 2 : 1) * dim;
      x.wkv_gate = lin(2 * width, D, 1, WeightType::BF16, name + ".wkv+wgate");
      x.ape = random_f32(size_t(ratio) * width, 0.1f, next(), stream, name + ".ape");
      x.norm = filled(size_t(dim), 1.0f, stream, name + ".norm");
      return x;
    };
    if (spec.attention != io::AttentionKind::Sliding)
      L.compressor = comp(int(spec.compress_ratio), hd, spec.attention == io::AttentionKind::CSA, p + ".compressor");
    if (spec.attention == io::AttentionKind::CSA) {
      L.index_compressor = comp(int(spec.compress_ratio), int(c.index_head_dim), true, p + ".indexer.compressor");
      L.index_wq_b = lin(int(c.index_n_heads * c.index_head_dim), int(c.q_lora_rank), 1, lt, p + ".indexer.wq_b");
      L.index_weights_proj = lin(int(c.index_n_heads), D, 1, WeightType::BF16, p + ".indexer.weights_proj");
    }
    L.gate = lin(E, D, 1, WeightType::BF16, p + ".gate");
    if (spec.hash_moe) {
      std::vector<int> ids(size_t(c.vocab_size * c.experts_per_token));
      for (size_t t = 0; t < size_t(c.vocab_size); ++t)  // distinct experts per token
        for (size_t k = 0; k < size_t(c.experts_per_token); ++k) ids[t * c.experts_per_token + k] = int((t * 7 + k * 37) % size_t(E));
      L.tid2eid = DeviceArray<int>::from(std::span<const int>(ids), p + ".tid2eid");
      L.tid2eid_distinct = rows_distinct(ids, size_t(c.experts_per_token));
    } else {
      L.gate_bias = random_f32(size_t(E), 0.01f, next(), stream, p + ".gate.bias");
    }
    if (et == WeightType::MXFP4) {
      L.experts_mxfp4 = GpuMxfp4Experts::random(E, D, I, next(), stream, p + ".experts");
      g.bytes += L.experts_mxfp4.bytes();
    } else {
      L.experts_w13 = lin(2 * I, D, E, et, p + ".experts.w1+w3");
      L.experts_w2 = lin(D, I, E, et, p + ".experts.w2");
    }
    L.shared_w13 = lin(2 * I, D, 1, lt, p + ".shared.w1+w3");
    L.shared_w2 = lin(D, I, 1, lt, p + ".shared.w2");
    for (const GpuLinear* x : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.index_wq_b, &L.index_weights_proj,
                               &L.gate, &L.experts_w13, &L.experts_w2, &L.shared_w13, &L.shared_w2})
      g.bytes += x->bytes();
    if (L.compressor) g.bytes += L.compressor->wkv_gate.bytes();
    if (L.index_compressor) g.bytes += L.index_compressor->wkv_gate.bytes();
    g.layers.push_back(std::move(L));
  }
  MOESERVE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return g;
}

}  // namespace moeserve::model
#endif
