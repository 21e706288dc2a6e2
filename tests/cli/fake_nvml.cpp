// The one stand-in for libnvidia-ml.so.1 that `gpuguard doctor` and `gpuguard run` load in tests
// (GPUGUARD_NVML_LIBRARY), so their NVML path runs on machines without a GPU: the same entry
// points, the same structs, the same protocols (nvmlMemory_v2_t's version field,
// NVML_ERROR_INSUFFICIENT_SIZE when the caller's process array is too small), answering from a
// spec file named by GPUGUARD_FAKE_NVML:
//
//   init_error CODE                                 nvmlInit_v2 fails with CODE
//   driver VERSION                                  nvmlSystemGetDriverVersion
//   device MINOR TOTAL RESERVED USED[,USED...] NAME one device; each memory query takes the next
//                                                   USED (the last repeats)
//   process DEVICE PID BYTES|na                     a compute process on device DEVICE (0-based)
//   mig DEVICE 0|1                                  device DEVICE (0-based) supports MIG, which is
//                                                   off (0) or on (1); other devices do not
//   uuid DEVICE UUID|error                          nvmlDeviceGetUUID of device DEVICE (0-based)
//                                                   answers UUID, or fails (error)
//
// A device's PCI bus id is 00000000:MM:00.0, MM its minor number in two hex digits (upper case);
// its UUID, unless a "uuid" line says otherwise, GPU-fa4e0000-0000-4000-8000-00000000MMMM, MMMM
// its minor number in four hex digits (lower case).
//
// Every process-list call that does not give room for all processes answers INSUFFICIENT_SIZE
// with the count needed, as NVML does; the number of such answers is what the doctor had to retry.
//
// The spec is read at nvmlInit_v2 and again at every nvmlDeviceGetCount_v2 (the start of each
// sample), so a process of the job under `gpuguard run` can add its own "process" line while NVML
// is open; the position in each device's USED list is kept until the next nvmlInit_v2. The same
// source also builds the plain shared object the `run --track` tests preload.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int success = 0;
constexpr int error_uninitialized = 1;
constexpr int error_invalid_argument = 2;
constexpr int error_not_supported = 3;
constexpr int error_not_found = 6;
constexpr int error_insufficient_size = 7;
constexpr int error_argument_version_mismatch = 25;

struct memory_v1 {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct memory_v2 {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
struct process_info {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct fake_device {
  unsigned minor = 0;
  unsigned long long total = 0;
  unsigned long long reserved = 0;
  std::vector<unsigned long long> used;
  std::size_t next_used = 0;
  std::string name;
  std::vector<process_info> processes;
  int mig = -1;       // -1: no MIG support; else its current mode
  std::string uuid;   // "" when nvmlDeviceGetUUID fails
};

struct fake_state {
  bool initialised = false;
  int init_error = 0;
  std::string driver = "999.99";
  std::vector<fake_device> devices;
};

fake_state& state() {
  static fake_state s;
  return s;
}

bool load_spec() {
  fake_state& s = state();
  std::vector<std::size_t> positions;  // where each device's USED list is: kept across re-reads
  for (const fake_device& d : s.devices) { positions.push_back(d.next_used); }
  const bool initialised = s.initialised;
  s = fake_state{};
  s.initialised = initialised;
  const char* path = std::getenv("GPUGUARD_FAKE_NVML");
  if (path == nullptr) { return true; }
  std::ifstream in(path);
  if (!in) { return false; }
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "init_error") {
      words >> s.init_error;
    } else if (kind == "driver") {
      words >> s.driver;
    } else if (kind == "device") {
      fake_device d;
      std::string used;
      words >> d.minor >> d.total >> d.reserved >> used;
      std::istringstream values(used);
      std::string v;
      while (std::getline(values, v, ',')) { d.used.push_back(std::stoull(v)); }
      std::getline(words >> std::ws, d.name);
      char uuid[64];
      std::snprintf(uuid, sizeof uuid, "GPU-fa4e0000-0000-4000-8000-00000000%04x", d.minor);
      d.uuid = uuid;
      if (s.devices.size() < positions.size()) { d.next_used = positions[s.devices.size()]; }
      s.devices.push_back(d);
    } else if (kind == "mig") {
      std::size_t device = 0;
      int mode = 0;
      words >> device >> mode;
      if (device >= s.devices.size()) { return false; }
      s.devices[device].mig = mode;
    } else if (kind == "uuid") {
      std::size_t device = 0;
      std::string uuid;
      words >> device >> uuid;
      if (device >= s.devices.size()) { return false; }
      s.devices[device].uuid = uuid == "error" ? "" : uuid;
    } else if (kind == "process") {
      std::size_t device = 0;
      unsigned pid = 0;
      std::string bytes;
      words >> device >> pid >> bytes;
      if (device >= s.devices.size()) { return false; }
      s.devices[device].processes.push_back(
          process_info{pid, bytes == "na" ? ~0ULL : std::stoull(bytes), 0xffffffffU, 0xffffffffU});
    }
  }
  return true;
}

fake_device* device_of(void* handle) {
  for (fake_device& d : state().devices) {
    if (&d == handle) { return &d; }
  }
  return nullptr;
}

}  // namespace

#define FAKE_NVML_API extern "C" __attribute__((visibility("default")))

