#pragma once
// The DeepSeek-V4 forward on one Hopper GPU: the same batch-of-chunks contract as Model::forward
// (model/model.h), op for op as model.cpp / block.cpp / attention.cpp / moe.cpp, over KV pools on the device
// with cache::KvCache's indexing (GpuKvCache). The decode step (one token per sequence) can be captured in a
// CUDA graph per batch size and replayed.
//
// Numerics: `exact` (the default) feeds fp32 activations into every GEMM (the skinny GEMM at any row count),
// so logits match the CPU reference to fp32 rounding; otherwise linears with more than 8 rows go through
// cuBLASLt (BF16 activations for BF16 weights; the official FP8 activation quantizer for FP8 weights),
// routed experts with many rows per expert run per expert through cuBLASLt, and MXFP4 routed experts (under
// the checkpoint numerics' FP8 activations) stay MXFP4 and run through the W4A8 grouped GEMM.
#if MOESERVE_WITH_CUDA
#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "io/model_config.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/moe_w4a8.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"
#include "model/gpu_weights.h"
#include "model/model.h"

namespace moeserve::model {

struct GpuOptions {
  bool exact = true;
  Numerics numerics;
  // Decode-sized steps (at most 8 tokens) issue a sublayer's independent chains on side streams (the kv head
  // and the compressors beside the query path, the shared expert beside the routed ones), so that these
  // one-wave kernels run side by side; the results are the same. MOESERVE_BRANCHES=0 turns it off.
  bool concurrent_branches = true;
  // Decode steps chain the W4A8 GEMMs (kernels/cuda/moe_w4a8.h MoeW4A8Chain: W13 prefetches W2's first stages into
  // L2, W2 schedules before pdl_wait); the results are the same. MOESERVE_MOE_CHAIN=0 turns it off.
  bool moe_chain = true;
};

// KV pools on the device; slots and pages are handed out by a cache::KvCache of the same layout (whose host
// pools are never touched, so they cost no memory).
class GpuKvCache {
 public:
  GpuKvCache(cache::KvLayout layout, int64_t slots, int64_t pages);
  cache::KvCache& host() { return host_; }
  const cache::KvLayout& layout() const { return host_.layout(); }
  cuda::KvLayerView view(int64_t layer) const;
  int64_t bytes() const { return bytes_; }

 private:
  cache::KvCache host_;
  cuda::DeviceArray<float> window_;
  std::vector<cuda::DeviceArray<float>> compressed_, index_keys_, state_, index_state_;
  int64_t bytes_ = 0;
};

// What the W4A8 dispatch table says about MXFP4 routed experts of E x [2I, D] / [D, I] on `gpu`: empty when it has
// entries for both GEMMs there; otherwise a notice that the GEMMs take the heuristic's tile configs. `warn` is set
// when the table was tuned for these shapes on another GPU (a V4 model on an untuned card: likely slower), not for
// shapes nobody tuned (small test models).
std::string w4a8_table_notice(const std::string& gpu, int E, int D, int I, bool* warn);

class GpuModel {
 public:
  GpuModel(io::ModelConfig config, GpuWeights weights, GpuOptions options);
  ~GpuModel();
  // The loaded model's weights uploaded.
  static std::unique_ptr<GpuModel> from_model(const Model& model, GpuOptions options = {});
  // Random weights of `config`'s shapes (first `num_layers` layers; <= 0: all), created on the GPU.
  static std::unique_ptr<GpuModel> dummy(io::ModelConfig config, int64_t num_layers, cuda::WeightType linear_type,
                                         cuda::WeightType expert_type, uint64_t seed, GpuOptions options = {});
  // The same with the weight types a checkpoint of `config` would have (--load-format dummy):
  // model::dummy_weight_types.
  static std::unique_ptr<GpuModel> dummy(io::ModelConfig config, int64_t num_layers, uint64_t seed,
                                         GpuOptions options = {});

  const io::ModelConfig& config() const { return config_; }
  const GpuWeights& weights() const { return weights_; }
  const GpuOptions& options() const { return options_; }
  cache::KvLayout kv_layout() const { return cache::KvLayout::from_config(config_, 0, 0); }
  cudaStream_t stream() const { return stream_.get(); }  // the main stream: forwards start and end on it

