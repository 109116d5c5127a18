#if MOESERVE_WITH_CUDA
#include "model/gpu_model.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/moe_fp8_one_token.h"

namespace moeserve::model {

namespace {

using cuda::DeviceArray;
using cuda::WeightType;

constexpr int kSkinnyRows = 8;  // linears with at most this many rows always take the skinny GEMM
constexpr int kKeyImageMinT = 64;  // steps from this many tokens may convert the attention's keys once (attention())

float rope_scale_of(const io::RopeSpec& spec) { return spec.yarn ? float(spec.attention_factor) : 1.0f; }

DeviceArray<float> zeroed(size_t n, const std::string& name) {
  DeviceArray<float> a(n, name);
  a.fill_bytes(0);
  return a;
}

}  // namespace

// ------------------------------------------------------------------------------------------------ KV pools
GpuKvCache::GpuKvCache(cache::KvLayout layout, int64_t slots, int64_t pages) : host_(layout, slots, pages) {
  cuda::require_device();
  const cache::KvLayout& l = host_.layout();
  const size_t layers = l.layers.size();
  window_ = zeroed(size_t(slots) * layers * l.window_capacity * l.head_dim, "KV window rings");
  compressed_.resize(size_t(l.num_compressed_layers));
  index_keys_.resize(size_t(l.num_indexer_layers));
  state_.resize(size_t(l.num_compressed_layers));
  index_state_.resize(size_t(l.num_indexer_layers));
  bytes_ = int64_t(window_.bytes());
  for (const auto& k : l.layers) {
    if (k.compressed_layer < 0) continue;
    auto& c = compressed_[size_t(k.compressed_layer)];
    c = zeroed(size_t(pages) * k.entries_per_page * l.head_dim, "KV compressed entries");
    auto& s = state_[size_t(k.compressed_layer)];
    s = zeroed(size_t(slots) * 2 * k.state_rows * k.state_width, "KV compressor rings");
    bytes_ += int64_t(c.bytes() + s.bytes());
    if (k.indexer_layer >= 0) {
      auto& ik = index_keys_[size_t(k.indexer_layer)];
      ik = zeroed(size_t(pages) * k.entries_per_page * l.index_head_dim, "KV indexer keys");
      auto& is = index_state_[size_t(k.indexer_layer)];
      is = zeroed(size_t(slots) * 2 * k.state_rows * k.index_state_width, "KV indexer compressor rings");
      bytes_ += int64_t(ik.bytes() + is.bytes());
    }
  }
}

cuda::KvLayerView GpuKvCache::view(int64_t layer) const {
  const cache::KvLayout& l = host_.layout();
  const cache::LayerKvLayout& k = l.layers[size_t(layer)];
  cuda::KvLayerView v;
  v.window = window_.data();
  v.layer = int(layer);
  v.num_layers = int(l.layers.size());
  v.cap = int(l.window_capacity);
  v.hd = int(l.head_dim);
  if (k.compressed_layer >= 0) {
    v.compressed = compressed_[size_t(k.compressed_layer)].data();
    v.epp = int(k.entries_per_page);
    v.state = state_[size_t(k.compressed_layer)].data();
    v.state_rows = int(k.state_rows);
    v.state_width = int(k.state_width);
  }
  if (k.indexer_layer >= 0) {
    v.index_keys = index_keys_[size_t(k.indexer_layer)].data();
    v.ihd = int(l.index_head_dim);
    v.index_state = index_state_[size_t(k.indexer_layer)].data();
    v.index_width = int(k.index_state_width);
  }
  return v;
}

// ------------------------------------------------------------------------------------------------ model
GpuModel::GpuModel(io::ModelConfig config, GpuWeights weights, GpuOptions options)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      options_(options),
      rope_main_(config_.rope_main, config_.rope_dim),
      rope_compress_(config_.rope_compress, config_.rope_dim) {
  inv_freq_main_ = DeviceArray<float>::from(std::span<const float>(rope_main_.inv_freq()), "rope table");
  inv_freq_compress_ = DeviceArray<float>::from(std::span<const float>(rope_compress_.inv_freq()), "rope table");
  check(config_.num_heads % 4 == 0, "CUDA backend: num_attention_heads {} must be a multiple of 4", config_.num_heads);
  check(config_.head_dim <= 512 && config_.head_dim % 4 == 0 && config_.rope_dim % 4 == 0,
        "CUDA backend: head_dim {} (rope {}) unsupported: head_dim <= 512, both multiples of 4", config_.head_dim,
        config_.rope_dim);
  if (const char* e = std::getenv("MOESERVE_BRANCHES"); e && std::string(e) == "0") options_.concurrent_branches = false;
  if (const char* e = std::getenv("MOESERVE_MOE_CHAIN"); e && std::string(e) == "0") options_.moe_chain = false;
  // MOESERVE_FP8_SKINNY: 0 turns the three skinny kernels off; a comma list of linear, wo_a, experts keeps only
  // those on (A/B runs, and telling the paths apart when a comparison fails).
  if (const char* e = std::getenv("MOESERVE_FP8_SKINNY"); e && std::string(e) != "1") {
    skinny_linear_ = skinny_wo_a_ = skinny_experts_ = false;
    std::stringstream list(std::string(e) == "0" ? "" : e);
    for (std::string path; std::getline(list, path, ',');) {
      bool* on = path == "linear" ? &skinny_linear_ : path == "wo_a" ? &skinny_wo_a_
                                                    : path == "experts" ? &skinny_experts_ : nullptr;
      check(on != nullptr, "MOESERVE_FP8_SKINNY='{}': expected 0, 1 or a comma list of linear, wo_a, experts", e);
      *on = true;
    }
  }
  if (const char* e = std::getenv("MOESERVE_SHARED_AT")) {
    const std::string v = e;
    check(v == "router" || v == "glue" || v == "main", "MOESERVE_SHARED_AT='{}': expected router, glue or main", v);
    shared_after_glue_ = v == "glue";
    shared_on_main_ = v == "main";
  }
  if (const char* e = std::getenv("MOESERVE_MOE_ONE_LAUNCH")) {
    const std::string v = e;
    check(v == "0" || v == "1" || v == "shared", "MOESERVE_MOE_ONE_LAUNCH='{}': expected 0, 1 or shared", v);
    one_launch_experts_ = v != "0";
    one_launch_shared_ = v == "shared";
  }
  moe_barrier_ = DeviceArray<uint32_t>(2, "MoE grid barrier");
  moe_barrier_.fill_bytes(0);
  // The W4A8 GEMMs take work items from a counter (MoeW4A8Chain::item_counter; MOESERVE_W4A8_DYNAMIC=0: the fixed
  // order, for A/B runs). One counter serves all of them: they run one after another on the main stream, and each
  // leaves it at 0.
  if (const char* e = std::getenv("MOESERVE_W4A8_DYNAMIC"); !e || std::string(e) != "0") {
    w4a8_item_counter_ = DeviceArray<int>(1, "W4A8 work item counter");
    w4a8_item_counter_.fill_bytes(0);
  }
  // Diagnostics of the BF16 linears past 8 rows (cuBLASLt): MOESERVE_BF16_LT=0 sends them all to the GEMV, =wide
  // only those of N < 64 (the router gate of the test models); MOESERVE_BF16_TERMS=1|2|3: the bf16 terms an fp32
  // input is fed as (those linears and the skinny wo_a); MOESERVE_LT_SYNC=1 synchronizes the stream after each
  // linear past 8 rows and checks the BF16 ones against a host double product (outside graph capture).
  if (const char* e = std::getenv("MOESERVE_BF16_LT")) {
    const std::string v = e;
    check(v == "0" || v == "1" || v == "wide", "MOESERVE_BF16_LT='{}': expected 0, 1 or wide", v);
    bf16_lt_min_n_ = v == "0" ? INT_MAX : v == "wide" ? 64 : 0;
  }
  // MOESERVE_BF16_LT_ROWS=n: BF16 linears of n rows and more take cuBLASLt (on the input's bf16 terms).
  if (const char* e = std::getenv("MOESERVE_BF16_LT_ROWS")) {
    bf16_lt_rows_ = std::atoi(e);
    check(bf16_lt_rows_ >= 1, "MOESERVE_BF16_LT_ROWS='{}': expected a row count of at least 1", e);
  }
  if (const char* e = std::getenv("MOESERVE_BF16_TERMS")) {
    const std::string v = e;
    check(v == "1" || v == "2" || v == "3", "MOESERVE_BF16_TERMS='{}': expected 1, 2 or 3", v);
    bf16_terms_ = std::stoi(v);
  }
  if (const char* e = std::getenv("MOESERVE_LT_SYNC"); e && std::string(e) == "1") lt_sync_ = true;
  if (const char* e = std::getenv("MOESERVE_W13_SETTLED_IDS"); e && std::string(e) == "0") w13_settled_ids_ = false;
  // MOESERVE_W4A8_SPLIT=0: the W4A8 GEMMs without the dispatch table's splits by expert load (for A/B timing).
  if (const char* e = std::getenv("MOESERVE_W4A8_SPLIT"); e && std::string(e) == "0") w4a8_split_ = false;
  if (const char* e = std::getenv("MOESERVE_W4A8_DECODE_CONFIGS")) {
    std::stringstream list(e);
    std::string name;
    for (int g = 0; g < 2; ++g) {
      check(bool(std::getline(list, name, ':')), "MOESERVE_W4A8_DECODE_CONFIGS='{}': expected W13:W2 config names", e);
      w4a8_decode_cfg_[g] = cuda::moe_w4a8_config_by_name(name.c_str());
      check(w4a8_decode_cfg_[g] >= 0, "MOESERVE_W4A8_DECODE_CONFIGS: no W4A8 config named '{}'", name);
    }
  }
  // MOESERVE_FP8_LT=0: FP8 linears past 8 rows take the GEMV (with the FP8 activation simulation) instead of
  // cuBLASLt's block-scaled GEMM (a diagnostic, as MOESERVE_BF16_LT).
  if (const char* e = std::getenv("MOESERVE_FP8_LT"); e && std::string(e) == "0") fp8_lt_ = false;
  // MOESERVE_EXACT_SKINNY=0: with exact kernels, every linear takes the fp32 GEMV (A/B runs; see linear()).
  if (const char* e = std::getenv("MOESERVE_EXACT_SKINNY"); e && std::string(e) == "0") exact_skinny_ = false;
  if (const char* e = std::getenv("MOESERVE_IDX_BF16_MIN_T")) idx_bf16_min_t_ = std::max(1, std::atoi(e));
  MOESERVE_CUDA_CHECK(cudaEventCreateWithFlags(&branch_ev_, cudaEventDisableTiming));
}

GpuModel::~GpuModel() {
  for (auto& [b, g] : graphs_)
    if (g.exec) cudaGraphExecDestroy(g.exec);
  for (auto& [k, exec] : sample_graphs_) cudaGraphExecDestroy(exec);
  if (branch_ev_) cudaEventDestroy(branch_ev_);
  if (staged_) cudaEventDestroy(staged_);
  if (pinned_) cudaFreeHost(pinned_);
}

std::unique_ptr<GpuModel> GpuModel::from_model(const Model& model, GpuOptions options) {
  const bool mxfp4_experts = !options.exact && options.numerics.act_fp8;
  return std::make_unique<GpuModel>(model.config(), GpuWeights::upload(model.config(), model.weights(), mxfp4_experts),
                                    options);
}

std::unique_ptr<GpuModel> GpuModel::dummy(io::ModelConfig config, int64_t num_layers, WeightType linear_type,
                                          WeightType expert_type, uint64_t seed, GpuOptions options) {
  io::keep_first_layers(config, num_layers);
  cuda::Stream setup;
  GpuWeights w = GpuWeights::random(config, linear_type, expert_type, seed, setup.get());
  return std::make_unique<GpuModel>(std::move(config), std::move(w), options);
}

std::unique_ptr<GpuModel> GpuModel::dummy(io::ModelConfig config, int64_t num_layers, uint64_t seed,
                                          GpuOptions options) {
  const DummyWeightTypes types = dummy_weight_types(config, options.exact);
  const WeightType t = types.fp8_linears ? WeightType::FP8 : WeightType::BF16;
  return dummy(std::move(config), num_layers, t, types.mxfp4_experts ? WeightType::MXFP4 : t, seed, options);
}

void* GpuModel::Buf::get(size_t bytes, uint64_t* generation) {
  if (bytes > buf.bytes()) {
    buf = cuda::DeviceBuffer();  // free first
    buf = cuda::DeviceBuffer(bytes, "forward workspace");
    ++*generation;
  }
  return buf.data();
}

int GpuModel::cur_side() const {
  for (int i = 0; i < kSides; ++i)
    if (cur_ == sides_[i].get()) return i;
  return kSides;
}

// One scratch per stream, so that concurrent branches never share one.
float* GpuModel::tmp_f32(size_t n) {
  const int side = cur_side();
  const int id = side == kSides ? 100 : 110 + side;
  return static_cast<float*>(bufs_[id].get(n * 4, &generation_));
}

bool GpuModel::branches(int T) const { return options_.concurrent_branches && T <= kSkinnyRows; }

void GpuModel::fork(int side) {
  MOESERVE_CUDA_CHECK(cudaEventRecord(branch_ev_, stream_.get()));
  MOESERVE_CUDA_CHECK(cudaStreamWaitEvent(sides_[side].get(), branch_ev_, 0));
  cur_ = sides_[side].get();
}

void GpuModel::join(int side) {
  MOESERVE_CUDA_CHECK(cudaEventRecord(branch_ev_, sides_[side].get()));
  MOESERVE_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), branch_ev_, 0));
  cur_ = nullptr;
}

