// NVML through dlopen. The few declarations needed are written out here, as NVML's documentation
// gives them (nvml.h is not on every machine gpuguard builds on); they are part of NVML's stable C
// ABI, versioned by the _v2/_v3 suffixes of the entry points.
#include "run_nvml.hpp"

#include <algorithm>
#include <cstdlib>

#include <dlfcn.h>

namespace gpuguard::cli {

namespace {

using nvml_return = int;             // nvmlReturn_t
constexpr nvml_return nvml_success = 0;
constexpr nvml_return nvml_error_insufficient_size = 7;
constexpr unsigned long long nvml_value_not_available = ~0ULL;

struct nvml_device_st;
using nvml_device = nvml_device_st*;  // nvmlDevice_t

// nvmlProcessInfo_t, the layout of the _v2 and _v3 process queries.
struct nvml_process_info {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

using init_fn = nvml_return (*)();
using shutdown_fn = nvml_return (*)();
using error_string_fn = const char* (*)(nvml_return);
using count_fn = nvml_return (*)(unsigned int*);
using handle_fn = nvml_return (*)(unsigned int, nvml_device*);
using processes_fn = nvml_return (*)(nvml_device, unsigned int*, nvml_process_info*);

// The library handle, closed on every path.
class library {
 public:
  explicit library(const char* name) noexcept : handle_(::dlopen(name, RTLD_NOW | RTLD_LOCAL)) {}
  library(const library&) = delete;
  library& operator=(const library&) = delete;
  library(library&&) = delete;
  library& operator=(library&&) = delete;
  ~library() {
    if (handle_ != nullptr) { ::dlclose(handle_); }
  }
  [[nodiscard]] bool loaded() const noexcept { return handle_ != nullptr; }
  template <typename F>
  [[nodiscard]] F symbol(const char* name) const noexcept {
    return reinterpret_cast<F>(::dlsym(handle_, name));  // NOLINT: dlsym returns functions as void*
  }

 private:
  void* handle_;
};

// One process list of one device; false with `note` set when NVML refused.
bool list_processes(processes_fn query, nvml_device device, std::vector<nvml_process_info>& out,
                    error_string_fn error_string, std::string& note, const char* what, unsigned index) {
  out.clear();
  unsigned int count = 0;
  nvml_return status = query(device, &count, nullptr);
  for (int attempt = 0; attempt < 4 && status == nvml_error_insufficient_size; ++attempt) {
    out.resize(count + 8);  // room for processes that start between the two calls
    count = static_cast<unsigned int>(out.size());
    status = query(device, &count, out.data());
  }
  if (status != nvml_success) {
    out.clear();
    note += (note.empty() ? "" : "; ") + std::string(what) + " on device " + std::to_string(index) + ": " +
            (error_string != nullptr ? error_string(status) : "error " + std::to_string(status));
    return false;
  }
  out.resize(std::min<std::size_t>(count, out.size()));
  return true;
}

}  // namespace

gpu_process_snapshot query_gpu_processes() {
  gpu_process_snapshot snapshot;
  const char* override_name = std::getenv("GPUGUARD_NVML_LIBRARY");
  const char* name = override_name != nullptr && *override_name != '\0' ? override_name : "libnvidia-ml.so.1";
  library nvml(name);
  if (!nvml.loaded()) {
    const char* why = ::dlerror();
    snapshot.note = std::string("NVML not available (") + (why != nullptr ? why : name) + ")";
    return snapshot;
  }
  const auto init = nvml.symbol<init_fn>("nvmlInit_v2");
  const auto shutdown = nvml.symbol<shutdown_fn>("nvmlShutdown");
  const auto error_string = nvml.symbol<error_string_fn>("nvmlErrorString");
  const auto get_count = nvml.symbol<count_fn>("nvmlDeviceGetCount_v2");
  const auto get_handle = nvml.symbol<handle_fn>("nvmlDeviceGetHandleByIndex_v2");
  struct query {
    const char* what;
    processes_fn fn;
  };
  const auto pick = [&](const char* v3, const char* v2) {
    auto fn = nvml.symbol<processes_fn>(v3);
    return fn != nullptr ? fn : nvml.symbol<processes_fn>(v2);
  };
  const query queries[] = {
      {"compute processes", pick("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")},
      {"graphics processes", pick("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2")},
      {"MPS processes", pick("nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2")},
  };
  if (init == nullptr || shutdown == nullptr || get_count == nullptr || get_handle == nullptr ||
      queries[0].fn == nullptr) {
    snapshot.note = std::string("NVML not usable (") + name + " lacks the _v2/_v3 entry points)";
    return snapshot;
  }
  const nvml_return init_status = init();
  if (init_status != nvml_success) {
    snapshot.note = std::string("NVML not available (nvmlInit: ") +
                    (error_string != nullptr ? error_string(init_status) : std::to_string(init_status)) + ")";
    return snapshot;
  }
  snapshot.available = true;
  unsigned int devices = 0;
  if (const nvml_return status = get_count(&devices); status != nvml_success) {
    snapshot.note = std::string("nvmlDeviceGetCount: ") +
                    (error_string != nullptr ? error_string(status) : std::to_string(status));
    devices = 0;
  }
  std::vector<nvml_process_info> infos;
  for (unsigned int index = 0; index < devices; ++index) {
    nvml_device device = nullptr;
    if (get_handle(index, &device) != nvml_success) {
      snapshot.note += (snapshot.note.empty() ? "" : "; ") + std::string("no handle for device ") + std::to_string(index);
      continue;
    }
    const std::size_t device_begin = snapshot.processes.size();
    for (const query& q : queries) {
      if (q.fn == nullptr || !list_processes(q.fn, device, infos, error_string, snapshot.note, q.what, index)) {
        continue;
      }
      for (const nvml_process_info& info : infos) {
        std::optional<std::uint64_t> bytes;
        if (info.used_gpu_memory != nvml_value_not_available) { bytes = info.used_gpu_memory; }
        // A process in more than one list (compute and graphics) is one holder: keep the larger.
        const auto same = std::find_if(snapshot.processes.begin() + static_cast<std::ptrdiff_t>(device_begin),
                                       snapshot.processes.end(), [&](const gpu_process& p) {
                                         return p.pid == static_cast<pid_t>(info.pid);
                                       });
        if (same != snapshot.processes.end()) {
          if (bytes && (!same->bytes || *bytes > *same->bytes)) { same->bytes = bytes; }
          continue;
        }
        snapshot.processes.push_back(gpu_process{index, static_cast<pid_t>(info.pid), bytes});
      }
    }
  }
  static_cast<void>(shutdown());
  return snapshot;
}

}  // namespace gpuguard::cli
