#if MOESERVE_WITH_CUDA
#include "model/gpu_model.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/cuda/device.h"
#include "model/gpu_model_internal.h"

namespace moeserve::model {

namespace {

using cuda::DeviceArray;
using cuda::WeightType;

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
  if (env_is("MOESERVE_BRANCHES", "0")) options_.concurrent_branches = false;
  if (env_is("MOESERVE_MOE_CHAIN", "0")) options_.moe_chain = false;
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
  if (!env_is("MOESERVE_W4A8_DYNAMIC", "0")) {
    w4a8_item_counter_ = DeviceArray<int>(1, "W4A8 work item counter");
    w4a8_item_counter_.fill_bytes(0);
  }
  // The fp32 attention kernel's key splits combine themselves on these counters (AttentionArgs::arrivals): enough
  // for 256 tokens at 4 heads a block, the decode steps it serves; each launch leaves them at 0.
  // MOESERVE_ATTN_SELF_COMBINE=0: the combine launch, for A/B runs.
  if (!env_is("MOESERVE_ATTN_SELF_COMBINE", "0")) {
    attn_arrivals_ = DeviceArray<int>(size_t(256) * std::max<int64_t>(1, config_.num_heads / 4), "attention arrivals");
    attn_arrivals_.fill_bytes(0);
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
  if (env_is("MOESERVE_LT_SYNC", "1")) lt_sync_ = true;
  if (env_is("MOESERVE_W13_SETTLED_IDS", "0")) w13_settled_ids_ = false;
  if (const char* e = std::getenv("MOESERVE_W2_EARLY")) {
    const std::string v = e;
    check(v == "0" || v == "1" || v == "always", "MOESERVE_W2_EARLY='{}': expected 0, 1 or always", v);
    w2_early_ = v == "0" ? W2Early::Never : v == "1" ? W2Early::UnlessSharedAfterGlue : W2Early::Always;
  }
  // MOESERVE_W4A8_SPLIT=0: the W4A8 GEMMs without the dispatch table's splits by expert load (for A/B timing).
  if (env_is("MOESERVE_W4A8_SPLIT", "0")) w4a8_split_ = false;
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
  if (env_is("MOESERVE_FP8_LT", "0")) fp8_lt_ = false;
  // MOESERVE_EXACT_SKINNY=0: with exact kernels, every linear takes the fp32 GEMV (A/B runs; see linear()).
  if (env_is("MOESERVE_EXACT_SKINNY", "0")) exact_skinny_ = false;
  if (const char* e = std::getenv("MOESERVE_IDX_BF16_MIN_T")) idx_bf16_min_t_ = std::max(1, std::atoi(e));
  MOESERVE_CUDA_CHECK(cudaEventCreateWithFlags(&branch_ev_, cudaEventDisableTiming));
  for (const GpuLayer& layer : weights_.layers) {
    if (!layer.experts_mxfp4.defined()) continue;
    const GpuMxfp4Experts& ex = layer.experts_mxfp4;
    bool warn = false;
    const std::string notice = w4a8_table_notice(cuda::device_info().name, ex.E, ex.D, ex.I, &warn);
    if (warn) spdlog::warn("{}", notice);
    else if (!notice.empty()) spdlog::debug("{}", notice);
    break;  // every layer's routed experts have the same shape
  }
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