void GpuModel::ensure_workspace(const Plan& p) {
  const io::ModelConfig& c = config_;
  const size_t T = size_t(std::max(p.T, 1)), R = size_t(std::max(p.R, 1));
  const size_t D = size_t(c.hidden_size), hc = size_t(c.hc_mult), H = size_t(c.num_heads), hd = size_t(c.head_dim);
  const size_t K = size_t(c.experts_per_token), E = size_t(c.n_routed_experts), I = size_t(c.moe_intermediate_size);
  const size_t TK = T * K, mix = size_t(c.hc_mix());
  const size_t nc = size_t(std::max(1, (p.max_pos + 1) / 4));
  int max_keys = int(c.sliding_window);
  for (const io::LayerSpec& s : c.layers) {
    int comp = 0;
    if (s.attention == io::AttentionKind::HCA) comp = (p.max_pos + 1) / int(s.compress_ratio);
    if (s.attention == io::AttentionKind::CSA) comp = std::min<int>(int(c.index_topk), (p.max_pos + 1) / int(s.compress_ratio));
    max_keys = std::max(max_keys, int(c.sliding_window) + comp);
  }
  attn_splits_max_ = cuda::attention_splits(int(T), int(H), max_keys);
  const size_t splits = size_t(
      std::max(cuda::hc_mix_splits(int(hc * D)), hc == 4 ? cuda::hc_post_mix_splits(int(hc), int(D)) : 0));
  auto f = [&](int id, size_t n) { return static_cast<float*>(bufs_[id].get(std::max<size_t>(n, 1) * 4, &generation_)); };
  auto i = [&](int id, size_t n) { return static_cast<int*>(bufs_[id].get(std::max<size_t>(n, 1) * 4, &generation_)); };
  h_ = f(0, T * hc * D);
  x_ = f(1, T * D);
  out_ = f(2, T * D);
  post_ = f(3, T * hc);
  comb_ = f(4, T * hc * hc);
  partial_ = f(5, splits * std::max(T, R) * (mix + 1));
  qr_ = f(6, T * size_t(c.q_lora_rank));
  q_ = f(7, T * H * hd);
  kv_ = f(8, T * hd);
  ckv_ = f(9, T * 4 * hd);
  ikv_ = f(10, T * 4 * size_t(c.index_head_dim));
  iq_ = f(11, T * size_t(c.index_n_heads * c.index_head_dim));
  iw_ = f(12, T * size_t(c.index_n_heads));
  iscores_ = f(13, T * nc);
  topk_ = i(14, T * size_t(std::max<int64_t>(1, c.index_topk)));
  o_ = f(15, T * H * hd);
  grouped_ = f(16, T * size_t(c.o_groups * c.o_lora_rank));
  attn_partial_ = f(17, cuda::attention_workspace_floats(int(T), int(H), int(hd), attn_splits_max_));
  gate_logits_ = f(18, T * E);
  chosen_ = i(19, TK);
  route_w_ = f(20, TK);
  groups_ = i(21, 3 * E + 1);
  row_of_slot_ = i(22, TK);
  token_of_row_ = i(23, TK);
  weight_of_row_ = f(24, TK);
  h13_ = f(25, TK * 2 * I);
  act_ = f(26, (TK + T) * I);  // + a row per token: the shared expert's slot of the one-launch MoE
  ye_ = f(27, TK * D);
  sh13_ = f(28, T * 2 * I);
  sact_ = f(29, T * I);
  xe_ = f(30, T * D);
  sel_ = f(31, R * hc * D);
  xr_ = f(32, R * D);
  logits_ = f(33, R * size_t(c.vocab_size));
  bool mxfp4 = false;
  for (const GpuLayer& L : weights_.layers) mxfp4 |= L.experts_mxfp4.defined();
  if (mxfp4) {  // the W4A8 chain: FP8 rows + scales (W13's input, then reused for W2's), counts, routing
    const size_t sa_ld = (TK + 3) / 4 * 4, width = std::max(D, I);
    auto b = [&](int id, size_t n) { return bufs_[id].get(std::max<size_t>(n, 16), &generation_); };
    w4_a_ = static_cast<uint8_t*>(b(40, TK * width));
    w4_sa_ = static_cast<float*>(b(41, (width / 128 + 1) * sa_ld * 4));
    w4_counts_ = static_cast<int*>(b(42, E * 4));
    w4_slot_of_row_ = static_cast<int*>(b(43, TK * 4));
    w4_work_ = b(44, cuda::moe_route_rows_workspace(int(T), int(K), int(E)));
  }
  meta_ints_ = 3 * T + 4 * size_t(p.S) + size_t(p.S) * size_t(p.page_ld) + R;
  meta_ = i(34, meta_ints_);
}

cuda::BatchDesc GpuModel::batch_desc(const Plan& p) const {
  cuda::BatchDesc b;
  b.T = p.T;
  b.S = p.S;
  const int* m = meta_;
  b.tok_pos = m;
  b.tok_seq = m + p.T;
  b.tok_id = m + 2 * p.T;
  b.seq_begin = m + 3 * p.T;
  b.seq_start = b.seq_begin + p.S;
  b.seq_count = b.seq_start + p.S;
  b.seq_slot = b.seq_count + p.S;
  b.page_table = b.seq_slot + p.S;
  b.page_ld = p.page_ld;
  return b;
}

