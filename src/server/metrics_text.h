#pragma once
// /metrics in the Prometheus text exposition format (names follow vLLM's where one exists, prefixed moeserve_;
// every series carries model_name so several instances can share a Prometheus).
#include <string>

#include "engine/metrics.h"

namespace moeserve::server {

std::string render_metrics(const engine::EngineStatus& status, const engine::EngineMetrics& metrics,
                           const std::string& model_name);

}  // namespace moeserve::server
