#include "planner/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "planner/units.h"

namespace moeserve::planner {

using nlohmann::json;

namespace {

std::string speculative_text(const SpeculativeSpec& s) {
  if (!s.enabled()) return "off";
  return fmt::format("mtp ({} steps, topk {}, {} draft tokens)", s.num_steps, s.topk, s.num_draft_tokens);
}

std::string layout_text(const CapacityPlan& plan) {
  const ParallelSpec& s = plan.layout.spec;
  std::string text = fmt::format("{} {}: pp {} x attention (tp {}, dp {}, cp {}) = moe (tp {}, ep {}", s.world_size(),
                                 plan.device.is_cpu ? "rank(s)" : "GPU(s)", s.pp, s.attn_tp, s.attn_dp, s.attn_cp,
                                 s.moe_tp, s.moe_ep);
  if (s.redundant_experts) text += fmt::format(", +{} redundant experts", s.redundant_experts);
  text += fmt::format("); vocab split {}", s.vocab_parallel);
  return text;
}

std::string stage_text(const StageMap& m) {
  std::string text = fmt::format("layers {}-{}", m.first_layer, m.first_layer + m.num_layers - 1);
  if (m.has_embedding) text += " + embedding";
  if (m.has_head) text += " + head";
  if (m.has_mtp) text += " + MTP";
  return text;
}

struct Table {
  std::string out;
  void line(const std::string& label, int64_t bytes, const std::string& note = "") {
    std::string row = fmt::format("  {:<44} {:>18} {:>10.2f}  {}", label, format_count(bytes),
                                  double(bytes) / double(1LL << 30), note);
    row.erase(row.find_last_not_of(' ') + 1);
    out += row + "\n";
  }
};

std::string graph_sizes(const std::vector<int64_t>& sizes) {
  return sizes.empty() ? "none" : fmt::format("{}", fmt::join(sizes, ","));
}

}  // namespace

std::string format_plan_text(const CapacityPlan& plan) {
  const Profile& p = plan.profile;
  const StagePlan& s = plan.stage(plan.binding_stage);
  std::string out;
  out += fmt::format("moeserve plan: {} on {} ({}, {} per device), profile {}\n", plan.model_name, plan.device.name,
                     plan.device.display_name, format_gib(plan.device.memory_bytes), p.name);
  out += fmt::format("  layout      {}\n", layout_text(plan));
  out += fmt::format("  formats     weights {}, KV {} ({} B per KV entry, {} B per index key), C128 {}\n",
                     weight_format_name(p.weights), kv_format_name(p.kv_format),
                     kv_entry_bytes(plan.config, p.kv_format), indexer_key_bytes(plan.config, p.kv_format),
                     c128_mode_name(p.c128));
  out += fmt::format("  decoding    speculative {}; {} request slots per rank; CUDA graphs bs {}\n",
                     speculative_text(p.speculative), plan.slots, graph_sizes(p.cuda_graph_batch_sizes));
  out += fmt::format("  prefill     chunk {} tokens ({} per rank); mem_fraction {:.2f}\n\n", p.chunked_prefill_size,
                     s.buffers.prefill_tokens, p.mem_fraction);

  if (plan.stages.size() > 1) {
    out += "per stage (every rank of a stage is alike; the fewest pages bind all stages)\n";
    out += fmt::format("  {:<5} {:<32} {:>12} {:>12} {:>12} {:>12}\n", "stage", "holds", "weights GiB", "buffers GiB",
                       "state GiB", "max pages");
    for (const StagePlan& st : plan.stages)
      out += fmt::format("  {:<5} {:<32} {:>12.2f} {:>12.2f} {:>12.2f} {:>12}{}\n", st.map.stage, stage_text(st.map),
                         double(st.weights.total_bytes) / double(1LL << 30),
                         double(st.buffers.total()) / double(1LL << 30),
                         double(st.fixed_state_bytes) / double(1LL << 30), format_count(st.max_pages),
                         st.map.stage == plan.binding_stage ? "  <- binds" : "");
    out += "\n";
  }

  Table t;
  t.out += fmt::format("memory per rank, stage {} ({})\n", s.map.stage, stage_text(s.map));
  t.out += fmt::format("  {:<44} {:>18} {:>10}\n", "", "bytes", "GiB");
  t.line(fmt::format("usable ({} x {:.2f})", format_gib(plan.device.memory_bytes), p.mem_fraction), s.usable_bytes);
  t.line("weights", s.weights.total_bytes, fmt::format("{:.2f}B params on this rank", double(s.weights.total_params) / 1e9));
  for (int k = 0; k < kWeightKinds; ++k)
    if (s.weights.bytes[size_t(k)])
      t.line(fmt::format("  {}", weight_kind_name(WeightKind(k))), s.weights.bytes[size_t(k)]);
  t.line("runtime buffers", s.buffers.total());
  t.line(fmt::format("  activations (prefill {} tokens)", s.buffers.prefill_tokens), s.buffers.activations.bytes,
         s.buffers.activations.peak_of.empty() ? "" : "peak in " + s.buffers.activations.peak_of);
  if (s.buffers.decode_tokens)
    t.line(fmt::format("  CUDA-graph pool (decode {} tokens)", s.buffers.decode_tokens), s.buffers.cuda_graphs.bytes,
           "peak in " + s.buffers.cuda_graphs.peak_of);
  t.line("  communication", s.buffers.communication.bytes);
  t.line(fmt::format("fixed state ({} slots x {})", plan.slots, format_bytes(s.slot_state.bytes_per_slot)),
         s.fixed_state_bytes);
  for (const StateItem& item : s.slot_state.items)
    t.line(fmt::format("  {}", item.name), plan.slots * item.bytes(),
           fmt::format("{} layer(s) x {} rows x {} B per slot", item.layers, item.rows, item.row_bytes));
  t.line(fmt::format("KV pools ({} pages x {} tokens)", format_count(s.pages), kPageTokens), s.kv_bytes,
         fmt::format("{} B per page", format_count(s.page_bytes)));
  for (const PoolPlan& pool : s.pools)
    t.line(fmt::format("  {}", pool.name), pool.bytes(),
           fmt::format("{} layers x {} entries x {} B per page", pool.layers.size(), pool.entries_per_page,
                       pool.entry_bytes));
  t.line("free", s.free_bytes);
  out += t.out;

  out += fmt::format("\nfull-token capacity per rank: {} tokens ({} pages; {:.1f} B per full token)\n",
                     format_count(plan.full_token_capacity_per_rank), format_count(plan.pages_per_rank),
                     s.bytes_per_full_token());
  out += fmt::format("SGLang's accounting, for comparison only (not ours): {:.1f} B per full token\n\n",
                     plan.sglang_bytes_per_full_token);

  out += fmt::format("max concurrency (per attention-DP rank; system = x {})\n", p.parallel.attn_dp);
  out += fmt::format("  {:>7} {:>14} {:>14} {:>11} {:>10}\n", "context", "pages/request", "requests/rank", "limited by",
                     "system");
  for (const ConcurrencyRow& row : plan.concurrency) {
    if (row.beyond_model_context) {
      out += fmt::format("  {:>7} {:>14} {:>14} {:>11} {:>10}\n", format_context(row.context_tokens),
                         row.pages_per_request, "-", "model ctx", "-");
      continue;
    }
    out += fmt::format("  {:>7} {:>14} {:>14} {:>11} {:>10}\n", format_context(row.context_tokens),
                       row.pages_per_request, format_count(row.requests_per_rank),
                       row.limited_by_slots ? "slots" : "KV", format_count(row.requests_total));
  }
  return out;
}

namespace {

json group_json(const BufferGroup& g, int64_t tokens) {
  json items = json::array();
  for (const auto& item : g.items) items.push_back({{"name", item.name}, {"bytes", item.bytes}, {"formula", item.formula}});
  json j = {{"bytes", g.bytes}, {"items", items}};
  if (tokens >= 0) j["tokens"] = tokens;
  if (!g.peak_of.empty()) j["peak_of"] = g.peak_of;
  return j;
}

json stage_json(const CapacityPlan& plan, const StagePlan& s) {
  json kinds = json::object();
  for (int k = 0; k < kWeightKinds; ++k)
    if (s.weights.bytes[size_t(k)])
      kinds[weight_kind_name(WeightKind(k))] = {{"bytes", s.weights.bytes[size_t(k)]},
                                                {"params", s.weights.params[size_t(k)]}};
  json state_items = json::array();
  for (const auto& item : s.slot_state.items)
    state_items.push_back({{"name", item.name},
                           {"layers", item.layers},
                           {"rows", item.rows},
                           {"row_bytes", item.row_bytes},
                           {"bytes_per_slot", item.bytes()}});
  json pools = json::array();
  for (const auto& pool : s.pools)
    pools.push_back({{"name", pool.name},
                     {"compress_ratio", pool.compress_ratio},
                     {"entry_bytes", pool.entry_bytes},
                     {"entries_per_page", pool.entries_per_page},
                     {"layers", pool.layers},
                     {"page_bytes", pool.page_bytes()},
                     {"pages", pool.pages},
                     {"bytes", pool.bytes()}});
  return {{"stage", s.map.stage},
          {"first_layer", s.map.first_layer},
          {"num_layers", s.map.num_layers},
          {"has_embedding", s.map.has_embedding},
          {"has_head", s.map.has_head},
          {"has_mtp", s.map.has_mtp},
          {"usable_bytes", s.usable_bytes},
          {"weights", {{"bytes", s.weights.total_bytes}, {"params", s.weights.total_params}, {"by_kind", kinds}}},
          {"runtime_buffers",
           {{"bytes", s.buffers.total()},
            {"activations", group_json(s.buffers.activations, s.buffers.prefill_tokens)},
            {"cuda_graphs", group_json(s.buffers.cuda_graphs, s.buffers.decode_tokens)},
            {"communication", group_json(s.buffers.communication, -1)}}},
          {"fixed_state",
           {{"slots", plan.slots},
            {"bytes_per_slot", s.slot_state.bytes_per_slot},
            {"bytes", s.fixed_state_bytes},
            {"items", state_items}}},
          {"kv_pools", pools},
          {"page_bytes", s.page_bytes},
          {"bytes_per_full_token", s.bytes_per_full_token()},
          {"max_pages", s.max_pages == INT64_MAX ? json(nullptr) : json(s.max_pages)},
          {"pages", s.pages},
          {"kv_bytes", s.kv_bytes},
          {"free_bytes", s.free_bytes}};
}

}  // namespace

json plan_to_json(const CapacityPlan& plan) {
  const Profile& p = plan.profile;
  const ParallelSpec& l = plan.layout.spec;
  json stages = json::array();
  for (const auto& s : plan.stages) stages.push_back(stage_json(plan, s));
  json concurrency = json::array();
  for (const auto& row : plan.concurrency)
    concurrency.push_back({{"context_tokens", row.context_tokens},
                           {"pages_per_request", row.pages_per_request},
                           {"requests_per_rank", row.requests_per_rank},
                           {"requests_total", row.requests_total},
                           {"limited_by", row.beyond_model_context ? "model_context"
                                          : row.limited_by_slots   ? "slots"
                                                                   : "kv"},
                           {"beyond_model_context", row.beyond_model_context}});
  json speculative = {{"method", p.speculative.enabled() ? "mtp" : "none"}};
  if (p.speculative.enabled()) {
    speculative["num_steps"] = p.speculative.num_steps;
    speculative["topk"] = p.speculative.topk;
    speculative["num_draft_tokens"] = p.speculative.num_draft_tokens;
  }
  return {{"model", plan.model_name},
          {"device", {{"name", plan.device.name}, {"memory_bytes", plan.device.memory_bytes}}},
          {"profile", p.name},
          {"layout",
           {{"world_size", l.world_size()},
            {"pp", l.pp},
            {"attention", {{"tp", l.attn_tp}, {"dp", l.attn_dp}, {"cp", l.attn_cp}}},
            {"moe", {{"tp", l.moe_tp}, {"ep", l.moe_ep}, {"redundant_experts", l.redundant_experts}}},
            {"vocab_parallel", l.vocab_parallel},
            {"experts_per_rank", plan.layout.experts_per_rank}}},
          {"weights_format", weight_format_name(p.weights)},
          {"kv_format", kv_format_name(p.kv_format)},
          {"kv_entry_bytes", kv_entry_bytes(plan.config, p.kv_format)},
          {"indexer_key_bytes", indexer_key_bytes(plan.config, p.kv_format)},
          {"c128", c128_mode_name(p.c128)},
          {"speculative", speculative},
          {"mem_fraction", p.mem_fraction},
          {"cuda_graph_batch_sizes", p.cuda_graph_batch_sizes},
          {"chunked_prefill_size", p.chunked_prefill_size},
          {"slots_per_rank", plan.slots},
          {"page_tokens", kPageTokens},
          {"pages_per_rank", plan.pages_per_rank},
          {"full_token_capacity_per_rank", plan.full_token_capacity_per_rank},
          {"binding_stage", plan.binding_stage},
          {"bytes_per_full_token", plan.stage(plan.binding_stage).bytes_per_full_token()},
          {"sglang_bytes_per_full_token", plan.sglang_bytes_per_full_token},
          {"stages", stages},
          {"concurrency", concurrency}};
}

}  // namespace moeserve::planner
