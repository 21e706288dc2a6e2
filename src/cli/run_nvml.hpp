/// @file
/// @brief How much device memory NVML says each process holds, for `gpuguard run`'s residue
///        check. NVML is loaded at run time with dlopen (no link-time dependency, no nvml.h): a
///        machine without the driver gets a note, never a failure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace gpuguard::cli {

/// One process on one device, as NVML lists it.
struct gpu_process {
  unsigned device = 0;                 // NVML's device index
  pid_t pid = 0;                       // NVML's pid: the host's (see docs/run.md on containers)
  std::optional<std::uint64_t> bytes;  // nullopt when NVML cannot say (containers, MIG, old drivers)
};

/// NVML's view of the devices' processes at one moment.
struct gpu_process_snapshot {
  bool available = false;  // NVML was loaded and initialised
  std::string note;        // why it was not, or what went wrong on some device ("" when all fine)
  std::vector<gpu_process> processes;
};

/// Loads NVML (the library named by GPUGUARD_NVML_LIBRARY, else libnvidia-ml.so.1), lists the
/// compute, graphics and MPS processes of every device, then shuts NVML down and unloads it.
/// Takes from milliseconds to a second (NVML's initialisation). Never throws but std::bad_alloc.
gpu_process_snapshot query_gpu_processes();

}  // namespace gpuguard::cli
