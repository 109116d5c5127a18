// DeepSeek-V4 attention for a batch of sequence chunks (reference, fp32):
//   q = rms_unweighted_per_head(wq_b(q_norm(wq_a(x)))), RoPE on the trailing dims;
//   kv = rope(kv_norm(wkv(x))) is both key and value (one shared head);
//   keys of a query at position t: the window (t-W, t] plus compressed entries i < (t+1)/ratio —
//   all of them in HCA layers, the lightning indexer's top-k in CSA layers;
//   softmax with a per-head sink in the denominator; the output's RoPE dims are de-rotated at t;
//   grouped low-rank output projection wo_a (per group of heads) then wo_b.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threads.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/quant.h"
#include "model/block.h"
#include "model/linear.h"

namespace moeserve::model {

namespace {

using kernels::cpu::RopeTable;

// Adds the position bias of each token's slot in its block (ape[pos % ratio]).
void add_ape(float* score, int64_t rows, const std::vector<int64_t>& positions, const Tensor& ape, int64_t ratio) {
  const int64_t width = ape.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* bias = ape.f32() + (positions[size_t(r)] % ratio) * width;
    for (int64_t f = 0; f < width; ++f) score[r * width + f] += bias[f];
  }
}

struct CompressorRings {
  cache::KvCache* cache;
  int64_t layer;
  bool indexer;  // the indexer's compressor ring instead of the main one
  float* kv(int32_t slot, int64_t pos) const {
    return indexer ? cache->index_state_kv(slot, layer, pos) : cache->state_kv(slot, layer, pos);
  }
  float* score(int32_t slot, int64_t pos) const {
    return indexer ? cache->index_state_score(slot, layer, pos) : cache->state_score(slot, layer, pos);
  }
};

// Entry i from the ring rows of its block (and, with overlap, the first half of the previous block's rows):
// softmax-pooled per feature, RMS-normed, RoPE'd at position i * ratio.
void compress_entry(const CompressorWeights& w, const CompressorRings& rings, int32_t slot, int64_t entry,
                    const RopeTable& rope, float eps, float* out) {
  const int64_t r = w.ratio, d = w.dim, width = (w.overlap ? 2 : 1) * d;
  const bool has_prev = w.overlap && entry > 0;
  const int64_t slots = (has_prev ? 2 : 1) * r;
  std::vector<float> kv(size_t(slots * d)), score(size_t(slots * d));
  int64_t s = 0;
  if (has_prev)
    for (int64_t p = (entry - 1) * r; p < entry * r; ++p, ++s) {  // previous block, first half ("Ca")
      std::copy_n(rings.kv(slot, p), d, kv.begin() + s * d);
      std::copy_n(rings.score(slot, p), d, score.begin() + s * d);
    }
  const int64_t half = w.overlap ? d : 0;  // current block: second half ("Cb") with overlap
  for (int64_t p = entry * r; p < (entry + 1) * r; ++p, ++s) {
    std::copy_n(rings.kv(slot, p) + half, d, kv.begin() + s * d);
    std::copy_n(rings.score(slot, p) + half, d, score.begin() + s * d);
  }
  (void)width;
  kernels::cpu::softmax_pool(kv.data(), score.data(), slots, d, out);
  kernels::cpu::rms_norm(out, 1, d, w.norm.f32(), eps);
  rope.apply(out, 1, d, entry * r);
}

}  // namespace

