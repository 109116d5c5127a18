#include "model/builtin.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace moeserve::model {

std::string builtin_model_dir() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("MOESERVE_DEMO_MODEL")) candidates.emplace_back(env);
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = 0;
    candidates.push_back(fs::path(exe).parent_path().parent_path() / "models" / "demo");
  }
  candidates.push_back(fs::path(MOESERVE_SOURCE_DIR) / "models" / "demo");
  std::string tried;
  for (const auto& c : candidates) {
    if (fs::exists(c / "config.json")) return c.string();
    tried += (tried.empty() ? "" : ", ") + c.string();
  }
  fail("the built-in demo model was not found (looked in {}); pass --model DIR", tried);
}

}  // namespace moeserve::model