FAKE_NVML_API int nvmlInit_v2() {
  state() = fake_state{};
  if (!load_spec()) { return error_invalid_argument; }
  if (state().init_error != 0) { return state().init_error; }
  state().initialised = true;
  return success;
}

FAKE_NVML_API int nvmlShutdown() {
  state().initialised = false;
  return success;
}

FAKE_NVML_API const char* nvmlErrorString(int rc) {
  switch (rc) {
    case success: return "Success";
    case error_uninitialized: return "Uninitialized";
    case error_invalid_argument: return "Invalid Argument";
    case error_insufficient_size: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case error_argument_version_mismatch: return "Argument Version Mismatch";
    default: return "Unknown Error";
  }
}

FAKE_NVML_API int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (version == nullptr || length <= state().driver.size()) { return error_insufficient_size; }
  std::memcpy(version, state().driver.c_str(), state().driver.size() + 1);
  return success;
}

FAKE_NVML_API int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!state().initialised) { return error_uninitialized; }
  static_cast<void>(load_spec());  // a sample starts: processes may have been added
  if (count == nullptr) { return error_invalid_argument; }
  *count = static_cast<unsigned int>(state().devices.size());
  return success;
}

FAKE_NVML_API int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (!state().initialised) { return error_uninitialized; }
  if (device == nullptr || index >= state().devices.size()) { return error_invalid_argument; }
  *device = &state().devices[index];
  return success;
}

FAKE_NVML_API int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  if (!state().initialised) { return error_uninitialized; }
  if (bus_id == nullptr || device == nullptr) { return error_invalid_argument; }
  for (fake_device& d : state().devices) {
    char own[32];
    std::snprintf(own, sizeof own, "00000000:%02X:00.0", d.minor);
    if (std::strcmp(own, bus_id) == 0) {
      *device = &d;
      return success;
    }
  }
  return error_not_found;
}

FAKE_NVML_API int nvmlDeviceGetMigMode(void* handle, unsigned int* current, unsigned int* pending) {
  const fake_device* d = device_of(handle);
  if (d == nullptr || current == nullptr || pending == nullptr) { return error_invalid_argument; }
  if (d->mig < 0) { return error_not_supported; }
  *current = static_cast<unsigned int>(d->mig);
  *pending = *current;
  return success;
}

FAKE_NVML_API int nvmlDeviceGetName(void* handle, char* name, unsigned int length) {
  const fake_device* d = device_of(handle);
  if (d == nullptr || name == nullptr) { return error_invalid_argument; }
  if (length <= d->name.size()) { return error_insufficient_size; }
  std::memcpy(name, d->name.c_str(), d->name.size() + 1);
  return success;
}

FAKE_NVML_API int nvmlDeviceGetUUID(void* handle, char* uuid, unsigned int length) {
  const fake_device* d = device_of(handle);
  if (d == nullptr || uuid == nullptr) { return error_invalid_argument; }
  if (d->uuid.empty()) { return error_not_supported; }
  if (length <= d->uuid.size()) { return error_insufficient_size; }
  std::memcpy(uuid, d->uuid.c_str(), d->uuid.size() + 1);
  return success;
}

FAKE_NVML_API int nvmlDeviceGetMinorNumber(void* handle, unsigned int* minor) {
  const fake_device* d = device_of(handle);
  if (d == nullptr || minor == nullptr) { return error_invalid_argument; }
  *minor = d->minor;
  return success;
}

namespace {
unsigned long long next_used(fake_device& d) {
  if (d.used.empty()) { return 0; }
  const unsigned long long v = d.used[std::min(d.next_used, d.used.size() - 1)];
  ++d.next_used;
  return v;
}
}  // namespace

FAKE_NVML_API int nvmlDeviceGetMemoryInfo(void* handle, memory_v1* memory) {
  fake_device* d = device_of(handle);
  if (d == nullptr || memory == nullptr) { return error_invalid_argument; }
  memory->used = next_used(*d) + d->reserved;
  memory->total = d->total;
  memory->free = d->total - memory->used;
  return success;
}

FAKE_NVML_API int nvmlDeviceGetMemoryInfo_v2(void* handle, memory_v2* memory) {
  fake_device* d = device_of(handle);
  if (d == nullptr || memory == nullptr) { return error_invalid_argument; }
  if (memory->version != (static_cast<unsigned>(sizeof(memory_v2)) | (2U << 24U))) {
    return error_argument_version_mismatch;
  }
  memory->used = next_used(*d);
  memory->reserved = d->reserved;
  memory->total = d->total;
  memory->free = d->total - memory->used - memory->reserved;
  return success;
}

FAKE_NVML_API int nvmlDeviceGetComputeRunningProcesses_v3(void* handle, unsigned int* count, process_info* infos) {
  const fake_device* d = device_of(handle);
  if (d == nullptr || count == nullptr) { return error_invalid_argument; }
  const auto needed = static_cast<unsigned int>(d->processes.size());
  if (*count < needed) {
    *count = needed;
    return error_insufficient_size;
  }
  if (needed > 0 && infos == nullptr) { return error_invalid_argument; }
  for (unsigned int i = 0; i < needed; ++i) { infos[i] = d->processes[i]; }
  *count = needed;
  return success;
}
