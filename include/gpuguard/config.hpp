/**
 * @file config.hpp
 * @brief Build-wide macros: export visibility and the CUDA runtime include every guard needs.
 */
#pragma once

#include <cuda_runtime_api.h>

/// Marks symbols of the compiled core that are part of its ABI; the core builds with hidden
/// visibility so that everything else stays private to the shared library.
#if defined(GPUGUARD_BUILDING_LIBRARY)
#define GPUGUARD_API __attribute__((visibility("default")))
#else
#define GPUGUARD_API
#endif

/// For inline functions of the headers that own process-wide state (a function-local static):
/// default visibility makes the dynamic linker merge the copies in libgpuguard.so (built with
/// hidden visibility) and in the program, so both see one state.
#define GPUGUARD_SHARED_STATE __attribute__((visibility("default")))

#define GPUGUARD_DETAIL_CONCAT_IMPL(a, b) a##b
#define GPUGUARD_DETAIL_CONCAT(a, b) GPUGUARD_DETAIL_CONCAT_IMPL(a, b)
/// A name unique to the line, for the variables that guard macros declare.
#define GPUGUARD_DETAIL_UNIQUE(prefix) GPUGUARD_DETAIL_CONCAT(prefix, __LINE__)

namespace gpuguard {

/// Device id used for memory that lives on the host and needs no device context.
inline constexpr int host_device_id = cudaCpuDeviceId;

/// Device ids gpuguard keeps per-device state for (resources, counters): 0 .. max_devices - 1.
inline constexpr int max_devices = 64;

}  // namespace gpuguard
