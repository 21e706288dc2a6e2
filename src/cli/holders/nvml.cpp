// NVML through dlopen for `gpuguard doctor` and `gpuguard run` (see nvml.hpp), with NVML's
// structures and codes from util/nvml_abi.hpp (its stable C ABI, versioned by the _v2/_v3
// suffixes of the entry points) and the library's name from util/nvml.hpp.
#include "holders/nvml.hpp"

#include "util/nvml.hpp"
#include "util/nvml_abi.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <dlfcn.h>

namespace gpuguard::cli {

namespace {

namespace abi = util::nvml_abi;  // NVML's structures and codes

using init_fn = abi::return_code (*)();
using shutdown_fn = abi::return_code (*)();
using error_string_fn = const char* (*)(abi::return_code);
using count_fn = abi::return_code (*)(unsigned int*);
using handle_fn = abi::return_code (*)(unsigned int, abi::device_handle*);
using name_fn = abi::return_code (*)(abi::device_handle, char*, unsigned int);
using minor_fn = abi::return_code (*)(abi::device_handle, unsigned int*);
using memory_v1_fn = abi::return_code (*)(abi::device_handle, abi::memory_v1*);
using memory_v2_fn = abi::return_code (*)(abi::device_handle, abi::memory_v2*);
using processes_fn = abi::return_code (*)(abi::device_handle, unsigned int*, abi::process_info*);
using driver_version_fn = abi::return_code (*)(char*, unsigned int);

template <typename F>
F symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(::dlsym(handle, name));
}

// NVML's text for `rc`, "" when it has none.
std::string error_string(void* handle, abi::return_code rc) {
  const auto text = symbol<error_string_fn>(handle, "nvmlErrorString");
  const char* s = text != nullptr ? text(rc) : nullptr;
  return s != nullptr ? s : "";
}

std::string error_text(void* handle, const char* call, abi::return_code rc) {
  const auto text = symbol<error_string_fn>(handle, "nvmlErrorString");
  const char* s = text != nullptr ? text(rc) : nullptr;
  return std::string(call) + ": " + (s != nullptr ? s : "error " + std::to_string(rc));
}

// The processes of one kind on one device, with NVML's protocol: ask how many there are, make room
// for a few more (processes start meanwhile), and ask again while NVML says the room is too small.
abi::return_code list_processes(processes_fn fn, abi::device_handle device, std::vector<abi::process_info>& out) {
  out.clear();
  for (int attempt = 0; attempt < 8; ++attempt) {
    unsigned int count = static_cast<unsigned int>(out.size());
    const abi::return_code rc = fn(device, &count, out.empty() ? nullptr : out.data());
    if (rc == abi::success) {
      out.resize(std::min<std::size_t>(count, out.size()));
      return rc;
    }
    if (rc != abi::error_insufficient_size) { return rc; }
    out.assign(std::size_t{count} + 8, abi::process_info{});
  }
  return abi::error_insufficient_size;
}

}  // namespace

std::string nvml_library_name() { return util::nvml_library_name(); }

nvml_session nvml_session::open(const std::string& library, const std::vector<std::vector<const char*>>& required) {
  nvml_session s;
  ::dlerror();
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    s.error_ = why != nullptr ? why : "cannot load " + library;
    s.failure_ = nvml_failure::not_loaded;
    s.failure_detail_ = why != nullptr ? why : library;
    return s;
  }
  auto init = symbol<init_fn>(handle, "nvmlInit_v2");
  if (init == nullptr && required.empty()) { init = symbol<init_fn>(handle, "nvmlInit"); }
  const bool has_required = std::all_of(required.begin(), required.end(), [handle](const auto& names) {
    return std::any_of(names.begin(), names.end(), [handle](const char* name) { return ::dlsym(handle, name) != nullptr; });
  });
  if (init == nullptr || !has_required) {
    s.error_ = library + (init == nullptr ? " has no nvmlInit_v2" : " lacks a required entry point");
    s.failure_ = nvml_failure::missing_symbols;
    ::dlclose(handle);
    return s;
  }
  if (const abi::return_code rc = init(); rc != abi::success) {
    s.error_ = error_text(handle, "nvmlInit_v2", rc);
    s.failure_ = nvml_failure::init_failed;
    s.failure_detail_ = error_string(handle, rc);
    if (s.failure_detail_.empty()) { s.failure_detail_ = std::to_string(rc); }
    ::dlclose(handle);
    return s;
  }
  s.handle_ = handle;
  if (const auto version = symbol<driver_version_fn>(handle, "nvmlSystemGetDriverVersion")) {
    char buffer[96] = {};
    if (version(buffer, sizeof buffer) == abi::success) {
      buffer[sizeof buffer - 1] = '\0';
      s.driver_version_ = buffer;
    }
  }
  return s;
}

