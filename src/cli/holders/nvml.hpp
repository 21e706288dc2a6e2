/// @file
/// @brief What NVML says about every device and its processes, for `gpuguard doctor` (per-device
/// memory and the memory NVML attributes to each process) and `gpuguard run` (the memory each
/// process holds, for the residue check). NVML is loaded by util/nvml.hpp, gpuguard's one loader
/// (dlopen, no link-time dependency, no nvml.h). A machine without the driver gets a note, never a
/// failure.
#pragma once

#include "util/nvml.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace gpuguard::cli {

/// One process on one device, as NVML lists it (compute, graphics and MPS processes, merged).
struct nvml_process {
  unsigned pid = 0;                   ///< a PID of the namespace the driver sees: the host's
  std::optional<std::uint64_t> bytes; ///< nullopt when NVML does not know (NVML_VALUE_NOT_AVAILABLE)
};

/// One device at one moment.
struct nvml_device {
  unsigned index = 0;
  std::string name;
  std::string uuid;                     ///< NVML's "GPU-..." identity, "" where NVML cannot say
  std::optional<unsigned> minor;        ///< N of /dev/nvidiaN
  std::optional<std::uint64_t> total;   ///< memory figures, bytes
  std::optional<std::uint64_t> used;    ///< excluding the driver's reservation when NVML reports it
  std::optional<std::uint64_t> reserved;
  std::vector<nvml_process> processes;
  std::string error;                    ///< what could not be read, "" when everything was
};

/// Memory NVML attributes to one process on one device: what a holder record (holder.hpp) keeps.
struct gpu_memory_use {
  unsigned device = 0;                 ///< NVML's device index
  std::optional<std::uint64_t> bytes;  ///< nullopt when NVML cannot say (containers, MIG, old drivers)
};

/// Reads every device of `nvml` now: its memory and its compute, graphics and MPS processes (the
/// _v3 queries, _v2 where those are missing); a process in more than one list of a device is one
/// entry, with the larger figure. Errors for one device are recorded in its `error`; an error for
/// the device count (or an NVML that is not available) leaves the result empty with `*error` set.
/// Both commands read NVML here.
std::vector<nvml_device> sample_devices(const util::nvml_library& nvml, std::string* error);

/// Loads NVML (nvml_library_name()) as `gpuguard run` needs it: the process queries are checked
/// before NVML is initialised. When it is not available, `*note` says why in run's words ("NVML not
/// available (...)"). Takes from milliseconds to a second (NVML's initialisation). Never throws
/// but std::bad_alloc.
util::nvml_library open_nvml_for_run(std::string* note);

/// The devices' memory and processes from a sample, with what went wrong in `*note` ("; "-joined
/// per device errors): the one reading `gpuguard run` makes (residue check, --require-clean).
std::vector<nvml_device> sample_for_run(const util::nvml_library& nvml, std::string* note);

}  // namespace gpuguard::cli
