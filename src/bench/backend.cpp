#include "bench/backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace moeserve::bench {
namespace {
const std::vector<Backend>& backends() {
  static const std::vector<Backend> list = {
      {"sglang-oai", Api::kCompletions, 30000, true}, {"sglang-oai-chat", Api::kChat, 30000, true},
      {"openai", Api::kCompletions, 30000, false},    {"openai-chat", Api::kChat, 30000, false},
      {"vllm", Api::kCompletions, 8000, false},       {"vllm-chat", Api::kChat, 8000, false},
  };
  return list;
}
}  // namespace

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const auto& b : backends()) names.push_back(b.name);
  return names;
}

const Backend& find_backend(const std::string& name) {
  for (const auto& b : backends())
    if (b.name == name) return b;
  fail("--backend '{}' is not supported; choose one of: {}", name, fmt::join(backend_names(), ", "));
}

}  // namespace moeserve::bench