void GpuModel::stage(GpuKvCache& cache, const std::vector<ForwardRequest>& requests, Plan* plan,
                     std::vector<int64_t>* first_row, std::vector<int64_t>* row_count) {
  const io::ModelConfig& c = config_;
  check(!requests.empty(), "forward: no requests");
  int T = 0, pages = 1, max_pos = 0;
  for (const ForwardRequest& r : requests) {
    check(r.seq && r.seq->open(), "forward: request without an open sequence");
    check(!r.tokens.empty(), "forward: empty chunk");
    const int64_t end = r.seq->length + int64_t(r.tokens.size());
    check(cache.host().pages_for(end) <= int64_t(r.seq->pages.size()), "forward: sequence has {} pages, its chunk needs {}",
          r.seq->pages.size(), cache.host().pages_for(end));
    for (int32_t id : r.tokens)
      check(id >= 0 && id < c.vocab_size, "token id {} is outside the vocabulary [0, {})", id, c.vocab_size);
    T += int(r.tokens.size());
    pages = std::max(pages, int(r.seq->pages.size()));
    max_pos = std::max(max_pos, int(end - 1));
  }
  if (plan->page_ld > 0) {  // fixed by a graph
    check(pages <= plan->page_ld && max_pos <= plan->max_pos, "internal: decode graph bounds exceeded");
  } else {
    plan->page_ld = pages;
    plan->max_pos = max_pos;
  }
  plan->T = T;
  plan->S = int(requests.size());
  std::vector<int> rows;
  first_row->clear();
  row_count->clear();
  int begin = 0;
  for (const ForwardRequest& r : requests) {
    const int n = int(r.tokens.size());
    const int first = r.all_logits ? 0 : n - 1;
    first_row->push_back(int64_t(rows.size()));
    for (int k = first; k < n; ++k) rows.push_back(begin + k);
    row_count->push_back(n - first);
    begin += n;
  }
  plan->R = int(rows.size());
  ensure_workspace(*plan);
  // The previous forward's layout copy is stream-ordered behind the forward before it: wait for it before
  // rewriting the staging buffer (back-to-back forward_async calls without a sync raced here).
  if (staged_) MOESERVE_CUDA_CHECK(cudaEventSynchronize(staged_));
  else MOESERVE_CUDA_CHECK(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
  if (pinned_ints_ < meta_ints_) {
    if (pinned_) cudaFreeHost(pinned_);
    MOESERVE_CUDA_CHECK(cudaMallocHost(&pinned_, meta_ints_ * sizeof(int)));
    pinned_ints_ = meta_ints_;
  }
  int* m = pinned_;
  const int S = plan->S;
  int* pos = m;
  int* seq = m + T;
  int* ids = m + 2 * T;
  int* sb = m + 3 * T;
  int* ss = sb + S;
  int* sc = ss + S;
  int* sl = sc + S;
  int* pt = sl + S;
  int* rw = pt + size_t(S) * plan->page_ld;
  int t = 0;
  for (int s = 0; s < S; ++s) {
    const ForwardRequest& r = requests[size_t(s)];
    sb[s] = t;
    ss[s] = int(r.seq->length);
    sc[s] = int(r.tokens.size());
    sl[s] = r.seq->slot;
    for (int k = 0; k < plan->page_ld; ++k) pt[size_t(s) * plan->page_ld + k] = k < int(r.seq->pages.size()) ? r.seq->pages[size_t(k)] : 0;
    for (size_t k = 0; k < r.tokens.size(); ++k, ++t) {
      pos[t] = int(r.seq->length) + int(k);
      seq[t] = s;
      ids[t] = r.tokens[k];
    }
  }
  std::copy(rows.begin(), rows.end(), rw);
  MOESERVE_CUDA_CHECK(cudaMemcpyAsync(meta_, pinned_, meta_ints_ * sizeof(int), cudaMemcpyHostToDevice, stream()));
  MOESERVE_CUDA_CHECK(cudaEventRecord(staged_, stream()));
}

namespace {
// The weight side of a gemv: problems of [N, K] weights laid out back to back (grouped launches index them).
void set_weights(cuda::GemvArgs& a, const GemmView& v, int N, int K) {
  a.wtype = v.type;
  a.w = v.w;
  a.row_scale = v.row_scale;
  a.N = N;
  a.K = K;
  a.scale_ld = v.scale_ld;
  a.w_stride = (long long)N * K;
  a.scale_stride = (long long)N * v.scale_ld;
}
// Stacked FP8 experts of N x K as set_weights lays them out, for the one-launch MoE.
cuda::Fp8ExpertWeights fp8_experts(const GemmView& v, int N, int K) {
  cuda::GemvArgs a;
  set_weights(a, v, N, K);
  return {a.w, a.row_scale, a.scale_ld, a.w_stride, a.scale_stride};
}
}  // namespace

// bench_gpu_ops linear on the H200 (docs/benchmarks/cuda-ops.md, eighth session): from 2 rows the skinny GEMM
// (with its quantizer, ~4.5 us at least) beats the multi-row GEMV 1.1-14x, except where rows x weight elements
// stay within 8M (V4-Flash wkv at 4 rows: 4.6 vs 3.8 us; wq_a at 2 rows: 5.1 vs 3.7); cuBLASLt's block-scaled
// FP8 GEMM (~15 us floor) catches up on weights of 8M+ elements past 32 rows (V4-Flash wq_b, 64 rows: 17.1 vs 25.0).
bool GpuModel::skinny_fp8_preferred(int M, int N, int K) {
  const int64_t elements = int64_t(N) * K;
  if (!cuda::gemm_fp8_skinny_fits(M, N, K) || M < 2 || M * elements <= (int64_t(8) << 20)) return false;
  return M <= 32 || elements < (int64_t(8) << 20);
}

// BF16 linears (fp32 input as bf16 terms): cuBLASLt past 8 rows, and from 2 rows where rows x weight elements reach
// 32M. bench_gpu_ops linear on the H200, three terms against the fp32 GEMV (docs/benchmarks/cuda-ops.md, twenty-ninth
// session): the 1 GB head 257 / 265 / 276 against 364 / 719 / 1029 us at 2 / 4 / 8 rows; the C4 compressor (8M
// weights) 10.4 against 12.8 at 4 rows, 10.5 against 7.5 at 2; the gate (1M) keeps the GEMV (7.8 against 4.2 at 8).
// MOESERVE_BF16_LT_ROWS=n moves the rows from which every BF16 linear takes cuBLASLt (tests force the path with 2).
bool GpuModel::bf16_lt_preferred(int M, int N, int K) const {
  if (M > kSkinnyRows || M >= bf16_lt_rows_) return true;
  return M >= 2 && int64_t(M) * N * K >= (int64_t(32) << 20);
}

// MOESERVE_LT_SYNC diagnostic: a BF16 linear's output against a double product on the host (fp32 input, the stored
// bf16 weights), printed per call.
void GpuModel::lt_check(const GemmView& v, const float* x, int M, int ldx, const float* y, int ldy, cudaStream_t st) {
  const int N = v.N, K = v.K;
  std::vector<float> hx(size_t(M) * ldx), hy(size_t(M) * ldy);
  std::vector<uint16_t> hw(size_t(N) * K);
  cuda::copy_to_host(hx.data(), x, (size_t(M - 1) * ldx + K) * 4, st, "lt check x");
  cuda::copy_to_host(hy.data(), y, (size_t(M - 1) * ldy + N) * 4, st, "lt check y");
  cuda::copy_to_host(hw.data(), v.w, hw.size() * 2, st, "lt check w");
  double worst = 0, worst_abs = 0, scale_at = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double r = 0, a = 0;
      for (int k = 0; k < K; ++k) {
        const double p = double(hx[size_t(m) * ldx + k]) * bf16_to_f32(hw[size_t(n) * K + k]);
        r += p;
        a += std::fabs(p);
      }
      const double e = std::fabs(hy[size_t(m) * ldy + n] - r);
      if (a > 0 && e / a > worst) worst = e / a, worst_abs = e, scale_at = a;
    }
  std::fprintf(stderr, "lt-check M=%d N=%d K=%d ldx=%d ldy=%d: worst |y - ref| / sum|x w| = %.3g (|err| %.3g, sum %.3g)\n",
               M, N, K, ldx, ldy, worst, worst_abs, scale_at);
}

void GpuModel::skinny_bf16_fp8w(const GemmView& w, const float* x, int M, int ldx, int problems, int N, int K,
                                int terms, float* y, int ldy, int buf) {
  cudaStream_t st = cur();
  const size_t term = size_t(M) * problems * K;
  auto* xb = static_cast<uint16_t*>(bufs_[buf].get(term * terms * 2, &generation_));
  const size_t wsn = cuda::gemm_bf16_fp8w_skinny_workspace_floats(M, N, K, problems, terms);
  auto* work = static_cast<float*>(bufs_[buf + 1].get(std::max<size_t>(wsn, 1) * 4, &generation_));
  MOESERVE_CUDA_CHECK(cuda::bf16_permute16(x, M, problems * K, ldx, xb, st, terms >= 2 ? xb + term : nullptr,
                                           terms == 3 ? xb + 2 * term : nullptr));
  MOESERVE_CUDA_CHECK(cuda::gemm_bf16_fp8w_skinny(xb, M, problems, static_cast<const uint8_t*>(w.w), w.blk_scale,
                                                  w.blk_ld, N, K, y, ldy, work, wsn, st, terms));
}

