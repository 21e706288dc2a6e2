// The NVML loader (see nvml.hpp): dlopen, dlsym of the entry points nvml_abi.hpp describes,
// nvmlInit_v2; and the process-wide instance the core and the interposer query.
#include "util/nvml.hpp"

#include "util/nvml_abi.hpp"

#include <array>
#include <cstdlib>
#include <new>
#include <utility>

#include <dlfcn.h>

namespace gpuguard::util {

namespace {

namespace abi = nvml_abi;

// Sets `entry` to the library's `name`, null where it has none.
template <class F>
void resolve(void* library, F& entry, const char* name) noexcept {
  entry = reinterpret_cast<F>(::dlsym(library, name));  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
}

// The _v3 form of a process list where the library has it, else the _v2 form.
void resolve_processes(void* library, nvml_api::processes_fn& entry, const char* v3, const char* v2) noexcept {
  resolve(library, entry, v3);
  if (entry == nullptr) { resolve(library, entry, v2); }
}

nvml_api resolve_api(void* library) noexcept {
  nvml_api a;
  resolve(library, a.init, "nvmlInit_v2");
  resolve(library, a.init_v1, "nvmlInit");
  resolve(library, a.shutdown, "nvmlShutdown");
  resolve(library, a.error_string, "nvmlErrorString");
  resolve(library, a.driver_version, "nvmlSystemGetDriverVersion");
  resolve(library, a.device_count, "nvmlDeviceGetCount_v2");
  resolve(library, a.device_by_index, "nvmlDeviceGetHandleByIndex_v2");
  resolve(library, a.device_by_bus, "nvmlDeviceGetHandleByPciBusId_v2");
  resolve(library, a.device_name, "nvmlDeviceGetName");
  resolve(library, a.device_minor, "nvmlDeviceGetMinorNumber");
  resolve(library, a.device_uuid, "nvmlDeviceGetUUID");
  resolve(library, a.memory_v1, "nvmlDeviceGetMemoryInfo");
  resolve(library, a.memory_v2, "nvmlDeviceGetMemoryInfo_v2");
  resolve(library, a.mig_mode, "nvmlDeviceGetMigMode");
  resolve_processes(library, a.compute_processes, "nvmlDeviceGetComputeRunningProcesses_v3",
                    "nvmlDeviceGetComputeRunningProcesses_v2");
  resolve_processes(library, a.graphics_processes, "nvmlDeviceGetGraphicsRunningProcesses_v3",
                    "nvmlDeviceGetGraphicsRunningProcesses_v2");
  resolve_processes(library, a.mps_processes, "nvmlDeviceGetMPSComputeRunningProcesses_v3",
                    "nvmlDeviceGetMPSComputeRunningProcesses_v2");
  return a;
}

std::string error_string_of(const nvml_api& a, abi::return_code rc) {
  const char* text = a.error_string != nullptr ? a.error_string(rc) : nullptr;
  return text != nullptr ? text : "";
}

std::string error_text_of(const nvml_api& a, const char* call, abi::return_code rc) {
  const std::string text = error_string_of(a, rc);
  return std::string(call) + ": " + (text.empty() ? "error " + std::to_string(rc) : text);
}

}  // namespace

const char* nvml_library_name() noexcept {
  const char* name = std::getenv("GPUGUARD_NVML_LIBRARY");
  return name != nullptr && *name != '\0' ? name : "libnvidia-ml.so.1";
}

nvml_library nvml_library::open(const char* name, requirement required) {
  nvml_library s;
  ::dlerror();
  void* handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    s.error_ = why != nullptr ? why : std::string("cannot load ") + name;
    s.failure_ = nvml_failure::not_loaded;
    s.failure_detail_ = why != nullptr ? why : name;
    return s;
  }
  const nvml_api api = resolve_api(handle);
  const auto init = api.init != nullptr || required != nullptr ? api.init : api.init_v1;
  if (init == nullptr || (required != nullptr && !required(api))) {
    s.error_ = std::string(name) + (init == nullptr ? " has no nvmlInit_v2" : " lacks a required entry point");
    s.failure_ = nvml_failure::missing_symbols;
    ::dlclose(handle);
    return s;
  }
  if (const abi::return_code rc = init(); rc != abi::success) {
    s.error_ = error_text_of(api, "nvmlInit_v2", rc);
    s.failure_ = nvml_failure::init_failed;
    s.failure_detail_ = error_string_of(api, rc);
    if (s.failure_detail_.empty()) { s.failure_detail_ = std::to_string(rc); }
    ::dlclose(handle);
    return s;
  }
  s.handle_ = handle;
  s.api_ = api;
  return s;
}

