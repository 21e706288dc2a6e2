// The running program's own path. Internal to gpuguard.
#pragma once

#include <string>

namespace gpuguard::detail {

/// The path of the running executable (/proc/self/exe's target); "" if it cannot be read.
std::string program_path();

}  // namespace gpuguard::detail