void GpuModel::linear(const GemmView& v, const float* x, int M, int ldx, float* y, int ldy, bool act_quant,
                      bool fp32_input) {
  if (M == 0 || v.N == 0) return;
  cudaStream_t st = cur();
  const bool sim = act_quant && v.act_quant && options_.numerics.act_fp8;
  const int K = v.K;
  // The activation the GEMM reads: x itself, or (checkpoint numerics) a packed copy through the FP8 simulation.
  auto input = [&](const float** xin, int* ld) {
    *xin = x;
    *ld = ldx;
    if (!sim) return;
    float* t = tmp_f32(size_t(M) * K);
    MOESERVE_CUDA_CHECK(cuda::fp8_block_sim_to(x, ldx, t, K, M, K, 128, st));
    *xin = t;
    *ld = K;
  };
  // FP8 linears of 2..64 rows whose input the model quantizes (checkpoint numerics): the tensor-core skinny GEMM
  // where it beats the GEMV and cuBLASLt (skinny_fp8_preferred); each stream quantizes into its own scratch
  // (branches run concurrently).
  if (skinny_linear_ && !options_.exact && sim && v.type == WeightType::FP8 && v.blk_scale && ldx % 4 == 0 &&
      skinny_fp8_preferred(M, v.N, K)) {
    const int side = cur_side();
    auto* xq = static_cast<uint8_t*>(bufs_[120 + side].get(size_t(M) * K, &generation_));
    auto* xs = static_cast<float*>(bufs_[130 + side].get(size_t(M) * (K / 128) * 4, &generation_));
    const size_t wsn = cuda::gemm_fp8_skinny_workspace_floats(M, v.N, K);
    auto* work = static_cast<float*>(bufs_[140 + side].get(std::max<size_t>(wsn, 1) * 4, &generation_));
    MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(x, M, K, ldx, xq, xs, st));
    MOESERVE_CUDA_CHECK(cuda::gemm_fp8_skinny(xq, xs, M, M, static_cast<const uint8_t*>(v.w), v.blk_scale,
                                              v.blk_ld, v.N, K, y, ldy, work, wsn, st));
    return;
  }
  // Exact kernels, FP8 weights, 2-64 rows, reference numerics: the fp32 input as three bf16 terms (hi + lo + lo2, all
  // 24 bits) on BF16 tensor cores, the weight converted in registers (gemm_bf16_fp8w_skinny, as the grouped wo_a).
  // The products are exact as in the fp32 GEMV; only the order and grouping of the sums differ. The GEMV re-reads x
  // per row group and ran at 10-40 % of its fp32 roofline at 2-64 rows; it stays for two rows of a matrix of up to
  // 8M weights (shared w2: 6.8 against 7.5 us; docs/benchmarks/cuda-ops.md, twenty-eighth session).
  if (options_.exact && exact_skinny_ && !sim && v.type == WeightType::FP8 && v.blk_scale && M >= 2 &&
      (M > 2 || int64_t(v.N) * K > (int64_t(8) << 20)) && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
      cuda::gemm_bf16_fp8w_skinny_fits(M, v.N, K)) {
    skinny_bf16_fp8w(v, x, M, ldx, 1, v.N, K, 3, y, ldy, 150 + 2 * cur_side());  // scratch per stream
    return;
  }
  // After a linear past 8 rows, when MOESERVE_LT_SYNC asks for it (outside graph capture): the stream
  // synchronized (a race probe), and a BF16 linear checked against a double product on the host (lt_check).
  auto lt_done = [&] {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (lt_sync_ && cudaStreamIsCapturing(st, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone) {
      MOESERVE_CUDA_CHECK(cudaStreamSynchronize(st));
      if (v.type == WeightType::BF16) lt_check(v, x, M, ldx, y, ldy, st);
    }
  };
  // Exact kernels (reference numerics): BF16 linears on cuBLASLt (bf16_lt_preferred) take the same GEMM on the
  // input's three bf16 terms (exact products, as in the fp32 GEMV, which ran at 15-24 % of its roofline past 8 rows;
  // docs/benchmarks/cuda-ops.md, twenty-eighth session).
  const bool exact_lt = options_.exact && exact_skinny_ && !sim && v.type == WeightType::BF16;
  const bool bf16_lt = v.type == WeightType::BF16 && v.N >= bf16_lt_min_n_;
  if ((!options_.exact || exact_lt) && (bf16_lt ? bf16_lt_preferred(M, v.N, K) : M > kSkinnyRows)) {
    if (bf16_lt) {
      const float* xin;
      int ld;
      input(&xin, &ld);
      // Linears on an fp32 input in the reference or the CPU engine (router gate, compressors, indexer weights,
      // head, wo_a) take x as bf16 terms (bf16_terms_: hi + lo + lo2 carry all 24 bits), so that past 8 rows they
      // stay as close to the CPU as the GEMV's fp32 input: the FP8 quantization downstream (of wo_b's input, of
      // W2's input scaled by the router weights) turns differences of 1e-6 into flipped e4m3 roundings: a test
      // model's logits moved 0.049 (bar 0.016) with wo_a's input on one term and the gate's on two, 0.014 with
      // both on two, 0.0045 on three, as on the GEMV (docs/benchmarks/cuda-ops.md, tenth session). Up to 64 rows
      // the terms are stacked as rows of one GEMM (one pass over the weight: the head's is 1 GB; gemm_bf16_terms).
      const int terms = options_.exact ? 3 : fp32_input ? bf16_terms_ : 1;
      const size_t term = size_t(M) * K;
      // Decode-sized steps run the compressors and the indexer weights concurrently on side streams: each stream
      // has its own terms, parts (bufs_[170 + 2 side] and the next one) and cuBLASLt workspace.
      const int side = cur_side();
      auto* xb = static_cast<uint16_t*>(bufs_[170 + 2 * side].get(term * terms * 2, &generation_));
      if (terms > 1)
        MOESERVE_CUDA_CHECK(
            cuda::to_bf16_split(xin, M, K, ld, xb, xb + term, st, terms == 3 ? xb + 2 * term : nullptr));
      else
        MOESERVE_CUDA_CHECK(cuda::to_bf16(xin, M, K, ld, xb, st));
      float* parts = terms > 1 && M <= cuda::Blas::kStackedRows
                         ? static_cast<float*>(bufs_[171 + 2 * side].get(size_t(terms) * M * v.N * 4, &generation_))
                         : nullptr;
      if (blas_.gemm_bf16_terms(xb, terms, static_cast<const uint16_t*>(v.w), y, M, v.N, K, ldy, parts, st,
                                side == kSides ? 0 : 1 + side)) {
        lt_done();
        return;
      }
    } else if (fp8_lt_ && v.blk_scale && K % 128 == 0 && ldx % 4 == 0) {
      // Rows cuBLASLt has no algorithm for run padded (linear_fp8_block): the GEMV below took ~3 ms a call at 769
      // rows, 5.6x a server's whole mixed step (docs/benchmarks/server.md).
      void* scratch = bufs_[102].get(blas_.linear_fp8_block_scratch(M, v.N, K, ldy), &generation_);
      if (blas_.linear_fp8_block(x, M, K, ldx, static_cast<const uint8_t*>(v.w), v.blk_scale, v.N, y, ldy, scratch,
                                 st)) {
        lt_done();
        return;
      }
    }
  }
  cuda::GemvArgs a;
  set_weights(a, v, v.N, K);
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.M = M;
  // On a side branch, room beside a wide GEMV for the critical path's one-block kernels (an nsys timeline showed
  // the kv head's rope waiting ~12 us behind a persistent wq_b on side 2).
  if (cur_) a.leave_sms = cuda::device_info().multiprocessors / 4;
  // The FP8 activation simulation rides on the skinny GEMM's loads where it can (no copy, no launch).
  a.act_fp8 = sim && cuda::gemv_fuses_act_fp8(a);
  if (sim && !a.act_fp8) input(&a.x, &a.ldx);
  MOESERVE_CUDA_CHECK(cuda::gemv(a, st));
  if (M > kSkinnyRows && !sim) lt_done();
}

