// The accuracy table of docs/numerics.md: for each model, top-1 agreement and mean KL(bf16 || quantized) of
// next-token distributions over a fixed token sequence, for bf16 / fp8 / mxfp4-fp8 weights with the KV FP8 and
// indexer FP4 simulations on and off, beside the bound derived from the formats' rounding errors
// (engine/numerics_quality.h). tests/engine/numerics_quality_test.cpp asserts the same rows against the bound.
// Usage: numerics_quality                       the tiny fixtures and the demo model (engine::default_quality_models)
//        numerics_quality DIR IDS.safetensors  one model directory and a file with an I64 `input_ids` tensor
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <unistd.h>

#include "engine/numerics_quality.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using namespace moeserve;
  std::vector<engine::QualityModel> models;
  if (argc == 3) {
    models.push_back({fs::path(argv[1]).filename().string(), argv[1], argv[2]});
  } else if (argc == 1) {
    models = engine::default_quality_models();
  } else {
    std::cerr << "usage: numerics_quality [MODEL_DIR IDS.safetensors]\n";
    return 2;
  }
  try {
    std::vector<engine::QualityReport> reports;
    for (const auto& m : models) {
      const fs::path scratch = fs::temp_directory_path() / fmt::format("moeserve-numerics-{}", ::getpid());
      fs::remove_all(scratch);
      auto report = engine::evaluate_numerics_quality(m.dir, engine::read_input_ids(m.ids_file), scratch.string(),
                                                      engine::kNumericsSafetyFactor);
      fs::remove_all(scratch);
      report.model = m.name;
      reports.push_back(report);
    }
    const auto& e = reports.front().eps;
    std::cout << fmt::format(
        "Relative rms rounding error on N(0,1) data: activation FP8 {:.4f}, weight FP8 {:.4f}, weight MXFP4 {:.4f}, "
        "KV FP8 {:.4f}, indexer FP4 {:.4f}; safety factor S = {}\n\n",
        e.act_fp8, e.weight_fp8, e.weight_fp4, e.kv_fp8, e.indexer_fp4, reports.front().safety);
    for (const auto& r : reports) std::cout << fmt::format("{}: {} positions\n", r.model, r.positions);
    std::cout << "\n" << engine::quality_table_markdown(reports);
    for (const auto& r : reports)
      for (const auto& row : r.rows)
        if (!row.available) {
          std::cout << fmt::format("\n{} {}: n/a: {}\n", r.model, row.weights, row.note);
          break;
        }
  } catch (const std::exception& ex) {
    std::cerr << "error: " << ex.what() << "\n";
    return 1;
  }
  return 0;
}
