#include "model/model.h"

#include <algorithm>
#include <filesystem>

#include "kernels/cpu/hyper_connection.h"
#include "kernels/cpu/norm.h"
#include "model/block.h"
#include "model/linear.h"

namespace moeserve::model {

std::shared_ptr<Model> Model::load(const std::string& dir, const LoadOptions& options) {
  namespace fs = std::filesystem;
  check(fs::is_directory(dir), "--model {}: not a directory", dir);
  io::ModelConfig config = io::load_model_config((fs::path(dir) / "config.json").string());
  TensorSource source(io::Checkpoint::open_dir(dir));
  ModelWeights weights = load_weights(config, source, options);
  return std::make_shared<Model>(std::move(config), std::move(weights));
}

Model::Model(io::ModelConfig config, ModelWeights weights)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      rope_main_(config_.rope_main, config_.rope_dim),
      rope_compress_(config_.rope_compress, config_.rope_dim) {}

cache::KvLayout Model::kv_layout(int64_t speculative_tokens) const {
  // The MTP layer's window ring exists only when it drafts (speculative decoding on).
  int64_t mtp = speculative_tokens > 0 ? int64_t(weights_.mtp.size()) : 0;
  return cache::KvLayout::from_config(config_, mtp, speculative_tokens);
}

Tensor Model::logits_from_hidden(const float* h, int64_t rows, const HcHeadWeights& hc_head, const Tensor& norm,
                                 const Numerics& numerics) const {
  const int64_t D = config_.hidden_size;
  Tensor x = Tensor::empty(DType::F32, {rows, D});
  kernels::cpu::hc_head(hc_head.fn.f32(), hc_head.base.f32(), hc_head.scale.f32(), config_.hc_mult, D,
                        float(config_.hc_eps), float(config_.rms_norm_eps), h, rows, x.f32());
  kernels::cpu::rms_norm(x.f32(), rows, D, norm.f32(), float(config_.rms_norm_eps));
  return linear(x, weights_.head, numerics);
}

ForwardResult Model::forward(cache::KvCache& cache, const std::vector<ForwardRequest>& requests,
                             const Numerics& numerics) const {
  const io::ModelConfig& c = config_;
  const int64_t D = c.hidden_size, hc = c.hc_mult;
  BatchLayout batch;
  for (const ForwardRequest& r : requests) {
    check(r.seq && r.seq->open(), "forward: request without an open sequence");
    check(!r.tokens.empty(), "forward: empty chunk");
    check(cache.pages_for(r.seq->length + int64_t(r.tokens.size())) <= int64_t(r.seq->pages.size()),
          "forward: sequence has {} pages, its chunk needs {}", r.seq->pages.size(),
          cache.pages_for(r.seq->length + int64_t(r.tokens.size())));
    batch.add(r.seq, r.seq->length, r.tokens, c.vocab_size);
  }
  const int64_t T = batch.tokens;
  const auto& ids = batch.ids;
  const auto& segments = batch.segments;

  // Embedding, copied into every hc stream.
  Tensor h = Tensor::empty(DType::F32, {T, hc, D});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < hc; ++j)
      std::copy_n(weights_.embed.f32() + int64_t(ids[size_t(t)]) * D, D, h.f32() + (t * hc + j) * D);

  BlockContext ctx = block_context(c, rope_main_, rope_compress_, numerics, cache, batch);
  ctx.routing = routing_;
  for (int64_t l = 0; l < c.num_layers; ++l) run_block(ctx, l, c.layers[size_t(l)], weights_.layers[size_t(l)], h.f32());

  // Rows that need logits (and, for MTP drafting, their final hc streams).
  ForwardResult result;
  std::vector<int64_t> rows;
  bool keep_hidden = false;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Segment& s = segments[i];
    result.first_row.push_back(int64_t(rows.size()));
    int64_t first = requests[i].all_logits ? 0 : s.count - 1;
    for (int64_t k = first; k < s.count; ++k) rows.push_back(s.begin + k);
    result.row_count.push_back(s.count - first);
    keep_hidden |= requests[i].keep_hidden;
  }
  const int64_t R = int64_t(rows.size());
  Tensor selected = Tensor::empty(DType::F32, {R, hc, D});
  for (int64_t r = 0; r < R; ++r) std::copy_n(h.f32() + rows[size_t(r)] * hc * D, hc * D, selected.f32() + r * hc * D);
  result.logits = logits_from_hidden(selected.f32(), R, weights_.hc_head, weights_.norm, numerics);
  if (keep_hidden) result.hidden = selected;
  return result;
}

}  // namespace moeserve::model