void GpuModel::attention(GpuKvCache& cache, const Plan& p, int l, const float* x, float* out) {
  const io::ModelConfig& c = config_;
  const GpuLayer& L = weights_.layers[size_t(l)];
  const io::LayerSpec& spec = c.layers[size_t(l)];
  const cuda::BatchDesc b = batch_desc(p);
  const int T = p.T, D = int(c.hidden_size), H = int(c.num_heads), hd = int(c.head_dim), rd = int(c.rope_dim);
  const int ql = int(c.q_lora_rank), nope = hd - rd;
  const float eps = float(c.rms_norm_eps);
  const bool sliding = spec.attention == io::AttentionKind::Sliding;
  const float* inv = sliding ? inv_freq_main_.data() : inv_freq_compress_.data();
  const float rscale = rope_scale_of(c.rope_for(spec));
  const float cscale = rope_scale_of(c.rope_compress);
  const Numerics& num = options_.numerics;
  const cuda::KvLayerView v = cache.view(l);
  const GpuCompressor* comp = L.compressor ? &*L.compressor : nullptr;
  const GpuCompressor* icomp = L.index_compressor ? &*L.index_compressor : nullptr;
  const int nH = int(c.index_n_heads), id = int(c.index_head_dim);
  // Branches of a decode-sized step. With an indexer: side 0 the kv head and the attention's compressor, side 1
  // the indexer's compressor, side 3 its head weights, side 2 the query, and the main stream (high priority) keeps
  // the indexer's query path to the attention kernel. Without one: the query (wq_a, q_norm and the wide wq_b) on
  // side 2, and the kv head's chain of one-block kernels on the main stream, where the query's thousands of
  // low-priority blocks do not hold the SMs it waits for.
  const bool par = branches(T);
  const bool kv_main = par && !icomp;
  auto query = [&] {  // wq_a, q_norm, wq_b and the rope (with an indexer: wq_b and the rope on side 2)
    linear(L.wq_a.view(), x, T, D, qr_, ql, true);
    MOESERVE_CUDA_CHECK(cuda::rms_norm(qr_, T, ql, ql, L.q_norm.data(), eps, qr_, ql, cur()));
    if (par && icomp) fork(2);
    linear(L.wq_b.view(), qr_, T, ql, q_, H * hd, true);
    MOESERVE_CUDA_CHECK(cuda::rope(q_, T, H, hd, H * hd, rd, b.tok_pos, inv, rscale, false, eps, cur()));
  };
  if (kv_main) {
    fork(2);
    query();
    to_main();
  } else if (par) {
    fork(0);
  }
  linear(L.wkv.view(), x, T, D, kv_, hd, true);
  // kv_norm (weighted RMSNorm of the one kv head) and the FP8 storage simulation of its non-rope dims fused
  // into the rope kernel (which holds rows of up to 512 values).
  const bool kv_fp8_fused = num.kv_fp8 && hd <= 512;
  MOESERVE_CUDA_CHECK(cuda::rope(kv_, T, 1, hd, hd, rd, b.tok_pos, inv, rscale, false, eps, cur(), L.kv_norm.data(),
                                 kv_fp8_fused ? 64 : 0));
  if (num.kv_fp8 && !kv_fp8_fused) MOESERVE_CUDA_CHECK(cuda::fp8_block_sim(kv_, T, hd, nope, 64, cur()));
  cuda::CompressorArgs ca, ia;
  if (comp) {
    const int width = (comp->overlap ? 2 : 1) * comp->dim;
    linear(comp->wkv_gate.view(), x, T, D, ckv_, 2 * width, true, /*fp32_input=*/true);
    MOESERVE_CUDA_CHECK(cuda::add_ape(ckv_ + width, T, width, 2 * width, b.tok_pos, comp->ape.data(), comp->ratio, cur()));
    ca.kv = ckv_;
    ca.score = ckv_ + width;
    ca.ld = 2 * width;
    ca.state = v.state;
    ca.rows = v.state_rows;
    ca.width = v.state_width;
    ca.ratio = comp->ratio;
    ca.dim = comp->dim;
    ca.overlap = comp->overlap;
    ca.norm_w = comp->norm.data();
    ca.eps = eps;
    ca.inv_freq = inv_freq_compress_.data();
    ca.rope_dim = rd;
    ca.rope_scale = cscale;
    ca.post = num.kv_fp8 ? 1 : 0;
    ca.nope = nope;
    ca.pool = v.compressed;
    ca.epp = v.epp;
    MOESERVE_CUDA_CHECK(cuda::compressor_emit(b, ca, cur()));
    MOESERVE_CUDA_CHECK(cuda::compressor_store(b, ca, cur()));
  }
  if (icomp) {
    if (par) fork(1);
    const int width = 2 * icomp->dim;
    linear(icomp->wkv_gate.view(), x, T, D, ikv_, 2 * width, true, /*fp32_input=*/true);
    MOESERVE_CUDA_CHECK(cuda::add_ape(ikv_ + width, T, width, 2 * width, b.tok_pos, icomp->ape.data(), icomp->ratio, cur()));
    ia = ca;
    ia.kv = ikv_;
    ia.score = ikv_ + width;
    ia.ld = 2 * width;
    ia.state = v.index_state;
    ia.rows = v.state_rows;
    ia.width = v.index_width;
    ia.ratio = icomp->ratio;
    ia.dim = icomp->dim;
    ia.overlap = true;
    ia.norm_w = icomp->norm.data();
    ia.post = num.indexer_fp4 ? 2 : 0;
    ia.pool = v.index_keys;
    MOESERVE_CUDA_CHECK(cuda::compressor_emit(b, ia, cur()));
    MOESERVE_CUDA_CHECK(cuda::compressor_store(b, ia, cur()));
    if (par) fork(3);
    linear(L.index_weights_proj.view(), x, T, D, iw_, nH, true, /*fp32_input=*/true);
    MOESERVE_CUDA_CHECK(cuda::scale_values(iw_, size_t(T) * nH, 1.0f / std::sqrt(float(nH)), cur()));
  }
  to_main();
  if (!kv_main) {
    query();
    to_main();
  }
  if (icomp) {
    linear(L.index_wq_b.view(), qr_, T, ql, iq_, nH * id, true);
    if (num.indexer_fp4 && id == 128) {  // rope, Hadamard and FP4 in one launch
      MOESERVE_CUDA_CHECK(cuda::rope_hadamard(iq_, T, nH, id, nH * id, rd, b.tok_pos, inv_freq_compress_.data(), cscale,
                                              true, cur()));
    } else {
      MOESERVE_CUDA_CHECK(cuda::rope(iq_, T, nH, id, nH * id, rd, b.tok_pos, inv_freq_compress_.data(), cscale, false, 0.0f, cur()));
      if (num.indexer_fp4) MOESERVE_CUDA_CHECK(cuda::hadamard_fp4_sim(iq_, T * nH, id, true, cur()));
    }
    if (par) {
      join(1);
      join(3);
    }
  }
  const cudaStream_t st = stream();

  int max_keys = int(c.sliding_window);
  if (comp) {
    const int entries = (p.max_pos + 1) / comp->ratio;
    max_keys += icomp ? std::min<int>(int(c.index_topk), entries) : entries;
  }
  if (icomp) {
    const int nc = std::max(1, (p.max_pos + 1) / icomp->ratio);
    // FP4-simulated queries and keys are exact in bf16: tensor cores from idx_bf16_min_t_ tokens on.
    if (num.indexer_fp4 && T >= idx_bf16_min_t_ && cuda::indexer_scores_bf16_fits(nH, id))
      MOESERVE_CUDA_CHECK(cuda::indexer_scores_bf16(b, iq_, iw_, nH, id, v.index_keys, v.epp, icomp->ratio,
                                                    1.0f / std::sqrt(float(id)), nc, iscores_, nc, st));
    else
      MOESERVE_CUDA_CHECK(cuda::indexer_scores(b, iq_, iw_, nH, id, v.index_keys, v.epp, icomp->ratio,
                                               1.0f / std::sqrt(float(id)), nc, iscores_, nc, st));
    MOESERVE_CUDA_CHECK(cuda::indexer_topk(b, iscores_, nc, icomp->ratio, int(c.index_topk), topk_, st));
  }
  if (par) {
    if (!kv_main) join(0);
    join(2);  // the query: on side 2 in both arrangements
  }
  cuda::AttentionArgs aa;
  aa.q = q_;
  aa.kv = kv_;
  aa.view = v;
  aa.H = H;
  aa.hd = hd;
  aa.window = int(c.sliding_window);
  aa.ratio = comp ? comp->ratio : 0;
  aa.topk = icomp ? topk_ : nullptr;
  aa.k = int(c.index_topk);
  aa.max_keys = max_keys;
  aa.sinks = L.sink.data();
  aa.scale = 1.0f / std::sqrt(float(hd));
  aa.inv_freq = inv;
  aa.rope_dim = rd;
  aa.rope_scale = rscale;
  aa.o = o_;
  aa.partial = attn_partial_;
  aa.splits = std::min(attn_splits_max_, cuda::attention_splits(T, H, max_keys));
  aa.keys_bf16_nope = num.kv_fp8;
  // Prefill-sized steps convert the keys for the tensor-core kernel once into a key image, where that is at most an
  // eighth of the rows the blocks would convert (each of its keys per token and 32 heads) and takes at most 64 MB.
  // MOESERVE_ATTN_KEY_IMAGE=0: never (for A/B runs).
  static const bool key_image_on = [] {
    const char* e = std::getenv("MOESERVE_ATTN_KEY_IMAGE");
    return !e || std::string(e) != "0";
  }();
  const int image_comp = comp ? (p.max_pos + 1) / comp->ratio : 0;
  const size_t image_rows = cuda::attention_key_image_rows(T, p.S, aa.window, image_comp);
  const size_t image_bytes = cuda::attention_key_image_elems(T, p.S, aa.window, image_comp) * 2;
  if (key_image_on && num.kv_fp8 && T >= kKeyImageMinT && image_bytes <= (size_t(64) << 20) &&
      8 * image_rows <= size_t(T) * size_t(std::max(1, H / 32)) * size_t(max_keys)) {
    aa.key_image = static_cast<uint16_t*>(bufs_[110].get(image_bytes, &generation_));
    aa.image_comp = image_comp;
  }
  MOESERVE_CUDA_CHECK(cuda::sparse_attention(b, aa, st));
  // The window ring only has to hold this step's kv before the layer's next step: its store runs beside the
  // output projection (after the attention kernels, whose reads it would overwrite).
  if (par) fork(0);
  MOESERVE_CUDA_CHECK(cuda::window_store(b, v, kv_, cur()));
  to_main();

  // Grouped low-rank output projection, then wo_b.
  const int G = int(c.o_groups), olora = int(c.o_lora_rank), group_in = H * hd / G;
  const GemmView wa = L.wo_a.view();
  if (!options_.exact && skinny_wo_a_ && T >= 2 && wa.type == WeightType::FP8 && wa.blk_scale &&
      cuda::gemm_bf16_fp8w_skinny_fits(T, olora, group_in)) {
    // 2..64 rows: BF16 tensor cores, the FP8 weight converted in registers (exact in bf16; bench_gpu_ops linear:
    // 8 rows 82 -> ~11 us against the GEMV). The reference engine multiplies the fp32 attention output (the
    // official model's einsum has it in bf16), so the input goes in as bf16 terms, as in linear(): one rounding
    // moved a test model's logits ~10x further from the CPU (docs/benchmarks/cuda-ops.md, tenth session). Three
    // terms cost the V4-Flash layer ~0 at batch 8 and ~1.5% at 32 (one launch up to 42 rows).
    skinny_bf16_fp8w(wa, o_, T, H * hd, G, olora, group_in, bf16_terms_, grouped_, G * olora, 105);
  } else if (options_.exact || T <= kSkinnyRows) {
    cuda::GemvArgs a = cuda::gemv_args_on_slices(G, olora, group_in, o_, grouped_, T);  // H * hd = G * group_in
    set_weights(a, wa, olora, group_in);  // group g: rows [g*olora, (g+1)*olora) of wo_a
    MOESERVE_CUDA_CHECK(cuda::gemv(a, st));
  } else {
    // The reference's grouped projection is an einsum on the dequantized weight with an unquantized input
    // (docs/numerics.md), so an FP8 wo_a is dequantized for the BF16 GEMM (exact for its E8M0 scales) instead
    // of taking the FP8 path, which would quantize the input; the input goes in as bf16 terms, as above.
    GemmView w = wa;
    if (w.type == WeightType::FP8) {
      auto* bf16 = static_cast<uint16_t*>(bufs_[104].get(size_t(w.N) * w.K * 2, &generation_));
      MOESERVE_CUDA_CHECK(cuda::fp8_weights_to_bf16(static_cast<const uint8_t*>(w.w), w.row_scale, w.N, w.K,
                                                    w.scale_ld, bf16, st));
      w = GemmView{};
      w.w = bf16;
      w.N = L.wo_a.out;
      w.K = L.wo_a.in;
    }
    for (int g = 0; g < G; ++g) {
      GemmView wg = w;
      wg.w = static_cast<const uint16_t*>(w.w) + size_t(g) * olora * w.K;
      wg.N = olora;
      linear(wg, o_ + size_t(g) * group_in, T, H * hd, grouped_ + size_t(g) * olora, G * olora, false,
             /*fp32_input=*/true);
    }
  }
  linear(L.wo_b.view(), grouped_, T, G * olora, out, D, true);
  if (par) join(0);
}

