#pragma once
// Weight memory of one rank: every tensor of its pipeline stage, sharded by the layout, stored in the
// weight format. Formulas (rows x cols local to the rank):
//   BF16 tensor                2 * rows * cols
//   F32 / I32 tensor           4 * rows * cols
//   FP8 linear                 rows * cols + ceil(rows/128) * ceil(cols/128)        (e4m3 + e8m0 per block)
//   MXFP4 expert linear        ceil(rows * cols / 2) + rows * ceil(cols/32)         (e2m1 x2 + e8m0 per 32)
#include <array>
#include <cstdint>

#include "io/model_config.h"
#include "planner/formats.h"
#include "planner/layout.h"
#include "planner/model_tensors.h"

namespace moeserve::planner {

struct WeightBreakdown {
  std::array<int64_t, kWeightKinds> bytes{};   // indexed by WeightKind
  std::array<int64_t, kWeightKinds> params{};  // parameters held by this rank
  int64_t total_bytes = 0;
  int64_t total_params = 0;
};

// Local shape of a tensor on one rank: {rows, cols, count}.
struct LocalShape {
  int64_t rows = 0, cols = 1, count = 1;
};
LocalShape local_shape(const TensorSpec& tensor, const Layout& layout);

// Bytes of one tensor on one rank (all `count` copies).
int64_t tensor_bytes(const TensorSpec& tensor, const Layout& layout, WeightFormat format);

// Everything one rank of `stage` holds: its main layers, the embedding on stage 0, the head on the last
// stage, the MTP layer on the last stage when `stage.has_mtp`.
WeightBreakdown stage_weights(const io::ModelConfig& config, const Layout& layout, const StageMap& stage,
                              WeightFormat format);

}  // namespace moeserve::planner
