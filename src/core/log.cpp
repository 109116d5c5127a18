#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace moeserve {

void init_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("moeserve");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace moeserve