void GpuModel::moe(const Plan& p, int l, const float* x, float* out, bool combine) {
  const io::ModelConfig& c = config_;
  const GpuLayer& L = weights_.layers[size_t(l)];
  const io::LayerSpec& spec = c.layers[size_t(l)];
  const cudaStream_t st = stream();
  const cuda::BatchDesc b = batch_desc(p);
  const int T = p.T, D = int(c.hidden_size), E = int(c.n_routed_experts), K = int(c.experts_per_token);
  const int I = int(c.moe_intermediate_size), TK = T * K;
  const bool par = branches(T);
  const float limit = float(c.swiglu_limit);
  const Numerics& num = options_.numerics;

  // The shared expert writes `out` (on side stream 0 in a decode-sized step); the routed experts' combine adds
  // to it after the join.
  auto shared = [&] {
    if (par && !shared_on_main_) fork(0);
    linear(L.shared_w13.view(), x, T, D, sh13_, 2 * I, true);
    MOESERVE_CUDA_CHECK(cuda::swiglu(sh13_, T, nullptr, I, limit, nullptr, sact_, cur()));
    linear(L.shared_w2.view(), sact_, T, I, out, D, true);
    to_main();
  };
  // One token over FP8 experts: W13, SwiGLU and W2 of every slot in one launch (moe_fp8_one_token.h), bit for bit
  // the grouped GEMV chain below but without its three launches between the weight streams. Opt-in
  // (MOESERVE_MOE_ONE_LAUNCH=1): the V4-Flash layer measured ~1.8 us slower with it, because its blocks fill every SM
  // while the shared expert's SwiGLU and W2 wait on their side stream (docs/benchmarks/cuda-ops.md, 24th session).
  // =shared runs the shared expert as one more slot of the launch (none on a side stream): level with the chain,
  // until the chain lost two launches on its critical path, ~6 us slower since (25th session).
  const bool fp8_experts_here = !L.experts_mxfp4.defined() && L.experts_w13.type == WeightType::FP8 &&
                                L.experts_w2.type == WeightType::FP8;
  const bool sim = num.act_fp8 && L.experts_w13.act_quant;
  cuda::MoeFp8OneTokenArgs f;
  bool one_launch = false;
  if (T == 1 && one_launch_experts_ && fp8_experts_here) {
    f.w13 = fp8_experts(L.experts_w13.view(), 2 * I, D);
    f.w2 = fp8_experts(L.experts_w2.view(), D, I);
    f.D = D;
    f.I = I;
    f.K = K;
    f.x = x;
    f.chosen = chosen_;
    f.weight = route_w_;
    f.limit = limit;
    f.act_fp8 = sim;
    f.act = act_;
    f.y = ye_;
    f.row_of_slot = row_of_slot_;
    f.barrier = moe_barrier_.data();
    const GemmView s13 = L.shared_w13.view(), s2 = L.shared_w2.view();
    // The shared expert inside only where the launch computes what linear() would: its shapes, FP8, and the
    // same activation numerics as the routed experts.
    if (one_launch_shared_ && s13.type == WeightType::FP8 && s2.type == WeightType::FP8 && s13.N == 2 * I &&
        s13.K == D && s2.N == D && s2.K == I && (num.act_fp8 && s13.act_quant) == sim &&
        (num.act_fp8 && s2.act_quant) == sim) {
      f.shared_w13 = fp8_experts(s13, 2 * I, D);
      f.shared_w2 = fp8_experts(s2, D, I);
      f.shared_out = out;
    }
    if (!cuda::moe_fp8_one_token_fits(f)) f.shared_out = nullptr;
    one_launch = cuda::moe_fp8_one_token_fits(f);
  }
  const bool shared_inside = one_launch && f.shared_out;
  // At one token the shared expert's GEMVs, running beside the router and the routing glue (a chain of small
  // latency-bound launches), delayed them; forked after the glue they overlap W13 instead: V4-Flash layer
  // 138.7 vs 141.9 us at batch 1, but 205.3 vs 203.2 at batch 8, where W13 moves more bytes (device-ab, same call).
  const bool after_glue = par && T == 1 && shared_after_glue_ && L.experts_mxfp4.defined();
  if (!after_glue && !shared_inside) shared();
  linear(L.gate.view(), x, T, D, gate_logits_, E, false, /*fp32_input=*/true);
  cuda::RouteLogits route;
  route.logits = gate_logits_;
  route.T = T;
  route.E = E;
  route.K = K;
  route.func = c.scoring_func == "sqrtsoftplus" ? 0 : c.scoring_func == "sigmoid" ? 1 : 2;
  route.bias = spec.hash_moe ? nullptr : L.gate_bias.data();
  route.tid2eid = spec.hash_moe ? L.tid2eid.data() : nullptr;
  route.token_ids = b.tok_id;
  route.norm_topk = c.norm_topk_prob;
  route.route_scale = float(c.routed_scaling_factor);
  route.chosen = chosen_;
  route.weight = route_w_;
  // A decode step's MXFP4 experts route inside the glue launch that gathers their rows (one launch fewer on the
  // critical path); otherwise the router's own kernel.
  const bool glue_routes = L.experts_mxfp4.defined() && T <= cuda::moe_route_logits_max_tokens() &&
                           TK <= cuda::moe_route_gather_max_slots();
  if (!glue_routes)
    MOESERVE_CUDA_CHECK(cuda::moe_route(route.logits, T, E, K, route.func, route.bias, route.tid2eid, route.token_ids,
                                        route.norm_topk, route.route_scale, chosen_, route_w_, st));
  if (L.experts_mxfp4.defined()) {
    moe_mxfp4(L.experts_mxfp4, T, K, limit, x, glue_routes ? &route : nullptr,
              after_glue ? std::function<void()>(shared) : nullptr);
    if (par) join(0);
    if (combine) MOESERVE_CUDA_CHECK(cuda::moe_combine(ye_, D, row_of_slot_, T, K, out, st));
    return;
  }
  const GemmView w13 = L.experts_w13.view(), w2 = L.experts_w2.view();
  if (one_launch) {
    MOESERVE_CUDA_CHECK(cuda::moe_fp8_one_token(f, st));
    if (par && !shared_inside) join(0);
    if (combine) MOESERVE_CUDA_CHECK(cuda::moe_combine(ye_, D, row_of_slot_, T, K, out, st));
    return;
  }
  // Routed experts, grouped by expert.
  int* ge = groups_;
  int* go = groups_ + E;
  int* gc = groups_ + 2 * E;
  int* ng = groups_ + 3 * E;
  MOESERVE_CUDA_CHECK(cuda::moe_group(chosen_, route_w_, T, K, E, nullptr, ge, go, gc, ng, row_of_slot_,
                                      token_of_row_, weight_of_row_, st));
  const bool large = !options_.exact && TK > kSkinnyRows * E;
  // Distinct experts per token (top-k, or a hash table checked at load): an expert has at most T rows.
  const int max_rows = spec.hash_moe && !L.tid2eid_distinct ? TK : T;
  // One row per expert (batch 1) stays on the streaming GEMV: faster than the tensor-core path there (V4-Flash
  // routed MoE 58.8 vs 62.5 us, docs/benchmarks/cuda-ops.md sixteenth session) and exact in its products.
  if (!large && !options_.exact && skinny_experts_ && sim && max_rows > 1 && w13.type == WeightType::FP8 &&
      w13.blk_scale && w2.blk_scale && cuda::gemm_fp8_skinny_fits(max_rows, 2 * I, D) &&
      cuda::gemm_fp8_skinny_fits(max_rows, D, I)) {
    // FP8 experts at up to 64 rows each: the tensor-core skinny GEMM over the routing's groups (rows gathered in
    // group order, quantized as the checkpoint does; ye_ holds the gathered rows until W2 writes it).
    auto* xq = static_cast<uint8_t*>(bufs_[107].get(size_t(TK) * std::max(D, I), &generation_));
    auto* xs = static_cast<float*>(bufs_[108].get(size_t(TK) * (std::max(D, I) / 128) * 4, &generation_));
    const int slots = std::min(E, TK);
    MOESERVE_CUDA_CHECK(cuda::gather_rows(x, D, token_of_row_, TK, ye_, st));
    MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(ye_, TK, D, D, xq, xs, st));
    MOESERVE_CUDA_CHECK(cuda::gemm_fp8_skinny_grouped(
        xq, xs, TK, TK, max_rows, static_cast<const uint8_t*>(w13.w), w13.blk_scale, w13.blk_ld,
        size_t(2 * I / 128) * w13.blk_ld, E, 2 * I, D, ge, go, gc, ng, slots, h13_, 2 * I, st));
    MOESERVE_CUDA_CHECK(cuda::swiglu(h13_, TK, nullptr, I, limit, weight_of_row_, act_, st));
    MOESERVE_CUDA_CHECK(cuda::act_quant_fp8(act_, TK, I, I, xq, xs, st));
    MOESERVE_CUDA_CHECK(cuda::gemm_fp8_skinny_grouped(
        xq, xs, TK, TK, max_rows, static_cast<const uint8_t*>(w2.w), w2.blk_scale, w2.blk_ld,
        size_t(D / 128) * w2.blk_ld, E, D, I, ge, go, gc, ng, slots, ye_, D, st));
  } else if (!large) {
    cuda::GemvArgs a;
    set_weights(a, w13, 2 * I, D);
    a.x = x;
    a.ldx = D;
    a.y = h13_;
    a.ldy = 2 * I;
    a.problems = std::min(E, TK);
    a.group_expert = ge;
    a.group_offset = go;
    a.group_count = gc;
    a.num_groups = ng;
    a.x_rows = token_of_row_;
    a.max_group_rows = max_rows == T ? T : 0;  // 0: any count (a hash table with repeated experts)
    // Asked once the groups are set (one row each fuses the simulation; before, the check saw an ungrouped M = 0
    // and every one-token step paid a separate simulation launch on its critical path).
    a.act_fp8 = sim && cuda::gemv_fuses_act_fp8(a);
    if (sim && !a.act_fp8) {
      MOESERVE_CUDA_CHECK(cuda::fp8_block_sim_to(x, D, xe_, D, T, D, 128, st));
      a.x = xe_;
    }
    MOESERVE_CUDA_CHECK(cuda::gemv(a, st));
    MOESERVE_CUDA_CHECK(cuda::swiglu(h13_, TK, nullptr, I, limit, weight_of_row_, act_, st));
    cuda::GemvArgs a2 = a;  // the same groups
    set_weights(a2, w2, D, I);
    a2.x = act_;
    a2.ldx = I;
    a2.y = ye_;
    a2.ldy = D;
    a2.x_rows = nullptr;
    a2.act_fp8 = sim && cuda::gemv_fuses_act_fp8(a2);
    if (sim && !a2.act_fp8) MOESERVE_CUDA_CHECK(cuda::fp8_block_sim(act_, TK, I, I, 128, st));
    MOESERVE_CUDA_CHECK(cuda::gemv(a2, st));
  } else {
    // Many rows per expert (prefill): per-expert GEMMs on gathered rows; needs the groups on the host.
    std::vector<int> host(size_t(3 * E + 1));
    cuda::copy_to_host(host.data(), groups_, host.size() * sizeof(int), st, "MoE groups");
    const int groups = host[size_t(3 * E)];
    for (int g = 0; g < groups; ++g) {
      const int e = host[size_t(g)], off = host[size_t(E + g)], cnt = host[size_t(2 * E + g)];
      for (int r0 = 0; r0 < cnt; r0 += T) {
        const int n = std::min(T, cnt - r0);
        MOESERVE_CUDA_CHECK(cuda::gather_rows(x, D, token_of_row_ + off + r0, n, xe_, st));
        linear(L.experts_w13.view(e), xe_, n, D, h13_ + size_t(off + r0) * 2 * I, 2 * I, true);
      }
    }
    MOESERVE_CUDA_CHECK(cuda::swiglu(h13_, TK, nullptr, I, limit, weight_of_row_, act_, st));
    for (int g = 0; g < groups; ++g) {
      const int e = host[size_t(g)], off = host[size_t(E + g)], cnt = host[size_t(2 * E + g)];
      linear(L.experts_w2.view(e), act_ + size_t(off) * I, cnt, I, ye_ + size_t(off) * D, D, true);
    }
  }
  if (par) join(0);
  if (combine) MOESERVE_CUDA_CHECK(cuda::moe_combine(ye_, D, row_of_slot_, T, K, out, st));
}

