// GpuModel's attention sublayer: queries, KV and compressors, the indexer, sparse attention, the output projection.
#if MOESERVE_WITH_CUDA
#include "model/gpu_model.h"

#include <algorithm>
#include <cmath>

#include "core/env.h"
#include "kernels/cuda/device.h"
#include "model/gpu_model_internal.h"

namespace moeserve::model {

namespace {

using cuda::WeightType;

constexpr int kKeyImageMinT = 64;  // steps from this many tokens may convert the attention's keys once (attention())

float rope_scale_of(const io::RopeSpec& spec) { return spec.yarn ? float(spec.attention_factor) : 1.0f; }

}  // namespace

void GpuModel::attention(GpuKvCache& cache, const Plan& p, int l, const float* x, float* out) {
  const io::ModelConfig& c = config_;
  const GpuLayer& L = weights_.layers[size_t(l)];
  const io::LayerSpec& spec = c.layers[size_t(l)];
  const cuda::BatchDesc b = batch_desc(p);
  const int T = p.T, D = int(c.hidden_size), H = int(c.num_heads), hd = int(c.head_dim), rd = int(c.rope_dim);
  const int ql = int(c.q_lora_rank), nope = hd - rd;
  const float eps = float(c.rms_norm_eps);
  const bool sliding = spec.attention == io::AttentionKind::Sliding;
  const float* inv = sliding ? inv_freq_main_.data() : inv_freq_compress_.data();
  const float rscale = rope_scale_of(c.rope_for(spec));
  const float cscale = rope_scale_of(c.rope_compress);
  const Numerics& num = options_.numerics;
  const cuda::KvLayerView v = cache.view(l);
  const GpuCompressor* comp = L.compressor ? &*L.compressor : nullptr;
  const GpuCompressor* icomp = L.index_compressor ? &*L.index_compressor : nullptr;
  const int nH = int(c.index_n_heads), id = int(c.index_head_dim);
  // Branches of a decode-sized step. With an indexer: side 0 the kv head and the attention's compressor, side 1
  // the indexer's compressor, side 3 its head weights, side 2 the query, and the main stream (high priority) keeps
  // the indexer's query path to the attention kernel. Without one: the query (wq_a, q_norm and the wide wq_b) on
  // side 2, and the kv head's chain of one-block kernels on the main stream, where the query's thousands of
  // low-priority blocks do not hold the SMs it waits for.
  const bool par = branches(T);
  const bool kv_main = par && !icomp;
  auto query = [&] {  // wq_a, q_norm, wq_b and the rope (with an indexer: wq_b and the rope on side 2)
    linear(L.wq_a.view(), x, T, D, qr_, ql, true);
    MOESERVE_CUDA_CHECK(cuda::rms_norm(qr_, T, ql, ql, L.q_norm.data(), eps, qr_, ql, cur()));
    if (par && icomp) fork(2);
    linear(L.wq_b.view(), qr_, T, ql, q_, H * hd, true);
    MOESERVE_CUDA_CHECK(cuda::rope(q_, T, H, hd, H * hd, rd, b.tok_pos, inv, rscale, false, eps, cur()));
  };
  if (kv_main) {
    fork(2);
    query();
    to_main();
  } else if (par) {
    fork(0);
  }
  linear(L.wkv.view(), x, T, D, kv_, hd, true);
  // kv_norm (weighted RMSNorm of the one kv head) and the FP8 storage simulation of its non-rope dims fused
  // into the rope kernel (which holds rows of up to 512 values).
  const bool kv_fp8_fused = num.kv_fp8 && hd <= 512;
  MOESERVE_CUDA_CHECK(cuda::rope(kv_, T, 1, hd, hd, rd, b.tok_pos, inv, rscale, false, eps, cur(), L.kv_norm.data(),
                                 kv_fp8_fused ? 64 : 0));
  if (num.kv_fp8 && !kv_fp8_fused) MOESERVE_CUDA_CHECK(cuda::fp8_block_sim(kv_, T, hd, nope, 64, cur()));
  cuda::CompressorArgs ca, ia;
  if (comp) {
    const int width = (comp->overlap ? 2 : 1) * comp->dim;
    linear(comp->wkv_gate.view(), x, T, D, ckv_, 2 * width, true, /*fp32_input=*/true);
    MOESERVE_CUDA_CHECK(cuda::add_ape(ckv_ + width, T, width, 2 * width, b.tok_pos, comp->ape.data(), comp->ratio, cur()));
    ca.kv = ckv_;
    ca.score = ckv_ + width;
    ca.ld = 2 * width;
    ca.state = v.state;
    ca.rows = v.state_rows;
    ca.width = v.state_width;
    ca.ratio = comp->ratio;
    ca.dim = comp->dim;
    ca.overlap = comp->overlap;
    ca.norm_w = comp->norm.data();
    ca.eps = eps;
    ca.inv_freq = inv_freq_compress_.data();
    ca.rope_dim = rd;
    ca.rope_scale = cscale;
    ca.post = num.kv_fp8 ? 1 : 0;
    ca.nope = nope;
    ca.pool = v.compressed;
    ca.epp = v.epp;
    MOESERVE_CUDA_CHECK(cuda::compressor_emit(b, ca, cur()));
    MOESERVE_CUDA_CHECK(cuda::compressor_store(b, ca, cur()));
  }
  if (icomp) {
    if (par) fork(1);
    const int width = 2 * icomp->dim;
    linear(icomp->wkv_gate.view(), x, T, D, ikv_, 2 * width, true, /*fp32_input=*/true);
    MOESERVE_CUDA_CHECK(cuda::add_ape(ikv_ + width, T, width, 2 * width, b.tok_pos, icomp->ape.data(), icomp->ratio, cur()));
    ia = ca;
    ia.kv = ikv_;
    ia.score = ikv_ + width;
    ia.ld = 2 * width;
    ia.state = v.index_state;
    ia.rows = v.state_rows;
    ia.width = v.index_width;
    ia.ratio = icomp->ratio;
    ia.dim = icomp->dim;
    ia.overlap = true;
    ia.norm_w = icomp->norm.data();
    ia.post = num.indexer_fp4 ? 2 : 0;
    ia.pool = v.index_keys;
    MOESERVE_CUDA_CHECK(cuda::compressor_emit(b, ia, cur()));
    MOESERVE_CUDA_CHECK(cuda::compressor_store(b, ia, cur()));
    if (par) fork(3);
    linear(L.index_weights_proj.view(), x, T, D, iw_, nH, true, /*fp32_input=*/true);
    MOESERVE_CUDA_CHECK(cuda::scale_values(iw_, size_t(T) * nH, 1.0f / std::sqrt(float(nH)), cur()));
  }
  to_main();
  if (!kv_main) {
    query();
    to_main();
  }
  if (icomp) {
    linear(L.index_wq_b.view(), qr_, T, ql, iq_, nH * id, true);
    if (num.indexer_fp4 && id == 128) {  // rope, Hadamard and FP4 in one launch
      MOESERVE_CUDA_CHECK(cuda::rope_hadamard(iq_, T, nH, id, nH * id, rd, b.tok_pos, inv_freq_compress_.data(), cscale,
                                              true, cur()));
    } else {
      MOESERVE_CUDA_CHECK(cuda::rope(iq_, T, nH, id, nH * id, rd, b.tok_pos, inv_freq_compress_.data(), cscale, false, 0.0f, cur()));
      if (num.indexer_fp4) MOESERVE_CUDA_CHECK(cuda::hadamard_fp4_sim(iq_, T * nH, id, true, cur()));
    }
    if (par) {
      join(1);
      join(3);
    }
  }
  const cudaStream_t st = stream();

  int max_keys = int(c.sliding_window);
  if (comp) {
    const int entries = (p.max_pos + 1) / comp->ratio;
    max_keys += icomp ? std::min<int>(int(c.index_topk), entries) : entries;
  }
  if (icomp) {
    const int nc = std::max(1, (p.max_pos + 1) / icomp->ratio);
    // FP4-simulated queries and keys are exact in bf16: tensor cores from idx_bf16_min_t_ tokens on.
    if (num.indexer_fp4 && T >= idx_bf16_min_t_ && cuda::indexer_scores_bf16_fits(nH, id))
      MOESERVE_CUDA_CHECK(cuda::indexer_scores_bf16(b, iq_, iw_, nH, id, v.index_keys, v.epp, icomp->ratio,
                                                    1.0f / std::sqrt(float(id)), nc, iscores_, nc, st));
    else
      MOESERVE_CUDA_CHECK(cuda::indexer_scores(b, iq_, iw_, nH, id, v.index_keys, v.epp, icomp->ratio,
                                               1.0f / std::sqrt(float(id)), nc, iscores_, nc, st));
    MOESERVE_CUDA_CHECK(cuda::indexer_topk(b, iscores_, nc, icomp->ratio, int(c.index_topk), topk_, st));
  }
  if (par) {
    if (!kv_main) join(0);
    join(2);  // the query: on side 2 in both arrangements
  }
  cuda::AttentionArgs aa;
  aa.q = q_;
  aa.kv = kv_;
  aa.view = v;
  aa.H = H;
  aa.hd = hd;
  aa.window = int(c.sliding_window);
  aa.ratio = comp ? comp->ratio : 0;
  aa.topk = icomp ? topk_ : nullptr;
  aa.k = int(c.index_topk);
  aa.max_keys = max_keys;
  aa.sinks = L.sink.data();
  aa.scale = 1.0f / std::sqrt(float(hd));
  aa.inv_freq = inv;
  aa.rope_dim = rd;
  aa.rope_scale = rscale;
  aa.o = o_;
  aa.partial = attn_partial_;
  aa.splits = std::min(attn_splits_max_, cuda::attention_splits(T, H, max_keys));
  aa.arrivals = attn_arrivals_.size() ? attn_arrivals_.data() : nullptr;
  aa.arrival_slots = int(attn_arrivals_.size());
  aa.keys_bf16_nope = num.kv_fp8;
  // Prefill-sized steps convert the keys for the tensor-core kernel once into a key image, where that is at most an
  // eighth of the rows the blocks would convert (each of its keys per token and 32 heads) and takes at most 64 MB.
  // MOESERVE_ATTN_KEY_IMAGE=0: never (for A/B runs).
  static const bool key_image_on = !env_is("MOESERVE_ATTN_KEY_IMAGE", "0");
  const int image_comp = comp ? (p.max_pos + 1) / comp->ratio : 0;
  const size_t image_rows = cuda::attention_key_image_rows(T, p.S, aa.window, image_comp);
  const size_t image_bytes = cuda::attention_key_image_elems(T, p.S, aa.window, image_comp) * 2;
  if (key_image_on && num.kv_fp8 && T >= kKeyImageMinT && image_bytes <= (size_t(64) << 20) &&
      8 * image_rows <= size_t(T) * size_t(std::max(1, H / 32)) * size_t(max_keys)) {
    aa.key_image = static_cast<uint16_t*>(bufs_[110].get(image_bytes, &generation_));
    aa.image_comp = image_comp;
  }
  MOESERVE_CUDA_CHECK(cuda::sparse_attention(b, aa, st));
  // The window ring only has to hold this step's kv before the layer's next step: its store runs beside the
  // output projection (after the attention kernels, whose reads it would overwrite).
  if (par) fork(0);
  MOESERVE_CUDA_CHECK(cuda::window_store(b, v, kv_, cur()));
  to_main();

  // Grouped low-rank output projection, then wo_b.
  const int G = int(c.o_groups), olora = int(c.o_lora_rank), group_in = H * hd / G;
  const GemmView wa = L.wo_a.view();
  if (!options_.exact && skinny_wo_a_ && T >= 2 && wa.type == WeightType::FP8 && wa.blk_scale &&
      cuda::gemm_bf16_fp8w_skinny_fits(T, olora, group_in)) {
    // 2..64 rows: BF16 tensor cores, the FP8 weight converted in registers (exact in bf16; bench_gpu_ops linear:
    // 8 rows 82 -> ~11 us against the GEMV). The reference engine multiplies the fp32 attention output (the
    // official model's einsum has it in bf16), so the input goes in as bf16 terms, as in linear(): one rounding
    // moved a test model's logits ~10x further from the CPU (docs/benchmarks/cuda-ops.md, tenth session). Three
    // terms cost the V4-Flash layer ~0 at batch 8 and ~1.5% at 32 (one launch up to 42 rows).
    skinny_bf16_fp8w(wa, o_, T, H * hd, G, olora, group_in, bf16_terms_, grouped_, G * olora, 105);
  } else if (options_.exact || T <= kSkinnyRows) {
    cuda::GemvArgs a = cuda::gemv_args_on_slices(G, olora, group_in, o_, grouped_, T);  // H * hd = G * group_in
    set_weights(a, wa, olora, group_in);  // group g: rows [g*olora, (g+1)*olora) of wo_a
    MOESERVE_CUDA_CHECK(cuda::gemv(a, st));
  } else {
    // The reference's grouped projection is an einsum on the dequantized weight with an unquantized input
    // (docs/numerics.md), so an FP8 wo_a is dequantized for the BF16 GEMM (exact for its E8M0 scales) instead
    // of taking the FP8 path, which would quantize the input; the input goes in as bf16 terms, as above.
    GemmView w = wa;
    if (w.type == WeightType::FP8) {
      auto* bf16 = static_cast<uint16_t*>(bufs_[104].get(size_t(w.N) * w.K * 2, &generation_));
      cuda::GemvArgs s;  // the scales as the GEMVs would read them (one problem: the whole matrix)
      set_weights(s, w, w.N, w.K);
      MOESERVE_CUDA_CHECK(cuda::fp8_weights_to_bf16(static_cast<const uint8_t*>(w.w), s.row_scale, w.N, w.K,
                                                    s.scale_ld, bf16, st, s.scale_row_shift));
      w = GemmView{};
      w.w = bf16;
      w.N = L.wo_a.out;
      w.K = L.wo_a.in;
    }
    for (int g = 0; g < G; ++g) {
      GemmView wg = w;
      wg.w = static_cast<const uint16_t*>(w.w) + size_t(g) * olora * w.K;
      wg.N = olora;
      linear(wg, o_ + size_t(g) * group_in, T, H * hd, grouped_ + size_t(g) * olora, G * olora, false,
             /*fp32_input=*/true);
    }
  }
  linear(L.wo_b.view(), grouped_, T, G * olora, out, D, true);
  if (par) join(0);
}

}  // namespace moeserve::model
#endif
