#include "planner/weights.h"

namespace moeserve::planner {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

LocalShape local_shape(const TensorSpec& t, const Layout& l) {
  LocalShape s{t.rows, t.cols, t.count};
  const ParallelSpec& p = l.spec;
  switch (t.shard) {
    case Shard::Replicated: break;
    case Shard::HeadRows: s.rows = t.rows / p.attn_tp; break;
    case Shard::HeadCols: s.cols = t.cols / p.attn_tp; break;
    case Shard::ExpertRows:
      s.count = l.experts_per_rank;
      s.rows = t.rows / p.moe_tp;
      break;
    case Shard::ExpertCols:
      s.count = l.experts_per_rank;
      s.cols = t.cols / p.moe_tp;
      break;
    case Shard::SharedRows: s.rows = t.rows / p.moe_tp; break;
    case Shard::SharedCols: s.cols = t.cols / p.moe_tp; break;
    case Shard::VocabRows: s.rows = t.rows / p.vocab_parallel; break;
  }
  return s;
}

int64_t tensor_bytes(const TensorSpec& t, const Layout& l, WeightFormat format) {
  LocalShape s = local_shape(t, l);
  const int64_t n = s.rows * s.cols;
  const int64_t fp8 = n + ceil_div(s.rows, 128) * ceil_div(s.cols, 128);
  int64_t one = 0;
  switch (t.storage) {
    case Storage::BF16: one = 2 * n; break;
    case Storage::F32:
    case Storage::I32: one = 4 * n; break;
    case Storage::DenseLinear: one = format == WeightFormat::BF16 ? 2 * n : fp8; break;
    case Storage::ExpertLinear:
      one = format == WeightFormat::BF16 ? 2 * n
            : format == WeightFormat::FP8 ? fp8
                                          : ceil_div(n, 2) + s.rows * ceil_div(s.cols, 32);
      break;
  }
  return one * s.count;
}

WeightBreakdown stage_weights(const io::ModelConfig& c, const Layout& l, const StageMap& stage, WeightFormat format) {
  WeightBreakdown w;
  auto add = [&](const std::vector<TensorSpec>& tensors) {
    for (const auto& t : tensors) {
      LocalShape s = local_shape(t, l);
      int64_t bytes = tensor_bytes(t, l, format);
      w.bytes[size_t(t.kind)] += bytes;
      w.params[size_t(t.kind)] += s.rows * s.cols * s.count;
      w.total_bytes += bytes;
      w.total_params += s.rows * s.cols * s.count;
    }
  };
  if (stage.has_embedding) add(embedding_tensors(c));
  for (int64_t i = stage.first_layer; i < stage.first_layer + stage.num_layers; ++i) add(layer_tensors(c, i));
  if (stage.has_head) add(head_tensors(c));
  if (stage.has_mtp) add(mtp_tensors(c, 0));
  return w;
}

}  // namespace moeserve::planner
