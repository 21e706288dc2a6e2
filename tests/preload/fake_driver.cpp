// A stand-in for the CUDA driver (built as libcuda.so.1 in a folder of its own), so that the
// interposer's CPU tests run real programs through real dynamic linking on a machine without a
// GPU. Memory is host memory. Like the real driver it hands out its entry points through
// cuGetProcAddress by base name, choosing the variant by the version and flags asked for, and
// answers a request for "cuGetProcAddress" itself. It is linked with -Bsymbolic, as the driver's
// own references are, so the addresses it hands out are its own definitions, never the preloaded ones.
//
// FAKE_DRIVER_HIDE_ALLOC=1 makes cuGetProcAddress("cuMemAlloc") return an internal function that
// is no exported entry point: the interposer must pass it through unwrapped and count it.
#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#undef cuGetProcAddress

#define FAKE extern "C" __attribute__((visibility("default")))

namespace {

CUresult take(void** ptr, std::size_t bytes) {
  if (ptr == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
  *ptr = std::malloc(bytes == 0 ? 1 : bytes);
  return *ptr != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult take_device(CUdeviceptr* ptr, std::size_t bytes) {
  void* p = nullptr;
  const CUresult status = take(&p, bytes);
  if (status == CUDA_SUCCESS) { *ptr = reinterpret_cast<CUdeviceptr>(p); }
  return status;
}
CUresult give(CUdeviceptr ptr) {
  std::free(reinterpret_cast<void*>(ptr));  // NOLINT(performance-no-int-to-ptr): device addresses are integers
  return CUDA_SUCCESS;
}

std::mutex handles_mutex;
std::unordered_map<CUmemGenericAllocationHandle, void*> handles;
CUmemGenericAllocationHandle next_handle = 0x1000;

CUresult hidden_alloc(CUdeviceptr* ptr, std::size_t bytes) { return take_device(ptr, bytes); }

}  // namespace

FAKE CUresult cuInit(unsigned int /*flags*/) { return CUDA_SUCCESS; }
FAKE CUresult cuDriverGetVersion(int* version) {
  *version = 13000;
  return CUDA_SUCCESS;
}
// FAKE_DRIVER_CONTEXT_DEVICE=N: the current context is device N's, of N + 1 devices (default 0, of
// one), so the interposer must ask cuCtxGetDevice which device an allocation is on.
int fake_context_device() {
  const char* value = std::getenv("FAKE_DRIVER_CONTEXT_DEVICE");
  return value != nullptr ? std::atoi(value) : 0;
}
FAKE CUresult cuDeviceGetCount(int* count) {
  *count = fake_context_device() + 1;
  return CUDA_SUCCESS;
}
// No device and no context: a program that asks for one runs its context-free path.
FAKE CUresult cuDeviceGet(CUdevice* /*device*/, int /*ordinal*/) { return CUDA_ERROR_NO_DEVICE; }
FAKE CUresult cuDevicePrimaryCtxRetain(CUcontext* /*context*/, CUdevice /*device*/) { return CUDA_ERROR_NO_DEVICE; }
FAKE CUresult cuCtxSetCurrent(CUcontext /*context*/) { return CUDA_ERROR_NO_DEVICE; }
FAKE CUresult cuMemAddressReserve(CUdeviceptr* /*ptr*/, size_t /*size*/, size_t /*alignment*/, CUdeviceptr /*addr*/,
                                  unsigned long long /*flags*/) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
FAKE CUresult cuMemSetAccess(CUdeviceptr /*ptr*/, size_t /*size*/, const CUmemAccessDesc* /*desc*/, size_t /*count*/) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
FAKE CUresult cuCtxGetDevice(CUdevice* device) {
  *device = fake_context_device();
  return CUDA_SUCCESS;
}
// Streams: the stand-in orders nothing, so the default stream (null) serves every caller.
FAKE CUresult cuStreamCreate(CUstream* stream, unsigned int /*flags*/) {
  *stream = nullptr;
  return CUDA_SUCCESS;
}
FAKE CUresult cuStreamSynchronize(CUstream /*stream*/) { return CUDA_SUCCESS; }
FAKE CUresult cuStreamDestroy_v2(CUstream /*stream*/) { return CUDA_SUCCESS; }
FAKE CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) { return take_device(ptr, bytes); }
FAKE CUresult cuMemAllocPitch_v2(CUdeviceptr* ptr, size_t* pitch, size_t width, size_t height, unsigned int /*element*/) {
  *pitch = (width + 511) / 512 * 512;
  return take_device(ptr, *pitch * height);
}
FAKE CUresult cuMemAllocManaged(CUdeviceptr* ptr, size_t bytes, unsigned int /*flags*/) { return take_device(ptr, bytes); }
FAKE CUresult cuMemAllocAsync(CUdeviceptr* ptr, size_t bytes, CUstream /*stream*/) { return take_device(ptr, bytes); }
FAKE CUresult cuMemAllocAsync_ptsz(CUdeviceptr* ptr, size_t bytes, CUstream /*stream*/) { return take_device(ptr, bytes); }
FAKE CUresult cuMemFree_v2(CUdeviceptr ptr) { return give(ptr); }
FAKE CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream /*stream*/) { return give(ptr); }
FAKE CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream /*stream*/) { return give(ptr); }
FAKE CUresult cuMemAllocHost_v2(void** ptr, size_t bytes) { return take(ptr, bytes); }
FAKE CUresult cuMemHostAlloc(void** ptr, size_t bytes, unsigned int /*flags*/) { return take(ptr, bytes); }
FAKE CUresult cuMemFreeHost(void* ptr) {
  std::free(ptr);
  return CUDA_SUCCESS;
}
FAKE CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* /*prop*/,
                          unsigned long long /*flags*/) {
  void* p = nullptr;
  if (const CUresult status = take(&p, bytes); status != CUDA_SUCCESS) { return status; }
  const std::lock_guard<std::mutex> lock(handles_mutex);
  *handle = next_handle++;
  handles[*handle] = p;
  return CUDA_SUCCESS;
}
FAKE CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const std::lock_guard<std::mutex> lock(handles_mutex);
  const auto it = handles.find(handle);
  if (it == handles.end()) { return CUDA_ERROR_INVALID_VALUE; }
  std::free(it->second);
  handles.erase(it);
  return CUDA_SUCCESS;
}
FAKE CUresult cuMemMap(CUdeviceptr /*ptr*/, size_t /*size*/, size_t /*offset*/, CUmemGenericAllocationHandle /*handle*/,
                       unsigned long long /*flags*/) {
  return CUDA_SUCCESS;
}
FAKE CUresult cuMemUnmap(CUdeviceptr /*ptr*/, size_t /*size*/) { return CUDA_SUCCESS; }

