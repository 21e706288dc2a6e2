// What the examples print as "memory in use": the device's used bytes (cudaMemGetInfo), or the
// bytes taken from a host_memory_resource when there is no GPU.
#pragma once

#include <gpuguard/error.hpp>
#include <gpuguard/host_memory_resource.hpp>

#include <cstddef>

namespace examples {

inline constexpr std::size_t mib = 1024 * 1024;

inline std::size_t memory_in_use(const gpuguard::host_memory_resource* host) {
  if (host != nullptr) { return host->used(); }
  std::size_t free = 0;
  std::size_t total = 0;
  GPUGUARD_CUDA_TRY(cudaMemGetInfo(&free, &total));
  return total - free;
}

}  // namespace examples
