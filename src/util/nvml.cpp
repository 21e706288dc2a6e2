#include "util/nvml.hpp"

#include "util/nvml_abi.hpp"

#include <array>
#include <cstdlib>

#include <dlfcn.h>

namespace gpuguard::util {

namespace {

namespace abi = nvml_abi;

struct api {
  using init_fn = abi::return_code (*)();
  using by_bus_fn = abi::return_code (*)(const char*, abi::device_handle*);
  using memory_v2_fn = abi::return_code (*)(abi::device_handle, abi::memory_v2*);
  using mig_fn = abi::return_code (*)(abi::device_handle, unsigned int*, unsigned int*);
  using processes_fn = abi::return_code (*)(abi::device_handle, unsigned int*, abi::process_info*);
  by_bus_fn by_bus = nullptr;
  memory_v2_fn memory2 = nullptr;
  mig_fn mig = nullptr;
  processes_fn processes = nullptr;
  bool ready = false;
};

template <class F>
F symbol(void* library, const char* name) noexcept {
  return reinterpret_cast<F>(::dlsym(library, name));  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
}

const api& nvml() noexcept {
  static const api loaded = [] {
    api a;
    void* library = ::dlopen(nvml_library_name(), RTLD_LAZY | RTLD_LOCAL);
    if (library == nullptr) { return a; }
    const auto init = symbol<api::init_fn>(library, "nvmlInit_v2");
    a.by_bus = symbol<api::by_bus_fn>(library, "nvmlDeviceGetHandleByPciBusId_v2");
    a.memory2 = symbol<api::memory_v2_fn>(library, "nvmlDeviceGetMemoryInfo_v2");
    a.mig = symbol<api::mig_fn>(library, "nvmlDeviceGetMigMode");
    a.processes = symbol<api::processes_fn>(library, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (a.processes == nullptr) { a.processes = symbol<api::processes_fn>(library, "nvmlDeviceGetComputeRunningProcesses_v2"); }
    a.ready = init != nullptr && a.by_bus != nullptr && init() == 0;
    return a;
  }();
  return loaded;
}

}  // namespace

const char* nvml_library_name() noexcept {
  const char* name = std::getenv("GPUGUARD_NVML_LIBRARY");
  return name != nullptr && *name != '\0' ? name : "libnvidia-ml.so.1";
}

nvml_abi::device_handle nvml_device(const char* bus_id) noexcept {
  const api& a = nvml();
  abi::device_handle handle = nullptr;
  if (!a.ready || bus_id == nullptr || a.by_bus(bus_id, &handle) != abi::success) { return nullptr; }
  return handle;
}

bool nvml_mig_enabled(nvml_abi::device_handle device) noexcept {
  const api& a = nvml();
  if (device == nullptr || a.mig == nullptr) { return true; }
  unsigned int current = 0;
  unsigned int pending = 0;
  const abi::return_code status = a.mig(device, &current, &pending);
  if (status == abi::error_not_supported) { return false; }  // a GPU without MIG
  return status != abi::success || current != 0;
}

bool nvml_memory(nvml_abi::device_handle device, std::uint64_t& used, std::uint64_t& total) noexcept {
  const api& a = nvml();
  if (device == nullptr || a.memory2 == nullptr) { return false; }
  // Only the _v2 call separates what the driver reserves; the older call's total includes it,
  // which is not cudaMemGetInfo's figure, so there is no fallback to it.
  abi::memory_v2 m{};
  m.version = abi::memory_v2_version;
  if (a.memory2(device, &m) != abi::success || m.total < m.reserved || m.total - m.reserved < m.free) { return false; }
  total = m.total - m.reserved;
  used = total - m.free;
  return true;
}

long long nvml_process_used(nvml_abi::device_handle device, int pid) noexcept {
  const api& a = nvml();
  if (device == nullptr || a.processes == nullptr) { return -1; }
  std::array<abi::process_info, 256> infos{};
  unsigned int count = infos.size();
  if (a.processes(device, &count, infos.data()) != abi::success) { return -1; }
  for (unsigned int i = 0; i < count && i < infos.size(); ++i) {
    if (infos[i].pid == static_cast<unsigned int>(pid)) { return static_cast<long long>(infos[i].used_gpu_memory); }
  }
  return 0;
}

}  // namespace gpuguard::util
