// NVML, the driver's management library, loaded at run time with dlopen (libnvidia-ml.so.1), so
// that nothing links it and a machine without it only loses what it answers. It answers about a
// device without entering any CUDA context. This is gpuguard's one NVML loader:
//  - the compiled core and the interposer use the process-wide instance through the nvml_*
//    functions below (loaded on first use, never unloaded): the outputs' writer samples device
//    memory where NVML agrees with cudaMemGetInfo (outputs.cpp, announce), and the interposer asks
//    what the process uses;
//  - the CLI opens an nvml_library of its own (`gpuguard doctor`, `gpuguard run`: cli/holders/nvml.hpp
//    reads every device and process through its entry points) and closes it when done.
// Internal to gpuguard.
#pragma once

#include "util/nvml_abi.hpp"

#include <cstdint>
#include <string>
#include <type_traits>

namespace gpuguard::util {

/// The NVML library to load: $GPUGUARD_NVML_LIBRARY where set and not empty (the tests'
/// stand-in), else libnvidia-ml.so.1.
const char* nvml_library_name() noexcept;

/// NVML's entry points as gpuguard calls them, resolved from one loaded library: null where the
/// library lacks one. The process lists are the _v3 calls where the library has them, else _v2.
struct nvml_api {
  using return_code = nvml_abi::return_code;
  using device_handle = nvml_abi::device_handle;
  using processes_fn = return_code (*)(device_handle, unsigned int*, nvml_abi::process_info*);

  return_code (*init)() = nullptr;                    ///< nvmlInit_v2
  return_code (*init_v1)() = nullptr;                 ///< nvmlInit, for drivers older than _v2
  return_code (*shutdown)() = nullptr;                ///< nvmlShutdown
  const char* (*error_string)(return_code) = nullptr;  ///< nvmlErrorString
  return_code (*driver_version)(char*, unsigned int) = nullptr;  ///< nvmlSystemGetDriverVersion
  return_code (*device_count)(unsigned int*) = nullptr;          ///< nvmlDeviceGetCount_v2
  return_code (*device_by_index)(unsigned int, device_handle*) = nullptr;  ///< nvmlDeviceGetHandleByIndex_v2
  return_code (*device_by_bus)(const char*, device_handle*) = nullptr;     ///< nvmlDeviceGetHandleByPciBusId_v2
  return_code (*device_name)(device_handle, char*, unsigned int) = nullptr;  ///< nvmlDeviceGetName
  return_code (*device_minor)(device_handle, unsigned int*) = nullptr;       ///< nvmlDeviceGetMinorNumber
  return_code (*device_uuid)(device_handle, char*, unsigned int) = nullptr;  ///< nvmlDeviceGetUUID
  return_code (*memory_v1)(device_handle, nvml_abi::memory_v1*) = nullptr;  ///< nvmlDeviceGetMemoryInfo
  return_code (*memory_v2)(device_handle, nvml_abi::memory_v2*) = nullptr;  ///< nvmlDeviceGetMemoryInfo_v2
  return_code (*mig_mode)(device_handle, unsigned int*, unsigned int*) = nullptr;  ///< nvmlDeviceGetMigMode
  processes_fn compute_processes = nullptr;   ///< nvmlDeviceGetComputeRunningProcesses_v3 (_v2)
  processes_fn graphics_processes = nullptr;  ///< nvmlDeviceGetGraphicsRunningProcesses_v3 (_v2)
  processes_fn mps_processes = nullptr;       ///< nvmlDeviceGetMPSComputeRunningProcesses_v3 (_v2)
};

/// Why an nvml_library is not available.
enum class nvml_failure {
  none,             ///< it is
  not_loaded,       ///< the dynamic loader could not load the library
  missing_symbols,  ///< the library lacks nvmlInit_v2 (or nvmlInit), or what the caller requires
  init_failed,      ///< nvmlInit_v2 returned an error
};

/// One loaded and initialised NVML. Move-only; the destructor shuts NVML down and unloads it.
class nvml_library {
 public:
  /// What a caller needs of the library besides nvmlInit_v2, checked before NVML is initialised.
  using requirement = bool (*)(const nvml_api&) noexcept;

  /// Loads `name` (a name for the dynamic loader or a path) and initialises NVML. Never throws but
  /// std::bad_alloc: a missing or failing library gives available() false, and error() says why.
  /// Without `required`, a library with nvmlInit alone (no nvmlInit_v2) will do; with it, the
  /// library must have nvmlInit_v2 and `required(api())` must hold.
  static nvml_library open(const char* name, requirement required = nullptr);

  nvml_library() = default;
  nvml_library(nvml_library&& other) noexcept;
  nvml_library& operator=(nvml_library&& other) noexcept;
  nvml_library(const nvml_library&) = delete;
  nvml_library& operator=(const nvml_library&) = delete;
  ~nvml_library();

  [[nodiscard]] bool available() const noexcept { return handle_ != nullptr; }
  /// The entry points; all null unless available().
  [[nodiscard]] const nvml_api& api() const noexcept { return api_; }
  /// Why NVML is not available ("" when it is): "nvmlInit_v2: Driver Not Loaded".
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  [[nodiscard]] nvml_failure failure() const noexcept { return failure_; }
  /// The bare cause of the failure: the loader's message (not_loaded) or NVML's text for the
  /// status of nvmlInit_v2, its number when NVML has no text (init_failed); "" otherwise.
  [[nodiscard]] const std::string& failure_detail() const noexcept { return failure_detail_; }

  /// NVML's text for `rc` ("Insufficient Size"), "" when it has none.
  [[nodiscard]] std::string error_string(nvml_abi::return_code rc) const;
  /// "CALL: TEXT", or "CALL: error N" when NVML has no text for `rc`: a failed call in a message.
  [[nodiscard]] std::string error_text(const char* call, nvml_abi::return_code rc) const;
  /// The driver's version ("580.159"), "" when unknown.
  [[nodiscard]] std::string driver_version() const;

 private:
  void close() noexcept;

  void* handle_ = nullptr;  // dlopen's handle, non-null only once NVML is initialised
  nvml_api api_;
  std::string error_;
  nvml_failure failure_ = nvml_failure::none;
  std::string failure_detail_;
};

static_assert(!std::is_copy_constructible_v<nvml_library> && std::is_nothrow_move_constructible_v<nvml_library> &&
                  std::is_nothrow_move_assignable_v<nvml_library>,
              "nvml_library owns the loaded library: move-only");

/// The device's UUID as NVML spells it ("GPU-5f3e1c2a-..."), through `api` (an nvml_library's, or
/// the process-wide instance's): the one identity of a GPU that stays the same whatever
/// CUDA_VISIBLE_DEVICES renumbers. "" where the library lacks nvmlDeviceGetUUID or the call fails.
std::string nvml_uuid(const nvml_api& api, nvml_abi::device_handle device);

// ---- the process-wide instance, for the core and the interposer -------------------------------
// Loaded on first use from nvml_library_name() (it needs nvmlDeviceGetHandleByPciBusId_v2), never
// unloaded: the writer thread may still sample while the process exits.

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

/// The UUID of the GPU at PCI bus id `bus_id` (as nvml_uuid above, through the process-wide
/// instance): "" where NVML is missing, cannot start, or does not know the id or its UUID. A CUDA
/// device of a MIG instance has its GPU's bus id, so this is the whole GPU's UUID.
std::string nvml_uuid_of_bus(const char* bus_id);

/// The bytes process `pid` uses on `device`, 0 if it uses none, -1 where NVML cannot say.
long long nvml_process_used(nvml_abi::device_handle device, int pid) noexcept;

}  // namespace gpuguard::util
