#pragma once
// The capacity plan as text (the `moeserve plan` table, also what the engine logs at startup) and as JSON
// (`moeserve plan --json`; integer `full_token_capacity_per_rank` and every number of the text).
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "planner/capacity.h"

namespace moeserve::planner {

std::string format_plan_text(const CapacityPlan& plan);
nlohmann::json plan_to_json(const CapacityPlan& plan);

}  // namespace moeserve::planner