  // Model::forward's contract; logits copied to the host, or, when a request asks to `sample`, tokens drawn
  // here (ForwardResult::tokens) and no logits.
  // graph_max_len > 0: a decode batch replays its batch size's graph, as forward_async with use_graph.
  ForwardResult forward(GpuKvCache& cache, const std::vector<ForwardRequest>& requests, int64_t graph_max_len = 0);
  // Runs the forward and leaves the logits on the device (logits_device(), rows as ForwardResult's); no sync.
  // first_row/row_count as ForwardResult's. With use_graph, a decode batch (one token per request) replays a
  // captured CUDA graph for its batch size (captured on first use; max_len bounds positions).
  void forward_async(GpuKvCache& cache, const std::vector<ForwardRequest>& requests, std::vector<int64_t>* first_row,
                     std::vector<int64_t>* row_count, bool use_graph = false, int64_t max_len = 0);
  const float* logits_device() const { return logits_; }
  int64_t logit_rows() const { return rows_; }
  int graphs_captured() const { return int(graphs_.size()); }

 private:
  struct Plan {
    int T = 0, S = 0, R = 0, page_ld = 0, max_pos = 0;  // page_ld > 0: fixed by a decode graph
  };
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    int page_ld = 0, max_pos = 0;
    uint64_t generation = 0;
  };
  void stage(GpuKvCache& cache, const std::vector<ForwardRequest>& requests, Plan* plan,
             std::vector<int64_t>* first_row, std::vector<int64_t>* row_count);
  void ensure_workspace(const Plan& p);
  void run(GpuKvCache& cache, const Plan& p);
  void block(GpuKvCache& cache, const Plan& p, int layer);
  bool fuse_hc(int T) const;
  void attention(GpuKvCache& cache, const Plan& p, int layer, const float* x, float* out);
  // combine = false leaves the routed experts' rows in ye_ (row_of_slot_) for the caller to add (hc_post_mix).
  void moe(const Plan& p, int layer, const float* x, float* out, bool combine);
  // route: the decode step's router arguments when the glue launch routes (moe_route was not run), else null.
  // after_glue: called (when set) once the routing glue is enqueued (the shared expert's fork at one token).
  void moe_mxfp4(const GpuMxfp4Experts& experts, int T, int K, float limit, const float* x, const cuda::RouteLogits* route,
                 const std::function<void()>& after_glue = {});
  // fp32_input: the reference (or the CPU engine) computes this linear on an fp32 input (router gate,
  // compressors, indexer weights, head, wo_a): on cuBLASLt (bf16_lt_preferred) its BF16 GEMM takes x as bf16 terms
  // (bf16_terms_).
  void linear(const GemmView& v, const float* x, int M, int ldx, float* y, int ldy, bool act_quant,
              bool fp32_input = false);
  void lt_check(const GemmView& v, const float* x, int M, int ldx, const float* y, int ldy, cudaStream_t st);
  // y = x W^T on BF16 tensor cores, the FP8 weight w converted in registers (gemm_bf16_fp8w_skinny): `problems`
  // side by side (problem p: x columns [p K, (p + 1) K), w rows [p N, (p + 1) N)), x fp32 [M][ldx] as `terms` bf16
  // terms. Scratch: bufs_[buf] and bufs_[buf + 1].
  void skinny_bf16_fp8w(const GemmView& w, const float* x, int M, int ldx, int problems, int N, int K, int terms,
                        float* y, int ldy, int buf);
  float* tmp_f32(size_t n);
  cuda::BatchDesc batch_desc(const Plan& p) const;
  // Concurrent branches (GpuOptions::concurrent_branches): fork(i) sends the work issued next to side stream i,
  // after everything issued so far on the main stream; to_main() issues on the main stream again (side i keeps
  // running); join(i) makes the main stream wait for side i's work.
  bool branches(int T) const;
  cudaStream_t cur() const { return cur_ ? cur_ : stream_.get(); }
  void fork(int side);
  void to_main() { cur_ = nullptr; }
  // The side stream work is issued on (0..kSides-1), or kSides on the main stream: per-stream scratch index.
  int cur_side() const;
  void join(int side);