// The decode MoE chain's W2 prefetch budget: well under the L2 (tens of MB on Hopper) that W13's own stages also
// pass through.
constexpr size_t kMoePrefetchBudget = size_t(16) << 20;

// Routed experts kept MXFP4 (into ye_; moe() combines): the W4A8 chain of kernels/cuda/moe_w4a8.h in the contiguous layout (its launch
// shape does not depend on the routing, so decode graphs capture it). FP8 activations with per-128
// power-of-two scales from the fp32 activations, fp32 GEMM outputs, no bf16 rounding: the checkpoint numerics
// of the reference engine, up to summation order and the tensor cores' accumulation inside each 128-k group.
void GpuModel::moe_mxfp4(const GpuMxfp4Experts& ex, int T, int K, float limit, const float* x,
                         const cuda::RouteLogits* route, const std::function<void()>& after_glue) {
  cudaStream_t st = stream();
  const int TK = T * K, E = ex.E, D = ex.D, I = ex.I;
  const int sa_ld = (TK + 3) / 4 * 4;
  const cuda::MoeW4A8Weights w13 = ex.w13_view(), w2 = ex.w2_view();
  // A decode step's chain: W13's CTAs ask L2 for W2's first stages of their experts' rows once their own loads are
  // issued (the HBM is idle through W13's tail and the SwiGLU launch), and W2 schedules and loads those stages
  // before pdl_wait (its counts come from the routing glue, which finished before W13 started).
  cuda::MoeW4A8Chain c13, c2;
  c13.item_counter = c2.item_counter = w4a8_item_counter_.size() ? w4a8_item_counter_.data() : nullptr;
  const bool decode = TK <= cuda::moe_route_gather_max_slots();
  if (decode && options_.moe_chain) {
    c13.prefetch_next = &w2;
    c13.prefix_bytes = cuda::moe_w4a8_prefetch_prefix(w2.N, w2.K, TK, kMoePrefetchBudget);
    c2.counts_settled = true;
  }
  if (route && decode && options_.moe_chain && w13_settled_ids_) {
    // The router's choice in a launch of its own, then routing rows + gather: W13 counts the choice itself (it is
    // two launches back, settled) and schedules and loads its first weight stages while the gather runs.
    MOESERVE_CUDA_CHECK(cuda::moe_route(route->logits, T, E, K, route->func, route->bias, route->tid2eid,
                                        route->token_ids, route->norm_topk, route->route_scale, route->chosen,
                                        route->weight, st));
    MOESERVE_CUDA_CHECK(cuda::moe_route_gather_quant_f32(route->chosen, T, K, E, x, D, w4_counts_, row_of_slot_,
                                                         w4_slot_of_row_, w4_a_, w4_sa_, sa_ld, st));
    c13.settled_ids = route->chosen;
  } else if (route) {  // the router's choice, routing rows and the gather in one launch
    MOESERVE_CUDA_CHECK(cuda::moe_route_logits_gather_quant_f32(*route, x, D, w4_counts_, row_of_slot_,
                                                                w4_slot_of_row_, w4_a_, w4_sa_, sa_ld, st));
  } else if (decode) {  // routing rows and the gather in one launch
    MOESERVE_CUDA_CHECK(cuda::moe_route_gather_quant_f32(chosen_, T, K, E, x, D, w4_counts_, row_of_slot_,
                                                         w4_slot_of_row_, w4_a_, w4_sa_, sa_ld, st));
  } else {
    MOESERVE_CUDA_CHECK(cuda::moe_route_rows(chosen_, T, K, E, 0, w4_counts_, row_of_slot_, w4_slot_of_row_, w4_work_,
                                             cuda::moe_route_rows_workspace(T, K, E), st));
    MOESERVE_CUDA_CHECK(cuda::moe_gather_quant_f32(x, D, w4_slot_of_row_, TK, K, w4_a_, w4_sa_, sa_ld, st));
  }
  if (after_glue) after_glue();
  int cfg13 = decode ? w4a8_decode_cfg_[0] : -1, cfg2 = decode ? w4a8_decode_cfg_[1] : -1;
  if (!w4a8_split_) {  // an explicit config runs without the table's split
    if (cfg13 < 0) cfg13 = cuda::moe_w4a8_pick_config(E, w13.N, w13.K, TK);
    if (cfg2 < 0) cfg2 = cuda::moe_w4a8_pick_config(E, w2.N, w2.K, TK);
  }
  MOESERVE_CUDA_CHECK(cuda::moe_grouped_gemm_w4a8_contiguous(w13, {w4_a_, w4_sa_, TK, sa_ld}, w4_counts_, h13_,
                                                             cuda::MoeOutType::F32, TK, cfg13, st, c13));
  MOESERVE_CUDA_CHECK(
      cuda::moe_swiglu_quant_f32(h13_, I, w4_slot_of_row_, TK, route_w_, limit, w4_a_, w4_sa_, sa_ld, st));
  MOESERVE_CUDA_CHECK(cuda::moe_grouped_gemm_w4a8_contiguous(w2, {w4_a_, w4_sa_, TK, sa_ld}, w4_counts_, ye_,
                                                             cuda::MoeOutType::F32, TK, cfg2, st, c2));
}

// Decode-sized steps fuse each hc_post with the following hc_mix_partial (the next sublayer's, or the next
// layer's attention mix), so layer l > 0 starts from the partials the previous layer left.
bool GpuModel::fuse_hc(int T) const { return T <= kSkinnyRows && config_.hc_mult == 4; }

