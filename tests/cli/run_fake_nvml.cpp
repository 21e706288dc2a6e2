// A stand-in for libnvidia-ml.so.1, so that `gpuguard run`'s NVML path (dlopen, the _v3 process
// queries and their "insufficient size" protocol) is tested on machines without a GPU. It lists
// the processes written in the file FAKE_NVML_PROCESSES names, one "DEVICE PID BYTES" line each
// (BYTES "-" for "not available"), on FAKE_NVML_DEVICES devices (default 1); FAKE_NVML_FAIL_INIT
// makes nvmlInit_v2 fail. The same source also builds a plain shared object the --track test
// preloads.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct process_info {  // nvmlProcessInfo_t
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct entry {
  unsigned device;
  process_info info;
};

std::vector<entry> read_entries() {
  std::vector<entry> entries;
  const char* path = std::getenv("FAKE_NVML_PROCESSES");
  if (path == nullptr) { return entries; }
  std::FILE* file = std::fopen(path, "r");
  if (file == nullptr) { return entries; }
  unsigned device = 0;
  unsigned pid = 0;
  char bytes[32];
  while (std::fscanf(file, "%u %u %31s", &device, &pid, bytes) == 3) {
    const unsigned long long value = std::strcmp(bytes, "-") == 0 ? ~0ULL : std::strtoull(bytes, nullptr, 10);
    entries.push_back(entry{device, process_info{pid, value, 0xFFFFFFFFU, 0xFFFFFFFFU}});
  }
  std::fclose(file);
  return entries;
}

unsigned device_count() {
  const char* text = std::getenv("FAKE_NVML_DEVICES");
  return text != nullptr ? static_cast<unsigned>(std::strtoul(text, nullptr, 10)) : 1U;
}

// Devices are handed out as pointers into this array.
int devices[16];

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int nvmlInit_v2() { return std::getenv("FAKE_NVML_FAIL_INIT") != nullptr ? 9 : 0; }

__attribute__((visibility("default"))) int nvmlShutdown() { return 0; }

__attribute__((visibility("default"))) const char* nvmlErrorString(int status) {
  return status == 9 ? "Driver Not Loaded" : "fake NVML error";
}

__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = device_count();
  return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= device_count() || index >= 16) { return 2; }  // NVML_ERROR_INVALID_ARGUMENT
  *device = &devices[index];
  return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned* count,
                                                                                   process_info* infos) {
  const auto index = static_cast<unsigned>(static_cast<int*>(device) - devices);
  std::vector<process_info> mine;
  for (const entry& e : read_entries()) {
    if (e.device == index) { mine.push_back(e.info); }
  }
  if (infos == nullptr || *count < mine.size()) {
    const bool enough = mine.empty();
    *count = static_cast<unsigned>(mine.size());
    return enough ? 0 : 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  }
  for (std::size_t i = 0; i < mine.size(); ++i) { infos[i] = mine[i]; }
  *count = static_cast<unsigned>(mine.size());
  return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetGraphicsRunningProcesses_v3(void*, unsigned* count,
                                                                                    process_info*) {
  *count = 0;
  return 0;
}

}  // extern "C"