  io::ModelConfig config_;
  GpuWeights weights_;
  GpuOptions options_;
  kernels::cpu::RopeTable rope_main_, rope_compress_;
  cuda::DeviceArray<float> inv_freq_main_, inv_freq_compress_;
  // forward()'s device sampling: per-row settings, tokens, and the sampler's scratch (grown to the rows asked).
  cuda::DeviceArray<cuda::SampleRow> sample_rows_;
  cuda::DeviceArray<int> sample_tokens_;
  cuda::DeviceBuffer sample_work_;
  // With graphs on, the sampler's launches (a kernel per phase) replay as one graph per (rows, phases); the
  // graphs hold the buffers' addresses, so they are dropped when logits_ or the buffers above move.
  std::map<int, cudaGraphExec_t> sample_graphs_;
  const void* sample_graph_buffers_[4] = {};
  void sample_on_device(int rows, cuda::SampleSteps steps, bool use_graph);
  // The main stream carries each sublayer's critical path: its kernels get free SMs before the side
  // streams' (a side branch's 2048-block GEMM had held back the indexer's query path by ~13 us).
  cuda::Stream stream_{cuda::StreamPriority::High};
  // Sides 0-3: a sublayer's branches; side 4 (kMixSide): the mHC's post and Sinkhorn mix of the sublayer.
  static constexpr int kSides = 5, kMixSide = 4;
  cuda::Stream sides_[kSides] = {cuda::Stream(cuda::StreamPriority::Low), cuda::Stream(cuda::StreamPriority::Low),
                                 cuda::Stream(cuda::StreamPriority::Low), cuda::Stream(cuda::StreamPriority::Low),
                                 cuda::Stream(cuda::StreamPriority::Low)};
  cudaStream_t cur_ = nullptr;      // the stream work is issued on (nullptr: the main stream)
  cudaEvent_t branch_ev_ = nullptr;  // recorded and waited on at once, so one event serves every fork and join
  cuda::Blas blas_;
  // The tensor-core skinny kernels at 2..64 rows in checkpoint numerics: FP8 linears where skinny_fp8_preferred
  // (gemm_fp8_skinny.cu), the grouped wo_a (gemm_bf16_fp8w_skinny.cu), FP8 routed experts (grouped). For A/B runs
  // and comparisons, MOESERVE_FP8_SKINNY=0 turns them off and a comma list (linear, wo_a, experts) keeps those.
  bool skinny_linear_ = true, skinny_wo_a_ = true, skinny_experts_ = true;
  int bf16_lt_min_n_ = 0;  // BF16 linears of fewer outputs take the GEMV (MOESERVE_BF16_LT)
  int bf16_terms_ = 3;     // bf16 terms of an fp32 input to a BF16 linear on cuBLASLt (MOESERVE_BF16_TERMS)
  int bf16_lt_rows_ = 9;   // BF16 linears of this many rows and more take cuBLASLt (MOESERVE_BF16_LT_ROWS)
  bool lt_sync_ = false;   // MOESERVE_LT_SYNC
  bool fp8_lt_ = true;     // FP8 linears past 8 rows on cuBLASLt (MOESERVE_FP8_LT)
  bool exact_skinny_ = true;  // exact kernels: linears of 2+ rows on tensor cores, fp32 input as 3 bf16 terms
  // The shared expert forks off the main stream before the router at every batch size;
  // MOESERVE_SHARED_AT=glue forks a one-token step's after the MXFP4 routing glue instead (A/B runs; see
  // GpuModel::moe).
  bool shared_after_glue_ = false;
  bool shared_on_main_ = false;  // MOESERVE_SHARED_AT=main: the shared expert on the main stream (A/B runs)
  // FP8 experts at one token in one launch (MOESERVE_MOE_ONE_LAUNCH=1, =shared with the shared expert as one
  // more slot of it): off by default, see GpuModel::moe.
  bool one_launch_experts_ = false;
  bool one_launch_shared_ = false;
  cuda::DeviceArray<uint32_t> moe_barrier_;  // its grid barrier (the MoE runs on the main stream only)
  // MOESERVE_W4A8_DECODE_CONFIGS=W13:W2 (config names, kernels/cuda/moe_w4a8.h): the decode chain's GEMM configs
  // instead of the dispatch table's (A/B runs); -1: the table.
  int w4a8_decode_cfg_[2] = {-1, -1};
  // A decode step's W13 counts the router's choice itself before pdl_wait (MoeW4A8Chain::settled_ids), the choice
  // and the gather in two launches; MOESERVE_W13_SETTLED_IDS=0: the one fused launch, W13 waits for its counts.
  bool w13_settled_ids_ = true;
  // When a decode step's MXFP4 chain launches W2 while SwiGLU waits for W13 (moe_mxfp4): by default unless the
  // shared expert forked after the routing glue (MOESERVE_SHARED_AT=glue); MOESERVE_W2_EARLY=0: never, =always:
  // also then (A/B runs).
  enum class W2Early { Never, UnlessSharedAfterGlue, Always };
  W2Early w2_early_ = W2Early::UnlessSharedAfterGlue;
  // The dispatch table's splits by expert load (cuda::MoeW4A8Split) in the W4A8 GEMMs; MOESERVE_W4A8_SPLIT=0: none.
  bool w4a8_split_ = true;
  // The W4A8 GEMMs' work-item counter (MoeW4A8Chain::item_counter); empty under MOESERVE_W4A8_DYNAMIC=0.
  cuda::DeviceArray<int> w4a8_item_counter_;
  // The fp32 attention kernel's arrival counters (cuda::AttentionArgs::arrivals); empty under
  // MOESERVE_ATTN_SELF_COMBINE=0.
  cuda::DeviceArray<int> attn_arrivals_;
  // Steps of at least this many tokens score the indexer on tensor cores under the checkpoint numerics
  // (cuda::indexer_scores_bf16; MOESERVE_IDX_BF16_MIN_T overrides for A/B runs). One token stays on the fp32
  // kernel: its 8-key tiles spread a short context over more SMs (V4-Flash layer at B=1, ctx 4096: 142.3 against
  // 140.5 us; at B=8 / B=32 the tensor cores save 4 / 17 us; docs/benchmarks/cuda-ops.md, eighteenth session).
  int idx_bf16_min_t_ = 2;
  static bool skinny_fp8_preferred(int M, int N, int K);
  bool bf16_lt_preferred(int M, int N, int K) const;  // BF16 linears on cuBLASLt rather than the GEMV

