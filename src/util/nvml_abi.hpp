// NVML's C ABI, as far as gpuguard uses it: the structures and codes of its API reference,
// versioned by the _v2/_v3 suffixes of the entry points (nvml.h is not needed to build gpuguard).
// util/nvml.cpp, gpuguard's one NVML loader, resolves the entry points with dlopen and dlsym.
#pragma once

namespace gpuguard::util::nvml_abi {

using return_code = int;  // nvmlReturn_t
constexpr return_code success = 0;
constexpr return_code error_not_supported = 3;
constexpr return_code error_insufficient_size = 7;
using device_handle = struct device_st*;  // nvmlDevice_t
constexpr unsigned long long value_not_available = ~0ULL;
/// NVML_DEVICE_UUID_V2_BUFFER_SIZE: room for any UUID nvmlDeviceGetUUID writes ("GPU-" and 36
/// characters today, "MIG-..." for an instance), with its terminating NUL.
constexpr unsigned uuid_buffer_size = 96;

struct memory_v1 {  // nvmlMemory_t: `used` includes what the driver reserves
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct memory_v2 {  // nvmlMemory_v2_t: `used` excludes `reserved`
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(memory_v1) == 24 && sizeof(memory_v2) == 40, "NVML's memory structures as nvml.h lays them out");
/// NVML_STRUCT_VERSION(Memory, 2)
constexpr unsigned memory_v2_version = static_cast<unsigned>(sizeof(memory_v2)) | (2U << 24U);

struct process_info {  // nvmlProcessInfo_t (== nvmlProcessInfo_v2_t), for the _v2 and _v3 calls
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
static_assert(sizeof(process_info) == 24, "nvmlProcessInfo_t as nvml.h lays it out");

}  // namespace gpuguard::util::nvml_abi