FAKE CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult* status);
FAKE CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}

FAKE CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult* status) {
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  struct row {
    const char* name;
    void* fn;
  };
  const row rows[] = {
      {"cuInit", reinterpret_cast<void*>(&cuInit)},
      {"cuDriverGetVersion", reinterpret_cast<void*>(&cuDriverGetVersion)},
      {"cuDeviceGetCount", reinterpret_cast<void*>(&cuDeviceGetCount)},
      {"cuCtxGetDevice", reinterpret_cast<void*>(&cuCtxGetDevice)},
      {"cuGetProcAddress", version >= 12000 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                                            : reinterpret_cast<void*>(&cuGetProcAddress)},
      {"cuMemAlloc", std::getenv("FAKE_DRIVER_HIDE_ALLOC") != nullptr ? reinterpret_cast<void*>(&hidden_alloc)
                                                                      : reinterpret_cast<void*>(&cuMemAlloc_v2)},
      {"cuMemAllocPitch", reinterpret_cast<void*>(&cuMemAllocPitch_v2)},
      {"cuMemAllocManaged", reinterpret_cast<void*>(&cuMemAllocManaged)},
      {"cuMemAllocAsync", per_thread ? reinterpret_cast<void*>(&cuMemAllocAsync_ptsz) : reinterpret_cast<void*>(&cuMemAllocAsync)},
      {"cuMemFree", reinterpret_cast<void*>(&cuMemFree_v2)},
      {"cuMemFreeAsync", per_thread ? reinterpret_cast<void*>(&cuMemFreeAsync_ptsz) : reinterpret_cast<void*>(&cuMemFreeAsync)},
      {"cuMemAllocHost", reinterpret_cast<void*>(&cuMemAllocHost_v2)},
      {"cuMemHostAlloc", reinterpret_cast<void*>(&cuMemHostAlloc)},
      {"cuMemFreeHost", reinterpret_cast<void*>(&cuMemFreeHost)},
      {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
      {"cuMemMap", reinterpret_cast<void*>(&cuMemMap)},
      {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap)},
  };
  for (const row& r : rows) {
    if (std::strcmp(r.name, symbol) == 0) {
      *pfn = r.fn;
      if (status != nullptr) { *status = CU_GET_PROC_ADDRESS_SUCCESS; }
      return CUDA_SUCCESS;
    }
  }
  *pfn = nullptr;
  if (status != nullptr) { *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; }
  return CUDA_ERROR_NOT_FOUND;
}