nvml_library::nvml_library(nvml_library&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      api_(std::exchange(other.api_, nvml_api{})),
      error_(std::move(other.error_)),
      failure_(std::exchange(other.failure_, nvml_failure::none)),
      failure_detail_(std::move(other.failure_detail_)) {}

nvml_library& nvml_library::operator=(nvml_library&& other) noexcept {
  std::swap(handle_, other.handle_);
  std::swap(api_, other.api_);
  std::swap(error_, other.error_);
  std::swap(failure_, other.failure_);
  std::swap(failure_detail_, other.failure_detail_);
  return *this;
}

nvml_library::~nvml_library() { close(); }

void nvml_library::close() noexcept {
  if (handle_ == nullptr) { return; }
  if (api_.shutdown != nullptr) { api_.shutdown(); }
  ::dlclose(handle_);
  handle_ = nullptr;
  api_ = nvml_api{};
}

std::string nvml_library::error_string(abi::return_code rc) const { return error_string_of(api_, rc); }

std::string nvml_library::error_text(const char* call, abi::return_code rc) const { return error_text_of(api_, call, rc); }

std::string nvml_library::driver_version() const {
  std::array<char, 96> buffer{};
  if (api_.driver_version == nullptr || api_.driver_version(buffer.data(), buffer.size()) != abi::success) { return ""; }
  buffer.back() = '\0';
  return buffer.data();
}

std::string nvml_uuid(const nvml_api& api, nvml_abi::device_handle device) {
  std::array<char, abi::uuid_buffer_size> buffer{};
  if (api.device_uuid == nullptr || device == nullptr || api.device_uuid(device, buffer.data(), buffer.size()) != abi::success) {
    return "";
  }
  buffer.back() = '\0';
  return buffer.data();
}

// ---- the process-wide instance ------------------------------------------------------------------

namespace {

const nvml_api& process_nvml() noexcept {
  // Never destroyed (see nvml.hpp): a leaked owner, so no exit-time destructor unloads it. Where
  // even that allocation fails, NVML is as good as missing.
  static const nvml_library* const loaded = new (std::nothrow) nvml_library(nvml_library::open(
      nvml_library_name(), [](const nvml_api& a) noexcept { return a.device_by_bus != nullptr; }));
  static const nvml_api none{};
  return loaded != nullptr ? loaded->api() : none;
}

}  // namespace

nvml_abi::device_handle nvml_device(const char* bus_id) noexcept {
  const nvml_api& a = process_nvml();
  abi::device_handle handle = nullptr;
  if (a.device_by_bus == nullptr || bus_id == nullptr || a.device_by_bus(bus_id, &handle) != abi::success) {
    return nullptr;
  }
  return handle;
}

bool nvml_mig_enabled(nvml_abi::device_handle device) noexcept {
  const nvml_api& a = process_nvml();
  if (device == nullptr || a.mig_mode == nullptr) { return true; }
  unsigned int current = 0;
  unsigned int pending = 0;
  const abi::return_code status = a.mig_mode(device, &current, &pending);
  if (status == abi::error_not_supported) { return false; }  // a GPU without MIG
  return status != abi::success || current != 0;
}

bool nvml_memory(nvml_abi::device_handle device, std::uint64_t& used, std::uint64_t& total) noexcept {
  const nvml_api& a = process_nvml();
  if (device == nullptr || a.memory_v2 == nullptr) { return false; }
  // Only the _v2 call separates what the driver reserves; the older call's total includes it,
  // which is not cudaMemGetInfo's figure, so there is no fallback to it.
  abi::memory_v2 m{};
  m.version = abi::memory_v2_version;
  if (a.memory_v2(device, &m) != abi::success || m.total < m.reserved || m.total - m.reserved < m.free) { return false; }
  total = m.total - m.reserved;
  used = total - m.free;
  return true;
}

std::string nvml_uuid_of_bus(const char* bus_id) { return nvml_uuid(process_nvml(), nvml_device(bus_id)); }

long long nvml_process_used(nvml_abi::device_handle device, int pid) noexcept {
  const nvml_api& a = process_nvml();
  if (device == nullptr || a.compute_processes == nullptr) { return -1; }
  std::array<abi::process_info, 256> infos{};
  unsigned int count = infos.size();
  if (a.compute_processes(device, &count, infos.data()) != abi::success) { return -1; }
  for (unsigned int i = 0; i < count && i < infos.size(); ++i) {
    if (infos[i].pid == static_cast<unsigned int>(pid)) { return static_cast<long long>(infos[i].used_gpu_memory); }
  }
  return 0;
}

}  // namespace gpuguard::util
