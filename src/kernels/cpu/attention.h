#pragma once
// Reference attention pieces of DeepSeek-V4 (fp32):
//  - softmax pooling of compressor slots: entry[f] = sum_s softmax_s(score[s, f]) * kv[s, f];
//  - shared-KV MQA of one query over a gathered key list with a per-head sink in the denominator;
//  - lightning-indexer scores: sum_h relu(q_h . k_i) * softmax_scale * w_h, and causal top-k.
#include <cstdint>
#include <vector>

namespace moeserve::kernels::cpu {

// kv, score: [slots, dim]; slots whose score is -inf get zero weight. out: [dim].
void softmax_pool(const float* kv, const float* score, int64_t slots, int64_t dim, float* out);

// q [heads, head_dim]; keys[j] points at a [head_dim] key (= value); out [heads, head_dim].
void sink_attention(const float* q, int64_t heads, int64_t head_dim, const float* const* keys, int64_t num_keys,
                    const float* sinks, float scale, float* out);

// q [heads, dim], weights [heads] (already scaled), keys [num_keys, dim] -> scores [num_keys].
void indexer_scores(const float* q, const float* weights, int64_t heads, int64_t dim, const float* keys,
                    int64_t num_keys, float softmax_scale, float* scores);

// Indices of the k largest of scores[0, n) (k clamped to n), largest first; ties go to the lower index.
std::vector<int32_t> top_k(const float* scores, int64_t n, int64_t k);

}  // namespace moeserve::kernels::cpu