nvml_session::nvml_session(nvml_session&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      error_(std::move(other.error_)),
      failure_(std::exchange(other.failure_, nvml_failure::none)),
      failure_detail_(std::move(other.failure_detail_)),
      driver_version_(std::move(other.driver_version_)) {}

nvml_session& nvml_session::operator=(nvml_session&& other) noexcept {
  std::swap(handle_, other.handle_);
  std::swap(error_, other.error_);
  std::swap(failure_, other.failure_);
  std::swap(failure_detail_, other.failure_detail_);
  std::swap(driver_version_, other.driver_version_);
  return *this;
}

nvml_session::~nvml_session() { close(); }

void nvml_session::close() noexcept {
  if (handle_ == nullptr) { return; }
  if (const auto shutdown = symbol<shutdown_fn>(handle_, "nvmlShutdown")) { shutdown(); }
  ::dlclose(handle_);
  handle_ = nullptr;
}

std::vector<nvml_device> nvml_session::sample(std::string* error) const {
  std::vector<nvml_device> devices;
  if (handle_ == nullptr) {
    if (error != nullptr) { *error = error_; }
    return devices;
  }
  auto count_devices = symbol<count_fn>(handle_, "nvmlDeviceGetCount_v2");
  auto get_handle = symbol<handle_fn>(handle_, "nvmlDeviceGetHandleByIndex_v2");
  if (count_devices == nullptr || get_handle == nullptr) {
    if (error != nullptr) { *error = "NVML lacks nvmlDeviceGetCount_v2 or nvmlDeviceGetHandleByIndex_v2"; }
    return devices;
  }
  const auto get_name = symbol<name_fn>(handle_, "nvmlDeviceGetName");
  const auto get_minor = symbol<minor_fn>(handle_, "nvmlDeviceGetMinorNumber");
  const auto memory_v2 = symbol<memory_v2_fn>(handle_, "nvmlDeviceGetMemoryInfo_v2");
  const auto memory_v1 = symbol<memory_v1_fn>(handle_, "nvmlDeviceGetMemoryInfo");
  processes_fn compute = symbol<processes_fn>(handle_, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (compute == nullptr) { compute = symbol<processes_fn>(handle_, "nvmlDeviceGetComputeRunningProcesses_v2"); }
  processes_fn graphics = symbol<processes_fn>(handle_, "nvmlDeviceGetGraphicsRunningProcesses_v3");
  if (graphics == nullptr) { graphics = symbol<processes_fn>(handle_, "nvmlDeviceGetGraphicsRunningProcesses_v2"); }
  processes_fn mps = symbol<processes_fn>(handle_, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
  if (mps == nullptr) { mps = symbol<processes_fn>(handle_, "nvmlDeviceGetMPSComputeRunningProcesses_v2"); }

  unsigned int count = 0;
  if (const abi::return_code rc = count_devices(&count); rc != abi::success) {
    if (error != nullptr) { *error = error_text(handle_, "nvmlDeviceGetCount_v2", rc); }
    return devices;
  }
  for (unsigned int index = 0; index < count; ++index) {
    nvml_device d;
    d.index = index;
    auto add_error = [&d](const std::string& what) { d.error += (d.error.empty() ? "" : "; ") + what; };
    abi::device_handle device = nullptr;
    if (const abi::return_code rc = get_handle(index, &device); rc != abi::success) {
      add_error(error_text(handle_, "nvmlDeviceGetHandleByIndex_v2", rc));
      devices.push_back(std::move(d));
      continue;
    }
    if (get_name != nullptr) {
      char name[96] = {};
      if (get_name(device, name, sizeof name) == abi::success) {
        name[sizeof name - 1] = '\0';
        d.name = name;
      }
    }
    if (unsigned int minor = 0; get_minor != nullptr && get_minor(device, &minor) == abi::success) { d.minor = minor; }
    bool have_memory = false;
    if (memory_v2 != nullptr) {
      abi::memory_v2 m{};
      m.version = abi::memory_v2_version;
      if (memory_v2(device, &m) == abi::success) {
        d.total = m.total;
        d.used = m.used;
        d.reserved = m.reserved;
        have_memory = true;
      }
    }
    if (!have_memory && memory_v1 != nullptr) {
      abi::memory_v1 m{};
      if (const abi::return_code rc = memory_v1(device, &m); rc == abi::success) {
        d.total = m.total;
        d.used = m.used;
      } else {
        add_error(error_text(handle_, "nvmlDeviceGetMemoryInfo", rc));
      }
    }
    std::vector<abi::process_info> infos;
    const std::pair<processes_fn, const char*> kinds[] = {
        {compute, "nvmlDeviceGetComputeRunningProcesses_v3"},
        {graphics, "nvmlDeviceGetGraphicsRunningProcesses_v3"},
        {mps, "nvmlDeviceGetMPSComputeRunningProcesses_v3"},
    };
    for (const auto& [fn, call] : kinds) {
      if (fn == nullptr) { continue; }
      if (const abi::return_code rc = list_processes(fn, device, infos); rc != abi::success) {
        add_error(error_text(handle_, call, rc));
        continue;
      }
      for (const abi::process_info& info : infos) {
        std::optional<std::uint64_t> bytes;
        if (info.used_gpu_memory != abi::value_not_available) { bytes = info.used_gpu_memory; }
        // A process in more than one list (compute and graphics) is one entry: keep the larger.
        const auto seen = std::find_if(d.processes.begin(), d.processes.end(),
                                       [&info](const nvml_process& p) { return p.pid == info.pid; });
        if (seen != d.processes.end()) {
          if (bytes && (!seen->bytes || *bytes > *seen->bytes)) { seen->bytes = bytes; }
          continue;
        }
        d.processes.push_back(nvml_process{info.pid, bytes});
      }
    }
    devices.push_back(std::move(d));
  }
  return devices;
}

nvml_session open_nvml_for_run(std::string* note) {
  const std::string name = nvml_library_name();
  // What the residue check needs, checked before NVML is initialised.
  nvml_session nvml = nvml_session::open(
      name, {{"nvmlShutdown"},
             {"nvmlDeviceGetCount_v2"},
             {"nvmlDeviceGetHandleByIndex_v2"},
             {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"}});
  std::string text;
  switch (nvml.failure()) {
    case nvml_failure::none: break;
    case nvml_failure::not_loaded: text = "NVML not available (" + nvml.failure_detail() + ")"; break;
    case nvml_failure::missing_symbols: text = "NVML not usable (" + name + " lacks the _v2/_v3 entry points)"; break;
    case nvml_failure::init_failed: text = "NVML not available (nvmlInit: " + nvml.failure_detail() + ")"; break;
  }
  if (note != nullptr) { *note = text; }
  return nvml;
}

std::vector<nvml_device> sample_for_run(const nvml_session& nvml, std::string* note) {
  std::string error;
  std::vector<nvml_device> devices = nvml.sample(&error);
  std::string text = error;
  for (const nvml_device& d : devices) {
    if (!d.error.empty()) { text += (text.empty() ? "" : "; ") + ("device " + std::to_string(d.index) + ": " + d.error); }
  }
  if (note != nullptr) { *note = text; }
  return devices;
}

}  // namespace gpuguard::cli
