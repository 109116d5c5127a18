#pragma once
// A loaded DeepSeek-V4 model and its forward over a batch of sequence chunks on the CPU reference path.
// The caller owns the KV cache and the sequences: it reserves pages for the chunk, calls forward, then
// commits (seq.length += accepted tokens). Nothing of a chunk is visible to later steps until committed.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "io/model_config.h"
#include "kernels/cpu/rope.h"
#include "model/numerics.h"
#include "model/routing_histogram.h"
#include "model/weights.h"

namespace moeserve::model {

// How to draw a request's next token from its last row on a backend that samples on the device
// (engine::SamplingParams and the request's uniform draw u; temperature <= 0: greedy).
struct RowSampling {
  float temperature = 0.0f, top_p = 1.0f;
  int64_t top_k = 0;
  double u = 0.0;
};

struct ForwardRequest {
  cache::SequenceKv* seq = nullptr;
  std::span<const int32_t> tokens;  // at positions seq->length, seq->length + 1, ...
  bool all_logits = false;          // logits for every token (else only the last)
  bool keep_hidden = false;         // keep the final hc streams of the logit rows (for MTP drafting)
  bool sample = false;              // draw the next token on the device with `sampling` (see ForwardResult)
  RowSampling sampling;
};

// One sequence's chunk for the MTP layer: at positions start_pos.., the main model's final hc streams h
// [n, hc, D] at those positions and the NEXT tokens (token at position + 1). Predicts the token at position + 2.
struct MtpRequest {
  cache::SequenceKv* seq = nullptr;
  int64_t start_pos = 0;
  std::span<const int32_t> next_tokens;
  const float* h = nullptr;  // [n, hc, D]
};

struct ForwardResult {
  Tensor logits;                     // [rows, vocab] fp32
  std::vector<int64_t> first_row;    // per request: its first row in `logits`
  std::vector<int64_t> row_count;    // per request: rows it got
  Tensor hidden;                     // [rows, hc, D] when any request asked for keep_hidden
  // When a request asked to `sample` on a backend that samples on the device: per request its token (-1 where
  // it did not ask), and no logits rows.
  std::vector<int32_t> tokens;
};

class Model {
 public:
  // config.json + safetensors (any naming dialect) from a model directory.
  static std::shared_ptr<Model> load(const std::string& dir, const LoadOptions& options = {});
  Model(io::ModelConfig config, ModelWeights weights);

  const io::ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  bool has_mtp() const { return !weights_.mtp.empty(); }

  // The KV layout this model needs (speculative_tokens: verify headroom).
  cache::KvLayout kv_layout(int64_t speculative_tokens = 0) const;

  ForwardResult forward(cache::KvCache& cache, const std::vector<ForwardRequest>& requests,
                        const Numerics& numerics) const;

  // The MTP layer (mtp.0) over a batch of chunks: logits for every row and the block's output hc streams
  // (the `h` of a chained draft step). Its window KV lives in the cache layer after the main layers.
  ForwardResult mtp_forward(cache::KvCache& cache, const std::vector<MtpRequest>& requests,
                            const Numerics& numerics) const;

  // Final norm + head for rows of collapsed hidden states [rows, D] (shared by the main model and MTP).
  Tensor logits_from_hidden(const float* hidden_streams, int64_t rows, const HcHeadWeights& hc_head,
                            const Tensor& norm, const Numerics& numerics) const;

  const kernels::cpu::RopeTable& rope_main() const { return rope_main_; }
  const kernels::cpu::RopeTable& rope_compress() const { return rope_compress_; }

  // Every later forward (not the MTP layer's) adds its MoE layers' chosen experts to `h` (null: stop).
  void record_routing(RoutingHistogram* h) { routing_ = h; }

 private:
  io::ModelConfig config_;
  ModelWeights weights_;
  kernels::cpu::RopeTable rope_main_, rope_compress_;
  RoutingHistogram* routing_ = nullptr;
};

}  // namespace moeserve::model