void attention_forward(const BlockContext& ctx, int64_t layer, const io::LayerSpec& spec, const AttentionWeights& w,
                       const float* x_ptr, float* out) {
  const io::ModelConfig& c = *ctx.config;
  const Numerics& num = ctx.numerics;
  const int64_t T = ctx.tokens, D = c.hidden_size, H = c.num_heads, hd = c.head_dim, nope = c.nope_dim();
  const float eps = float(c.rms_norm_eps);
  const RopeTable& rope = spec.attention == io::AttentionKind::Sliding ? *ctx.rope_main : *ctx.rope_compress;
  const auto& positions = *ctx.positions;
  cache::KvCache& cache = *ctx.cache;
  Tensor x = Tensor::borrow(DType::F32, {T, D}, const_cast<float*>(x_ptr), nullptr);

  // Queries.
  Tensor qr = linear(x, w.wq_a, num);
  kernels::cpu::rms_norm(qr.f32(), T, c.q_lora_rank, w.q_norm.f32(), eps);
  Tensor q = linear(qr, w.wq_b, num);  // [T, H*hd]
  kernels::cpu::rms_norm(q.f32(), T * H, hd, nullptr, eps);
  for (int64_t t = 0; t < T; ++t) rope.apply(q.f32() + t * H * hd, H, hd, positions[size_t(t)]);

  // The shared key/value.
  Tensor kv = linear(x, w.wkv, num);  // [T, hd]
  kernels::cpu::rms_norm(kv.f32(), T, hd, w.kv_norm.f32(), eps);
  for (int64_t t = 0; t < T; ++t) rope.apply(kv.f32() + t * hd, 1, hd, positions[size_t(t)]);
  if (num.kv_fp8) kernels::cpu::fp8_block_sim(kv.f32(), T, hd, nope, 64);

  // Compressor and indexer projections for every token; the rows go to each sequence's rings below.
  Tensor ckv, cscore, ikv, iscore, iq, iweights;
  const CompressorWeights* comp = w.compressor ? &*w.compressor : nullptr;
  const IndexerWeights* ix = w.indexer ? &*w.indexer : nullptr;
  if (comp) {
    ckv = linear(x, comp->wkv, num);
    cscore = linear(x, comp->wgate, num);
    add_ape(cscore.f32(), T, positions, comp->ape, comp->ratio);
  }
  if (ix) {
    ikv = linear(x, ix->compressor.wkv, num);
    iscore = linear(x, ix->compressor.wgate, num);
    add_ape(iscore.f32(), T, positions, ix->compressor.ape, ix->compressor.ratio);
    iq = linear(qr, ix->wq_b, num);  // [T, nH*id]
    const int64_t nH = c.index_n_heads, id = c.index_head_dim;
    for (int64_t t = 0; t < T; ++t) ctx.rope_compress->apply(iq.f32() + t * nH * id, nH, id, positions[size_t(t)]);
    if (num.indexer_fp4) {
      kernels::cpu::hadamard_rotate(iq.f32(), T * nH, id);
      kernels::cpu::fp4_block_sim(iq.f32(), T * nH, id, 32);
    }
    iweights = linear(x, ix->weights_proj, num);  // [T, nH]
    const float head_scale = 1.0f / std::sqrt(float(nH));
    for (int64_t i = 0; i < iweights.numel(); ++i) iweights.f32()[i] *= head_scale;
  }

  // Per sequence, in token order: write compressor rows, emit entries as blocks complete.
  for (const Segment& seg : *ctx.segments) {
    const int32_t slot = seg.seq->slot;
    for (int64_t i = 0; i < seg.count; ++i) {
      const int64_t t = seg.start_pos + i, row = seg.begin + i;
      if (comp) {
        const int64_t width = ckv.dim(1);
        CompressorRings rings{&cache, layer, false};
        std::copy_n(ckv.f32() + row * width, width, rings.kv(slot, t));
        std::copy_n(cscore.f32() + row * width, width, rings.score(slot, t));
        if ((t + 1) % comp->ratio == 0) {
          float* entry = cache.compressed_entry(*seg.seq, layer, t / comp->ratio);
          compress_entry(*comp, rings, slot, t / comp->ratio, *ctx.rope_compress, eps, entry);
          if (num.kv_fp8) kernels::cpu::fp8_block_sim(entry, 1, hd, nope, 64);
        }
      }
      if (ix) {
        const int64_t width = ikv.dim(1), id = c.index_head_dim;
        CompressorRings rings{&cache, layer, true};
        std::copy_n(ikv.f32() + row * width, width, rings.kv(slot, t));
        std::copy_n(iscore.f32() + row * width, width, rings.score(slot, t));
        if ((t + 1) % ix->compressor.ratio == 0) {
          float* key = cache.index_key(*seg.seq, layer, t / ix->compressor.ratio);
          compress_entry(ix->compressor, rings, slot, t / ix->compressor.ratio, *ctx.rope_compress, eps, key);
          if (num.indexer_fp4) {
            kernels::cpu::hadamard_rotate(key, 1, id);
            kernels::cpu::fp4_block_sim(key, 1, id, 32);
          }
        }
      }
    }
  }

  // Attention, one query at a time (parallel over all tokens of the batch).
  std::vector<int64_t> segment_of(static_cast<size_t>(T));
  for (size_t s = 0; s < ctx.segments->size(); ++s)
    for (int64_t i = 0; i < (*ctx.segments)[s].count; ++i) segment_of[size_t((*ctx.segments)[s].begin + i)] = int64_t(s);
  Tensor o = Tensor::empty(DType::F32, {T, H * hd});
  const float scale = 1.0f / std::sqrt(float(hd));
  parallel_for(T, 1, [&](int64_t b, int64_t e) {
    std::vector<const float*> keys;
    std::vector<float> scores;
    for (int64_t row = b; row < e; ++row) {
      const Segment& seg = (*ctx.segments)[size_t(segment_of[size_t(row)])];
      const int64_t t = positions[size_t(row)];
      keys.clear();
      for (int64_t p = std::max<int64_t>(0, t - c.sliding_window + 1); p <= t; ++p)
        keys.push_back(p < seg.start_pos ? cache.window_entry(seg.seq->slot, layer, p)
                                         : kv.f32() + (seg.begin + p - seg.start_pos) * hd);
      if (comp) {
        const int64_t valid = (t + 1) / comp->ratio;
        if (!ix) {
          for (int64_t i = 0; i < valid; ++i) keys.push_back(cache.compressed_entry(*seg.seq, layer, i));
        } else if (valid > 0) {
          const int64_t id = c.index_head_dim;
          std::vector<float> index_keys(size_t(valid * id));
          for (int64_t i = 0; i < valid; ++i) std::copy_n(cache.index_key(*seg.seq, layer, i), id, index_keys.begin() + i * id);
          scores.resize(static_cast<size_t>(valid));
          kernels::cpu::indexer_scores(iq.f32() + row * c.index_n_heads * id, iweights.f32() + row * c.index_n_heads,
                                       c.index_n_heads, id, index_keys.data(), valid, 1.0f / std::sqrt(float(id)),
                                       scores.data());
          for (int32_t i : kernels::cpu::top_k(scores.data(), valid, c.index_topk))
            keys.push_back(cache.compressed_entry(*seg.seq, layer, i));
        }
      }
      float* orow = o.f32() + row * H * hd;
      kernels::cpu::sink_attention(q.f32() + row * H * hd, H, hd, keys.data(), int64_t(keys.size()), w.sink.f32(),
                                   scale, orow);
      rope.apply(orow, H, hd, t, /*inverse=*/true);
    }
  });

  // The window ring keeps the last tokens of each sequence.
  const int64_t capacity = cache.layout().window_capacity;
  for (const Segment& seg : *ctx.segments)
    for (int64_t i = std::max<int64_t>(0, seg.count - capacity); i < seg.count; ++i)
      std::copy_n(kv.f32() + (seg.begin + i) * hd, hd, cache.window_entry(seg.seq->slot, layer, seg.start_pos + i));

  // Grouped output projection: group g of heads through rows [g*o_lora, (g+1)*o_lora) of wo_a.
  const int64_t G = c.o_groups, group_in = H * hd / G, olora = c.o_lora_rank;
  Tensor grouped = Tensor::empty(DType::F32, {T, G * olora});
  std::vector<float> xg(size_t(T * group_in)), yg(size_t(T * olora));
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < T; ++t) std::copy_n(o.f32() + t * H * hd + g * group_in, group_in, xg.begin() + t * group_in);
    kernels::cpu::matmul_nt(xg.data(), T, group_in, w.wo_a.f32.f32() + g * olora * group_in, olora, yg.data());
    for (int64_t t = 0; t < T; ++t) std::copy_n(yg.begin() + t * olora, olora, grouped.f32() + t * G * olora + g * olora);
  }
  linear_into(grouped.f32(), T, w.wo_b, num, out);
}

}  // namespace moeserve::model
