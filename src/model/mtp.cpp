// The MTP layer (official MTPBlock semantics): x = e_proj(enorm(embed(next_token))) broadcast over the hc
// streams + h_proj(hnorm(h_main)) per stream; a window-only V4 block with its own MoE; logits =
// head(mtp.norm(mtp.hc_head(x))) with the shared head.
#include <algorithm>

#include "kernels/cpu/norm.h"
#include "model/block.h"
#include "model/linear.h"
#include "model/model.h"

namespace moeserve::model {

ForwardResult Model::mtp_forward(cache::KvCache& cache, const std::vector<MtpRequest>& requests,
                                 const Numerics& numerics) const {
  check(has_mtp(), "this checkpoint has no MTP weights (mtp.0.*)");
  const MtpWeights& w = weights_.mtp[0];
  const io::ModelConfig& c = config_;
  const int64_t D = c.hidden_size, hc = c.hc_mult;
  const int64_t layer = c.num_layers;  // the MTP layer's cache index
  check(int64_t(cache.layout().layers.size()) > layer, "the KV cache has no MTP layer (speculative decoding off?)");
  BatchLayout batch;
  for (const MtpRequest& r : requests) {
    check(r.seq && r.seq->open() && !r.next_tokens.empty() && r.h, "mtp_forward: incomplete request");
    batch.add(r.seq, r.start_pos, r.next_tokens, c.vocab_size);
  }
  const int64_t T = batch.tokens;
  const auto& ids = batch.ids;
  const float eps = float(c.rms_norm_eps);

  Tensor e = Tensor::empty(DType::F32, {T, D});
  for (int64_t t = 0; t < T; ++t) std::copy_n(weights_.embed.f32() + int64_t(ids[size_t(t)]) * D, D, e.f32() + t * D);
  kernels::cpu::rms_norm(e.f32(), T, D, w.enorm.f32(), eps);
  Tensor ep = linear(e, w.e_proj, numerics);  // [T, D]

  Tensor hn = Tensor::empty(DType::F32, {T * hc, D});
  int64_t row = 0;
  for (const MtpRequest& r : requests) {
    const int64_t n = int64_t(r.next_tokens.size());
    std::copy_n(r.h, n * hc * D, hn.f32() + row * hc * D);
    row += n;
  }
  kernels::cpu::rms_norm(hn.f32(), T * hc, D, w.hnorm.f32(), eps);
  Tensor x = linear(hn, w.h_proj, numerics);  // [T*hc, D]
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < hc; ++j)
      for (int64_t d = 0; d < D; ++d) x.f32()[(t * hc + j) * D + d] += ep.f32()[t * D + d];

  run_block(block_context(c, rope_main_, rope_compress_, numerics, cache, batch), layer, mtp_layer_spec(), w.block,
            x.f32());

  ForwardResult result;
  row = 0;
  for (const MtpRequest& r : requests) {
    result.first_row.push_back(row);
    result.row_count.push_back(int64_t(r.next_tokens.size()));
    row += int64_t(r.next_tokens.size());
  }
  result.logits = logits_from_hidden(x.f32(), T, w.hc_head, w.norm, numerics);
  result.hidden = x.reshape({T, hc, D});
  return result;
}

}  // namespace moeserve::model