void GpuModel::block(GpuKvCache& cache, const Plan& p, int l) {
  const io::ModelConfig& c = config_;
  const GpuLayer& L = weights_.layers[size_t(l)];
  cudaStream_t st = stream();
  const int T = p.T, D = int(c.hidden_size), hc = int(c.hc_mult), mix = int(c.hc_mix());
  const float eps = float(c.rms_norm_eps), hc_eps = float(c.hc_eps);
  const bool fuse = fuse_hc(T), last = l + 1 == int(c.num_layers);
  const int mix_splits = cuda::hc_mix_splits(hc * D, T);
  const int splits = fuse ? cuda::hc_post_mix_splits(hc, D) : mix_splits;
  // The attention mix: from the previous layer's fused post when there is one, else a pass of its own.
  const bool own_mix = !fuse || l == 0;
  if (own_mix)
    MOESERVE_CUDA_CHECK(cuda::hc_mix_partial(h_, T, hc * D, L.hc_attn_fn.data(), mix, mix_splits, partial_, st));
  const int attn_splits = own_mix ? mix_splits : splits;
  // hc_pre: at decode sizes the post weights and the Sinkhorn mix (one warp's ~20 dependent iterations) run on
  // a side stream through the sublayer, which only needs the collapsed row; joined before hc_post reads them.
  const bool side_mix = branches(T);
  auto pre_finish = [&](int n_splits, const float* base, const float* scale, const float* norm) {
    auto run = [&](cudaStream_t s, cuda::HcFinishPart part) {
      MOESERVE_CUDA_CHECK(cuda::hc_pre_finish(partial_, n_splits, h_, T, hc, D, mix, base, scale,
                                              int(c.hc_sinkhorn_iters), hc_eps, eps, norm, x_, post_, comb_, s, part));
    };
    if (!side_mix) return run(st, cuda::HcFinishPart::All);
    fork(kMixSide);
    run(cur(), cuda::HcFinishPart::Mix);
    to_main();
    run(st, cuda::HcFinishPart::Collapse);
  };
  pre_finish(attn_splits, L.hc_attn_base.data(), L.hc_attn_scale.data(), L.attn_norm.data());
  attention(cache, p, l, x_, out_);
  if (side_mix) join(kMixSide);
  if (fuse) {
    MOESERVE_CUDA_CHECK(cuda::hc_post_mix(h_, T, hc, D, out_, post_, comb_, L.hc_ffn_fn.data(), mix, partial_, st));
  } else {
    MOESERVE_CUDA_CHECK(cuda::hc_post(h_, T, hc, D, out_, post_, comb_, st));
    MOESERVE_CUDA_CHECK(cuda::hc_mix_partial(h_, T, hc * D, L.hc_ffn_fn.data(), mix, splits, partial_, st));
  }
  pre_finish(splits, L.hc_ffn_base.data(), L.hc_ffn_scale.data(), L.ffn_norm.data());
  // Into the fused post, the routed experts' rows are added by hc_post_mix itself (no combine launch).
  const bool post_adds = fuse && !last;
  moe(p, l, x_, out_, /*combine=*/!post_adds);
  if (side_mix) join(kMixSide);
  if (post_adds)
    MOESERVE_CUDA_CHECK(cuda::hc_post_mix(h_, T, hc, D, out_, post_, comb_,
                                          weights_.layers[size_t(l) + 1].hc_attn_fn.data(), mix, partial_, st,
                                          {ye_, row_of_slot_, int(c.experts_per_token)}));
  else
    MOESERVE_CUDA_CHECK(cuda::hc_post(h_, T, hc, D, out_, post_, comb_, st));
}

void GpuModel::run(GpuKvCache& cache, const Plan& p) {
  const io::ModelConfig& c = config_;
  cudaStream_t st = stream();
  const cuda::BatchDesc b = batch_desc(p);
  const int D = int(c.hidden_size), hc = int(c.hc_mult);
  MOESERVE_CUDA_CHECK(cuda::embed_gather(weights_.embed.data(), weights_.embed_bf16, D, b.tok_id, p.T, hc, h_, st));
  for (int l = 0; l < int(c.num_layers); ++l) block(cache, p, l);
  const int* rows = b.page_table + size_t(p.S) * p.page_ld;
  MOESERVE_CUDA_CHECK(cuda::gather_rows(h_, hc * D, rows, p.R, sel_, st));
  const int splits = cuda::hc_mix_splits(hc * D);
  MOESERVE_CUDA_CHECK(cuda::hc_mix_partial(sel_, p.R, hc * D, weights_.hc_head_fn.data(), hc, splits, partial_, st));
  MOESERVE_CUDA_CHECK(cuda::hc_pre_finish(partial_, splits, sel_, p.R, hc, D, hc, weights_.hc_head_base.data(),
                                          weights_.hc_head_scale.data(), 0, float(c.hc_eps), float(c.rms_norm_eps),
                                          weights_.norm.data(), xr_, nullptr, nullptr, st));
  linear(weights_.head.view(), xr_, p.R, D, logits_, int(c.vocab_size), true, /*fp32_input=*/true);
  rows_ = p.R;
}

void GpuModel::forward_async(GpuKvCache& cache, const std::vector<ForwardRequest>& requests,
                             std::vector<int64_t>* first_row, std::vector<int64_t>* row_count, bool use_graph,
                             int64_t max_len) {
  bool decode = use_graph && max_len > 0;
  for (const ForwardRequest& r : requests) decode &= r.tokens.size() == 1;
  Plan plan;
  if (!decode) {
    stage(cache, requests, &plan, first_row, row_count);
    run(cache, plan);
    return;
  }
  const int B = int(requests.size());
  plan.page_ld = int(cache.host().pages_for(max_len));
  plan.max_pos = int(max_len - 1);
  stage(cache, requests, &plan, first_row, row_count);
  auto it = graphs_.find(B);
  if (it != graphs_.end() && it->second.generation == generation_ && it->second.page_ld == plan.page_ld &&
      it->second.max_pos == plan.max_pos) {
    MOESERVE_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream()));
    rows_ = plan.R;
    return;
  }
  // Eager step (also the warm-up: every buffer and cuBLASLt plan exists after it), then capture for later steps.
  run(cache, plan);
  const uint64_t before = generation_;
  cudaGraph_t graph = nullptr;
  MOESERVE_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  try {
    run(cache, plan);
  } catch (...) {
    cudaStreamEndCapture(stream(), &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  MOESERVE_CUDA_CHECK(cudaStreamEndCapture(stream(), &graph));
  if (generation_ != before) {  // a buffer moved during capture: do not keep it
    cudaGraphDestroy(graph);
    return;
  }
  cudaGraphExec_t exec = nullptr;
  // Node priorities as captured (the main stream's kernels ahead of the side branches').
  MOESERVE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority));
  cudaGraphDestroy(graph);
  Graph& g = graphs_[B];
  if (g.exec) cudaGraphExecDestroy(g.exec);
  g.exec = exec;
  g.page_ld = plan.page_ld;
  g.max_pos = plan.max_pos;
  g.generation = generation_;
}

void GpuModel::sample_on_device(int rows, cuda::SampleSteps steps, bool use_graph) {
  const int vocab = int(config_.vocab_size);
  auto enqueue = [&] {
    return cuda::sample_rows(logits_, rows, vocab, sample_rows_.data(), sample_tokens_.data(), nullptr,
                             sample_work_.data(), stream(), steps);
  };
  if (!use_graph) {
    MOESERVE_CUDA_CHECK(enqueue());
    return;
  }
  const void* buffers[4] = {logits_, sample_rows_.data(), sample_tokens_.data(), sample_work_.data()};
  if (!std::equal(buffers, buffers + 4, sample_graph_buffers_)) {
    for (auto& [k, exec] : sample_graphs_) cudaGraphExecDestroy(exec);
    sample_graphs_.clear();
    std::copy(buffers, buffers + 4, sample_graph_buffers_);
  }
  const int key = rows * 8 + (steps.draw ? 4 : 0) + (steps.top_k ? 2 : 0) + (steps.top_p ? 1 : 0);
  cudaGraphExec_t& exec = sample_graphs_[key];
  if (!exec) {
    cudaGraph_t graph;
    MOESERVE_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
    const cudaError_t launched = enqueue();
    MOESERVE_CUDA_CHECK(cudaStreamEndCapture(stream(), &graph));  // ends the capture before any error is raised
    if (launched != cudaSuccess) cudaGraphDestroy(graph);
    MOESERVE_CUDA_CHECK(launched);
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) exec = nullptr;
    MOESERVE_CUDA_CHECK(e);
  }
  MOESERVE_CUDA_CHECK(cudaGraphLaunch(exec, stream()));
}

ForwardResult GpuModel::forward(GpuKvCache& cache, const std::vector<ForwardRequest>& requests,
                                int64_t graph_max_len) {
  ForwardResult result;
  forward_async(cache, requests, &result.first_row, &result.row_count, graph_max_len > 0, graph_max_len);
  const int64_t vocab = config_.vocab_size;
  const bool sample = std::any_of(requests.begin(), requests.end(), [](const ForwardRequest& r) { return r.sample; });
  if (!sample) {
    result.logits = Tensor::empty(DType::F32, {rows_, vocab});
    cuda::copy_to_host(result.logits.f32(), logits_, size_t(rows_ * vocab) * sizeof(float), stream(), "logits");
    return result;
  }
  // Every row is drawn from (rows of requests that did not ask: greedily, and unread); only the tokens come
  // back, not rows x vocab logits.
  std::vector<cuda::SampleRow> rows(static_cast<size_t>(rows_));
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!requests[i].sample) continue;
    const RowSampling& s = requests[i].sampling;
    cuda::SampleRow& row = rows[size_t(result.first_row[i] + result.row_count[i] - 1)];
    row.u = s.u;
    row.temperature = s.temperature;
    row.top_p = s.top_p;
    row.top_k = int(std::clamp<int64_t>(s.top_k, 0, vocab));  // >= vocab: off
  }
  if (sample_rows_.size() < rows.size()) {
    sample_rows_ = cuda::DeviceArray<cuda::SampleRow>(rows.size(), "sampling settings");
    sample_tokens_ = cuda::DeviceArray<int>(rows.size(), "sampled tokens");
    sample_work_ = cuda::DeviceBuffer(cuda::sample_work_bytes(int(rows.size()), int(vocab)), "sampling work");
  }
  sample_rows_.upload(std::span<const cuda::SampleRow>(rows), stream());
  sample_on_device(int(rows_), cuda::sample_steps(rows.data(), rows.size()), graph_max_len > 0);
  const std::vector<int> tokens = sample_tokens_.download(stream());
  result.tokens.assign(requests.size(), -1);
  for (size_t i = 0; i < requests.size(); ++i)
    if (requests[i].sample) result.tokens[i] = tokens[size_t(result.first_row[i] + result.row_count[i] - 1)];
  return result;
}

}  // namespace moeserve::model
#endif
