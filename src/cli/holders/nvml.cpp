// Every device and its processes through NVML's entry points (see nvml.hpp), which util/nvml.hpp
// loads; NVML's structures and codes are util/nvml_abi.hpp's.
#include "holders/nvml.hpp"

#include "util/nvml.hpp"
#include "util/nvml_abi.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace gpuguard::cli {

namespace {

namespace abi = util::nvml_abi;

void add_error(nvml_device& d, const std::string& what) { d.error += (d.error.empty() ? "" : "; ") + what; }

// The processes of one kind on one device, with NVML's protocol: ask how many there are, make room
// for a few more (processes start meanwhile), and ask again while NVML says the room is too small.
abi::return_code list_processes(util::nvml_api::processes_fn fn, abi::device_handle device,
                                std::vector<abi::process_info>& out) {
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

// The device's name, UUID and minor number, where NVML says.
void read_identity(const util::nvml_api& api, abi::device_handle device, nvml_device& d) {
  if (std::array<char, 96> name{}; api.device_name != nullptr && api.device_name(device, name.data(), name.size()) == abi::success) {
    name.back() = '\0';
    d.name = name.data();
  }
  d.uuid = util::nvml_uuid(api, device);
  if (unsigned int minor = 0; api.device_minor != nullptr && api.device_minor(device, &minor) == abi::success) {
    d.minor = minor;
  }
}

// The device's memory: the _v2 figures (with the driver's reserve apart), else the older ones.
void read_memory(const util::nvml_library& nvml, abi::device_handle device, nvml_device& d) {
  const util::nvml_api& api = nvml.api();
  if (api.memory_v2 != nullptr) {
    abi::memory_v2 m{};
    m.version = abi::memory_v2_version;
    if (api.memory_v2(device, &m) == abi::success) {
      d.total = m.total;
      d.used = m.used;
      d.reserved = m.reserved;
      return;
    }
  }
  if (api.memory_v1 == nullptr) { return; }
  abi::memory_v1 m{};
  if (const abi::return_code rc = api.memory_v1(device, &m); rc == abi::success) {
    d.total = m.total;
    d.used = m.used;
  } else {
    add_error(d, nvml.error_text("nvmlDeviceGetMemoryInfo", rc));
  }
}

// The device's compute, graphics and MPS processes, merged: a process in more than one list
// (compute and graphics) is one entry, with the larger figure.
void read_processes(const util::nvml_library& nvml, abi::device_handle device, nvml_device& d) {
  const util::nvml_api& api = nvml.api();
  const std::pair<util::nvml_api::processes_fn, const char*> kinds[] = {
      {api.compute_processes, "nvmlDeviceGetComputeRunningProcesses_v3"},
      {api.graphics_processes, "nvmlDeviceGetGraphicsRunningProcesses_v3"},
      {api.mps_processes, "nvmlDeviceGetMPSComputeRunningProcesses_v3"},
  };
  std::vector<abi::process_info> infos;
  for (const auto& [fn, call] : kinds) {
    if (fn == nullptr) { continue; }
    if (const abi::return_code rc = list_processes(fn, device, infos); rc != abi::success) {
      add_error(d, nvml.error_text(call, rc));
      continue;
    }
    for (const abi::process_info& info : infos) {
      std::optional<std::uint64_t> bytes;
      if (info.used_gpu_memory != abi::value_not_available) { bytes = info.used_gpu_memory; }
      const auto seen = std::find_if(d.processes.begin(), d.processes.end(),
                                     [&info](const nvml_process& p) { return p.pid == info.pid; });
      if (seen == d.processes.end()) {
        d.processes.push_back(nvml_process{info.pid, bytes});
      } else if (bytes && (!seen->bytes || *bytes > *seen->bytes)) {
        seen->bytes = bytes;
      }
    }
  }
}

// What `gpuguard run` needs of the library, checked before NVML is initialised.
bool usable_for_run(const util::nvml_api& api) noexcept {
  return api.shutdown != nullptr && api.device_count != nullptr && api.device_by_index != nullptr &&
         api.compute_processes != nullptr;
}

}  // namespace

std::vector<nvml_device> sample_devices(const util::nvml_library& nvml, std::string* error) {
  std::vector<nvml_device> devices;
  const util::nvml_api& api = nvml.api();
  if (!nvml.available()) {
    if (error != nullptr) { *error = nvml.error(); }
    return devices;
  }
  if (api.device_count == nullptr || api.device_by_index == nullptr) {
    if (error != nullptr) { *error = "NVML lacks nvmlDeviceGetCount_v2 or nvmlDeviceGetHandleByIndex_v2"; }
    return devices;
  }
  unsigned int count = 0;
  if (const abi::return_code rc = api.device_count(&count); rc != abi::success) {
    if (error != nullptr) { *error = nvml.error_text("nvmlDeviceGetCount_v2", rc); }
    return devices;
  }
  for (unsigned int index = 0; index < count; ++index) {
    nvml_device& d = devices.emplace_back();
    d.index = index;
    abi::device_handle device = nullptr;
    if (const abi::return_code rc = api.device_by_index(index, &device); rc != abi::success) {
      add_error(d, nvml.error_text("nvmlDeviceGetHandleByIndex_v2", rc));
      continue;
    }
    read_identity(api, device, d);
    read_memory(nvml, device, d);
    read_processes(nvml, device, d);
  }
  return devices;
}

util::nvml_library open_nvml_for_run(std::string* note) {
  const char* name = util::nvml_library_name();
  util::nvml_library nvml = util::nvml_library::open(name, usable_for_run);
  std::string text;
  switch (nvml.failure()) {
    case util::nvml_failure::none: break;
    case util::nvml_failure::not_loaded: text = "NVML not available (" + nvml.failure_detail() + ")"; break;
    case util::nvml_failure::missing_symbols:
      text = std::string("NVML not usable (") + name + " lacks the _v2/_v3 entry points)";
      break;
    case util::nvml_failure::init_failed: text = "NVML not available (nvmlInit: " + nvml.failure_detail() + ")"; break;
  }
  if (note != nullptr) { *note = text; }
  return nvml;
}

std::vector<nvml_device> sample_for_run(const util::nvml_library& nvml, std::string* note) {
  std::string error;
  std::vector<nvml_device> devices = sample_devices(nvml, &error);
  std::string text = error;
  for (const nvml_device& d : devices) {
    if (!d.error.empty()) { text += (text.empty() ? "" : "; ") + ("device " + std::to_string(d.index) + ": " + d.error); }
  }
  if (note != nullptr) { *note = text; }
  return devices;
}

}  // namespace gpuguard::cli
