/// @file
/// @brief The one record of a process that holds a GPU, for `gpuguard run` (its residue check)
/// and `gpuguard doctor` (which adds its classification and --reap outcome): the process as /proc
/// shows it, with the device files it holds, and the memory NVML attributes to it per device.
#pragma once

#include "holders/nvml.hpp"
#include "holders/proc.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuguard::cli {

/// A process holding files under the device prefix, or listed by NVML.
struct gpu_holder {
  process_info info;                   ///< info.exists false: no /proc entry here (an NVML PID of another namespace)
  std::vector<gpu_memory_use> memory;  ///< NVML's entries for this PID (empty: NVML did not list it)
};

/// The NVML memory of a holder summed over its devices; nullopt when no figure is known.
inline std::optional<std::uint64_t> memory_bytes(const gpu_holder& h) {
  std::optional<std::uint64_t> total;
  for (const gpu_memory_use& m : h.memory) {
    if (m.bytes) { total = total.value_or(0) + *m.bytes; }
  }
  return total;
}

/// Adds to each holder the memory NVML lists for its PID on each device.
inline void attach_memory(std::vector<gpu_holder>& holders, const std::vector<nvml_device>& devices) {
  for (gpu_holder& h : holders) {
    for (const nvml_device& d : devices) {
      for (const nvml_process& p : d.processes) {
        if (static_cast<int>(p.pid) == h.info.pid) { h.memory.push_back(gpu_memory_use{d.index, p.bytes}); }
      }
    }
  }
}

}  // namespace gpuguard::cli
