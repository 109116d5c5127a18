#include "planner/formats.h"

#include "core/error.h"

namespace moeserve::planner {

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::FP8: return "fp8";
    case WeightFormat::MXFP4_FP8: return "mxfp4-fp8";
  }
  return "?";
}

const char* kv_format_name(KvFormat format) {
  switch (format) {
    case KvFormat::FP8: return "fp8";
    case KvFormat::BF16: return "bf16";
    case KvFormat::F32: return "f32";
  }
  return "?";
}

const char* c128_mode_name(C128Mode mode) { return mode == C128Mode::Offline ? "offline" : "online"; }

WeightFormat parse_weight_format(const std::string& name, const std::string& what) {
  if (name == "bf16") return WeightFormat::BF16;
  if (name == "fp8") return WeightFormat::FP8;
  if (name == "mxfp4-fp8") return WeightFormat::MXFP4_FP8;
  fail("{} = '{}' (expected bf16, fp8 or mxfp4-fp8)", what, name);
}

KvFormat parse_kv_format(const std::string& name, const std::string& what) {
  if (name == "fp8") return KvFormat::FP8;
  if (name == "bf16") return KvFormat::BF16;
  if (name == "f32") return KvFormat::F32;
  fail("{} = '{}' (expected fp8, bf16 or f32)", what, name);
}

C128Mode parse_c128_mode(const std::string& name, const std::string& what) {
  if (name == "offline") return C128Mode::Offline;
  if (name == "online") return C128Mode::Online;
  fail("{} = '{}' (expected offline or online)", what, name);
}

}  // namespace moeserve::planner
