#include "model/block.h"

#include <vector>

#include "kernels/cpu/hyper_connection.h"
#include "kernels/cpu/norm.h"

namespace moeserve::model {

namespace {
kernels::cpu::HyperConnectionParams hc_params(const io::ModelConfig& c, const HcWeights& w) {
  kernels::cpu::HyperConnectionParams p;
  p.fn = w.fn.f32();
  p.base = w.base.f32();
  p.scale = w.scale.f32();
  p.hc = c.hc_mult;
  p.dim = c.hidden_size;
  p.sinkhorn_iters = c.hc_sinkhorn_iters;
  p.hc_eps = float(c.hc_eps);
  p.norm_eps = float(c.rms_norm_eps);
  return p;
}
}  // namespace

void BatchLayout::add(cache::SequenceKv* seq, int64_t start_pos, std::span<const int32_t> chunk, int64_t vocab) {
  segments.push_back({seq, tokens, int64_t(chunk.size()), start_pos});
  for (size_t i = 0; i < chunk.size(); ++i) {
    check(chunk[i] >= 0 && chunk[i] < vocab, "token id {} is outside the vocabulary [0, {})", chunk[i], vocab);
    ids.push_back(chunk[i]);
    positions.push_back(start_pos + int64_t(i));
  }
  tokens += int64_t(chunk.size());
}

BlockContext block_context(const io::ModelConfig& config, const kernels::cpu::RopeTable& rope_main,
                           const kernels::cpu::RopeTable& rope_compress, const Numerics& numerics,
                           cache::KvCache& cache, const BatchLayout& batch) {
  BlockContext ctx;
  ctx.config = &config;
  ctx.rope_main = &rope_main;
  ctx.rope_compress = &rope_compress;
  ctx.numerics = numerics;
  ctx.cache = &cache;
  ctx.segments = &batch.segments;
  ctx.positions = &batch.positions;
  ctx.token_ids = &batch.ids;
  ctx.tokens = batch.tokens;
  return ctx;
}

void run_block(const BlockContext& ctx, int64_t layer, const io::LayerSpec& spec, const BlockWeights& w, float* h) {
  const io::ModelConfig& c = *ctx.config;
  const int64_t T = ctx.tokens, D = c.hidden_size, hc = c.hc_mult;
  std::vector<float> collapsed(size_t(T * D)), post(size_t(T * hc)), comb(size_t(T * hc * hc)), out(size_t(T * D));
  const float eps = float(c.rms_norm_eps);

  auto attn_hc = hc_params(c, w.hc_attn);
  kernels::cpu::hc_pre(attn_hc, h, T, collapsed.data(), post.data(), comb.data());
  kernels::cpu::rms_norm(collapsed.data(), T, D, w.attn_norm.f32(), eps);
  attention_forward(ctx, layer, spec, w.attn, collapsed.data(), out.data());
  kernels::cpu::hc_post(attn_hc, h, T, out.data(), post.data(), comb.data());

  auto ffn_hc = hc_params(c, w.hc_ffn);
  kernels::cpu::hc_pre(ffn_hc, h, T, collapsed.data(), post.data(), comb.data());
  kernels::cpu::rms_norm(collapsed.data(), T, D, w.ffn_norm.f32(), eps);
  moe_forward(ctx, layer, spec, w.ffn, collapsed.data(), out.data());
  kernels::cpu::hc_post(ffn_hc, h, T, out.data(), post.data(), comb.data());
}

}  // namespace moeserve::model
