#pragma once
// SGLang's "bytes per full token" for DeepSeek-V4 (DSV4PoolConfigurator; deepseek-v4.md §4.2), computed
// for comparison only. It is SGLang's accounting, not ours: it charges a fraction `swa_ratio` of a
// full-length sliding-window pool and of the C4 compressor rings per full token, where we keep the window
// ring and the compressor state as fixed per-request state.
//   bpft = r*K*N + K*N4/(4*H) + sum_HCA K/ratio + I*N4/4 + (r*R4/W)*2*(2d)*4*N4 + (r*R4/W)*2*(2di)*4*N4
//   x (N+1)/N under speculative decoding; K, I = FP8 entry sizes; R4 = 8 (16 under spec); W = 256.
// With Pro's 61 layers: 10,034 B (11,174 B with speculative decoding).
#include <cstdint>

#include "io/model_config.h"

namespace moeserve::planner {

struct SglangAccounting {
  double swa_ratio = 0.1;       // swa_full_tokens_ratio
  int64_t swa_page = 256;       // W
  double hisparse_ratio = 1.0;  // H: host-to-device ratio of HiSparse (1 = off)
};

double sglang_bytes_per_full_token(const io::ModelConfig& config, int64_t first_layer, int64_t num_layers,
                                   bool speculative, const SglangAccounting& accounting = {});

}  // namespace moeserve::planner
