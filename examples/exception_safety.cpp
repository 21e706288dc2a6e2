// exception_safety: a computation that throws halfway still frees everything it had taken,
// because every allocation is owned by a guard. Runs on a GPU when there is one and on host
// memory otherwise, and prints the memory in use before, during and after.
#include "memory_in_use.hpp"

#include <gpuguard/gpuguard.hpp>

#include <cstdio>
#include <stdexcept>
#include <vector>

namespace {

using examples::mib;

void train_step(const gpuguard::host_memory_resource* host) {
  gpuguard::device_buffer activations(256 * mib);
  gpuguard::device_buffer gradients(128 * mib);
  std::vector<gpuguard::device_buffer> workspace;
  workspace.emplace_back(64 * mib);
  std::printf("  during the step: %zu MiB in use\n", examples::memory_in_use(host) / mib);
  throw std::runtime_error("loss is NaN");  // nothing above is freed by hand
}

}  // namespace

int main() try {
  gpuguard::host_memory_resource host_memory;
  const gpuguard::host_memory_resource* host = nullptr;
  if (!gpuguard::has_device()) {
    std::printf("exception_safety: no CUDA device here; using host memory instead\n");
    gpuguard::set_current_resource(&host_memory, gpuguard::host_device_id);
    host = &host_memory;
  }
  const std::size_t before = examples::memory_in_use(host);
  std::printf("  before the step: %zu MiB in use\n", before / mib);
  try {
    train_step(host);
  } catch (const std::exception& error) {
    std::printf("  the step threw: %s\n", error.what());
  }
  const std::size_t after = examples::memory_in_use(host);
  std::printf("  after the step:  %zu MiB in use (%s)\n", after / mib,
              after <= before ? "everything was freed" : "MEMORY WAS LOST");
  gpuguard::set_current_resource(nullptr, gpuguard::host_device_id);
  return after <= before ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "exception_safety: %s\n", error.what());
  return 1;
}
