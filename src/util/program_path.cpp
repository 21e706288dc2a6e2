#include "util/program_path.hpp"

#include <unistd.h>

namespace gpuguard::detail {

std::string program_path() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : std::string();
}

}  // namespace gpuguard::detail
