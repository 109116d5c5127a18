#pragma once
// Named data the planner reads from the repository: model presets (presets/models/<name>/config.json, in
// the official config.json form), GPU presets (presets/gpus/<name>.json) and serving profiles
// (profiles/<name>.json, see profile.h). The data root is $MOESERVE_DATA_DIR when set, else the source tree
// the binary was built from.
#include <string>
#include <vector>

#include "io/model_config.h"
#include "planner/device.h"

namespace moeserve::planner {

std::string data_root();

// `name_or_path`: a preset name ("deepseek-v4-pro", "deepseek-v4-flash"), a directory holding config.json,
// or a config.json file.
io::ModelConfig load_model(const std::string& name_or_path);
std::vector<std::string> model_preset_names();

// A GPU preset by name ("h200", "h20-141gb", ...). Unknown names are an error that lists the presets.
DeviceSpec load_gpu_preset(const std::string& name);
std::vector<std::string> gpu_preset_names();
// Parses one GPU preset file's JSON (exposed for tests).
DeviceSpec parse_gpu_preset(const std::string& text, const std::string& source);

}  // namespace moeserve::planner
