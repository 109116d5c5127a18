// GpuModel's MoE sublayer: routing, the shared expert, routed BF16/FP8 experts and MXFP4 experts on the W4A8 chain.
#if MOESERVE_WITH_CUDA
#include "model/gpu_model.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/device.h"
#include "kernels/cuda/moe_fp8_one_token.h"
#include "model/gpu_model_internal.h"

namespace moeserve::model {

namespace {

using cuda::WeightType;

// Stacked FP8 experts of N x K as set_weights lays them out, for the one-launch MoE.
cuda::Fp8ExpertWeights fp8_experts(const GemmView& v, int N, int K) {
  cuda::GemvArgs a;
  set_weights(a, v, N, K);
  return {a.w, a.row_scale, a.scale_ld, a.scale_row_shift, a.w_stride, a.scale_stride};
}

}  // namespace

std::string w4a8_table_notice(const std::string& gpu, int E, int D, int I, bool* warn) {
  *warn = false;
  if (cuda::moe_w4a8_table_has(gpu.c_str(), E, 2 * I, D) && cuda::moe_w4a8_table_has(gpu.c_str(), E, D, I)) return "";
  std::string tuned;
  for (const std::string& other : cuda::moe_w4a8_table_gpus())
    if (other != gpu && cuda::moe_w4a8_table_has(other.c_str(), E, 2 * I, D) &&
        cuda::moe_w4a8_table_has(other.c_str(), E, D, I))
      tuned += (tuned.empty() ? "" : ", ") + other;
  *warn = !tuned.empty();
  std::string text = "W4A8 MoE GEMMs (E " + std::to_string(E) + ", W13 " + std::to_string(2 * I) + " x " +
                     std::to_string(D) + ", W2 " + std::to_string(D) + " x " + std::to_string(I) +
                     "): the dispatch table has no entries for this GPU ('" + gpu + "') at these shapes, so they " +
                     "take the heuristic's tile configs";
  if (*warn) text += ", which may be slower (tuned on: " + tuned + "; scripts/device-w4a8-tune.sh tunes a GPU)";
  return text;
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
  // The shared expert forks before the router, so that its w13 streams beside the router's chain of small
  // launches. Forking a one-token step's after the routing glue (MOESERVE_SHARED_AT=glue), where it overlaps W13
  // instead, was the default until the seventieth session: with the router's later changes and W2 launched early
  // (which the fork after the glue turns off) the fork before the router measured 3.3-4.1 us faster in the V4-Flash
  // MXFP4 layer at batch 1, level at 8 (two H100s; docs/benchmarks/cuda-ops.md, seventieth section).
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
  // W2 (settled) launched while SwiGLU waits for W13, so that its CTAs take the SMs W13's early finishers free and
  // load their first weight stages there: the V4-Flash layer 4.9 us faster at batch 8, 4.1 at 32 (H100). Not while
  // the shared expert forked after the glue (MOESERVE_SHARED_AT=glue) still needs those SMs beside W13 (one token:
  // 6.5 us slower with it).
  const bool w2_early = c2.counts_settled && (w2_early_ == W2Early::Always ||
                                               (w2_early_ == W2Early::UnlessSharedAfterGlue && !after_glue));
  MOESERVE_CUDA_CHECK(cuda::moe_swiglu_quant_f32(h13_, I, w4_slot_of_row_, TK, route_w_, limit, w4_a_, w4_sa_, sa_ld,
                                                 st, w2_early));
  MOESERVE_CUDA_CHECK(cuda::moe_grouped_gemm_w4a8_contiguous(w2, {w4_a_, w4_sa_, TK, sa_ld}, w4_counts_, ye_,
                                                             cuda::MoeOutType::F32, TK, cfg2, st, c2));
}

}  // namespace moeserve::model
#endif
