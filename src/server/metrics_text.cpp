#include "server/metrics_text.h"

#include <fmt/format.h>

namespace moeserve::server {

namespace {

std::string labels(const std::string& model, const std::string& extra = "") {
  return "{model_name=\"" + model + "\"" + (extra.empty() ? "" : "," + extra) + "}";
}

void gauge(std::string& out, const std::string& name, const std::string& help, const std::string& model, double v,
           const std::string& extra = "") {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0}{2} {3}\n", name, help, labels(model, extra), v);
}

void counter(std::string& out, const std::string& name, const std::string& help, const std::string& model, double v) {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0}{2} {3}\n", name, help, labels(model), v);
}

void histogram(std::string& out, const std::string& name, const std::string& help, const std::string& model,
               const engine::Histogram::Snapshot& h) {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
  for (size_t i = 0; i < h.bounds.size(); ++i)
    out += fmt::format("{}_bucket{} {}\n", name, labels(model, fmt::format("le=\"{}\"", h.bounds[i])), h.cumulative[i]);
  out += fmt::format("{}_bucket{} {}\n", name, labels(model, "le=\"+Inf\""), h.cumulative.back());
  out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, labels(model), h.sum, name, labels(model), h.count);
}

}  // namespace

std::string render_metrics(const engine::EngineStatus& s, const engine::EngineMetrics& m, const std::string& model) {
  std::string out;
  gauge(out, "moeserve_num_requests_running", "Requests in the running batch.", model, double(s.running));
  gauge(out, "moeserve_num_requests_waiting", "Requests waiting for a slot or KV pages.", model, double(s.waiting));
  gauge(out, "moeserve_request_slots_total", "Request slots (max running requests).", model, double(s.slots_total));
  gauge(out, "moeserve_request_slots_free", "Free request slots.", model, double(s.slots_free));
  out += "# HELP moeserve_kv_pages KV pages (256 tokens each) by pool and state.\n# TYPE moeserve_kv_pages gauge\n";
  // One page id covers the compressed-KV, indexer-key and HCA pools of its 256 tokens, so they move together.
  for (const char* pool : {"csa_kv", "csa_index", "hca_kv"}) {
    out += fmt::format("moeserve_kv_pages{} {}\n", labels(model, fmt::format("pool=\"{}\",state=\"used\"", pool)),
                       s.pages_total - s.pages_free);
    out += fmt::format("moeserve_kv_pages{} {}\n", labels(model, fmt::format("pool=\"{}\",state=\"free\"", pool)),
                       s.pages_free);
  }
  gauge(out, "moeserve_kv_cache_usage_perc", "Fraction of KV pages in use.", model,
        s.pages_total ? double(s.pages_total - s.pages_free) / double(s.pages_total) : 0.0);
  counter(out, "moeserve_prompt_tokens_total", "Prompt tokens received.", model, double(m.prompt_tokens.load()));
  counter(out, "moeserve_generation_tokens_total", "Tokens generated.", model, double(m.generation_tokens.load()));
  out += "# HELP moeserve_request_success_total Finished requests by finish reason.\n"
         "# TYPE moeserve_request_success_total counter\n";
  out += fmt::format("moeserve_request_success_total{} {}\n", labels(model, "finished_reason=\"stop\""),
                     m.requests_finished_stop.load());
  out += fmt::format("moeserve_request_success_total{} {}\n", labels(model, "finished_reason=\"length\""),
                     m.requests_finished_length.load());
  counter(out, "moeserve_request_aborted_total", "Requests aborted (client gone).", model,
          double(m.requests_aborted.load()));
  counter(out, "moeserve_request_failed_total", "Requests that failed inside the engine.", model,
          double(m.requests_failed.load()));
  counter(out, "moeserve_engine_steps_total", "Engine steps (batched forwards).", model, double(m.steps.load()));
  if (s.speculative_steps > 0) {
    const double steps = double(m.spec_verify_steps.load()), drafts = double(m.spec_draft_tokens.load()),
                 accepted = double(m.spec_accepted_tokens.load());
    counter(out, "moeserve_spec_verify_steps_total", "Speculative verify steps (per request).", model, steps);
    counter(out, "moeserve_spec_draft_tokens_total", "Draft tokens proposed by the MTP layer.", model, drafts);
    counter(out, "moeserve_spec_accepted_tokens_total", "Draft tokens accepted by the target.", model, accepted);
    gauge(out, "moeserve_spec_acceptance_rate", "Accepted / proposed draft tokens.", model,
          drafts > 0 ? accepted / drafts : 0.0);
    gauge(out, "moeserve_spec_mean_accept_length", "Tokens emitted per verify step (accepted drafts + 1).", model,
          steps > 0 ? (accepted + steps) / steps : 0.0);
    out += "# HELP moeserve_spec_accept_length_count Verify steps by number of accepted drafts.\n"
           "# TYPE moeserve_spec_accept_length_count counter\n";
    for (int64_t a = 0; a <= s.speculative_steps && a < int64_t(m.spec_accept_histogram.size()); ++a)
      out += fmt::format("moeserve_spec_accept_length_count{} {}\n",
                         labels(model, fmt::format("accepted=\"{}\"", a)), m.spec_accept_histogram[size_t(a)].load());
  }
  histogram(out, "moeserve_time_to_first_token_seconds", "Time to first token.", model, m.ttft.snapshot());
  histogram(out, "moeserve_time_per_output_token_seconds", "Time between output tokens.", model, m.tpot.snapshot());
  histogram(out, "moeserve_e2e_request_latency_seconds", "End-to-end request latency.", model, m.e2e.snapshot());
  return out;
}

}  // namespace moeserve::server
