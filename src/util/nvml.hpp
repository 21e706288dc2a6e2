// NVML, the driver's management library, loaded on first use with dlopen (libnvidia-ml.so.1), so
// that nothing links it and a machine without it only loses what it answers. It answers about a
// device without entering any CUDA context: the outputs' writer samples device memory through it
// where it agrees with cudaMemGetInfo (outputs.cpp, announce), and the interposer asks it what the
// process uses. Internal to gpuguard.
#pragma once

#include "util/nvml_abi.hpp"

#include <cstdint>

namespace gpuguard::util {

/// The NVML library to load: $GPUGUARD_NVML_LIBRARY where set (the tests' stand-in), else
/// libnvidia-ml.so.1.
const char* nvml_library_name() noexcept;

/// NVML's handle of the GPU at PCI bus id `bus_id` (as cudaDeviceGetPCIBusId writes it), or null
/// where NVML is missing, cannot start or does not know the id.
nvml_abi::device_handle nvml_device(const char* bus_id) noexcept;

/// Whether `device` (from nvml_device) is split into MIG instances: its memory figures are then
/// the whole GPU's, not what a CUDA device of one instance sees. True where NVML cannot say.
bool nvml_mig_enabled(nvml_abi::device_handle device) noexcept;

/// The memory of `device` as cudaMemGetInfo counts it (nvmlDeviceGetMemoryInfo_v2): `total`
/// without what the driver reserves for itself, `used` = total minus free. False where NVML
/// cannot say, or has only the older call (whose total includes the reserve); `used` and `total`
/// are then left as they were.
bool nvml_memory(nvml_abi::device_handle device, std::uint64_t& used, std::uint64_t& total) noexcept;

/// The bytes process `pid` uses on `device`, 0 if it uses none, -1 where NVML cannot say.
long long nvml_process_used(nvml_abi::device_handle device, int pid) noexcept;

}  // namespace gpuguard::util