  // Workspace (grow-only; a growth invalidates captured graphs).
  struct Buf {
    cuda::DeviceBuffer buf;
    void* get(size_t bytes, uint64_t* generation);
  };
  std::map<int, Buf> bufs_;
  uint64_t generation_ = 0;
  size_t capacity_T_ = 0, capacity_R_ = 0, capacity_pos_ = 0, capacity_pages_ = 0;
  float *h_ = nullptr, *x_ = nullptr, *out_ = nullptr, *post_ = nullptr, *comb_ = nullptr, *partial_ = nullptr;
  float *qr_ = nullptr, *q_ = nullptr, *kv_ = nullptr, *ckv_ = nullptr, *ikv_ = nullptr, *iq_ = nullptr, *iw_ = nullptr;
  float *iscores_ = nullptr, *o_ = nullptr, *grouped_ = nullptr, *attn_partial_ = nullptr;
  int* topk_ = nullptr;
  float *gate_logits_ = nullptr, *route_w_ = nullptr, *weight_of_row_ = nullptr, *h13_ = nullptr, *act_ = nullptr;
  float *ye_ = nullptr, *sh13_ = nullptr, *sact_ = nullptr, *xe_ = nullptr;
  int *chosen_ = nullptr, *groups_ = nullptr, *row_of_slot_ = nullptr, *token_of_row_ = nullptr;
  float *sel_ = nullptr, *xr_ = nullptr, *logits_ = nullptr;
  uint8_t* w4_a_ = nullptr;  // the W4A8 chain (moe_mxfp4)
  float* w4_sa_ = nullptr;
  int *w4_counts_ = nullptr, *w4_slot_of_row_ = nullptr;
  void* w4_work_ = nullptr;
  int* meta_ = nullptr;
  size_t meta_ints_ = 0;
  int64_t rows_ = 0;
  int attn_splits_max_ = 1;
  // Pinned staging of the batch layout.
  int* pinned_ = nullptr;
  size_t pinned_ints_ = 0;
  cudaEvent_t staged_ = nullptr;  // the last layout copy out of pinned_: pinned_ is rewritten only after it ran
  std::map<int, Graph> graphs_;
};

}  // namespace moeserve::model
#endif
