#pragma once
// Where the built-in demo model lives: $MOESERVE_DEMO_MODEL, else models/demo next to the installed binary
// (../models/demo from bin/ or the build directory), else the source tree's models/demo.
#include <string>

namespace moeserve::model {

// The directory, or throws moeserve::Error saying where it looked and to pass --model.
std::string builtin_model_dir();

}  // namespace moeserve::model
