// The driver-level half of libgpuguard_preload.so: every device, managed, pinned and mapped
// allocation a process makes reaches the CUDA driver through a handful of entry points, whoever
// asks (a statically or dynamically linked CUDA runtime, PyTorch's expandable segments, a program
// that calls the driver API). A program finds those entry points in one of three ways, and each is
// answered with gpuguard's wrapper (docs/run.md, "How --track sees allocations"):
//   1. it links libcuda and calls them: the preloaded library defines them first;
//   2. dlsym(libcuda, name): gpuguard's dlsym answers a known entry point with its wrapper;
//   3. cuGetProcAddress(name, version, flags): the CUDA runtime's way since CUDA 11.3. dlsym hands
//      out gpuguard's cuGetProcAddress, which answers the same way, and answers the runtime's
//      request for "cuGetProcAddress" itself with itself, so every later lookup comes here too.
// A wrapper is chosen by the identity of the address the real lookup returned, compared with the
// real driver's exported entry points, never by the name and version asked for: the driver decides
// which variant (_v2, _ptsz) a request gets, and gpuguard wraps exactly that one. Anything else
// (cuGetExportTable included) is passed through untouched.
#include "preload.hpp"
#include "ring.hpp"

#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <cuda.h>
#include <dlfcn.h>

// cuda.h renames these to their current variants; the older exported ones are wrapped too.
#undef cuGetProcAddress
#undef cuIpcOpenMemHandle

// Exported by the driver, declared by cuda.h only under CUDA_API_PER_THREAD_DEFAULT_STREAM or not
// at all (the version-1 spellings).
extern "C" {
CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags);
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags);
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
}

#define GPUGUARD_INTERPOSE extern "C" __attribute__((visibility("default")))

namespace gpuguard::preload {
namespace {

// ---- the entry points: wrapped ones first, then ones gpuguard only calls ----------------------
// The eight called most often come first: their real addresses share one cache line.
#define GPUGUARD_WRAPPED_ENTRIES(X)                                                                   \
  X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemFreeAsync)                               \
  X(cuMemAllocAsync_ptsz) X(cuMemFreeAsync_ptsz) X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz) \
  X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged)               \
  X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap)                                            \
  X(cuMemHostAlloc) X(cuMemAllocHost_v2) X(cuMemFreeHost) X(cuMemHostRegister_v2) X(cuMemHostUnregister) \
  X(cuIpcOpenMemHandle) X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle) X(cuMemImportFromShareableHandle)
#define GPUGUARD_CALLED_ENTRIES(X)                                                                    \
  X(cuCtxGetDevice) X(cuDeviceGetCount) X(cuDeviceGetPCIBusId) X(cuDeviceGetDefaultMemPool)           \
  X(cuMemPoolGetAttribute) X(cuMemGetAddressRange_v2)

enum class entry : int {
#define GPUGUARD_ENUM(name) name,
  GPUGUARD_WRAPPED_ENTRIES(GPUGUARD_ENUM)
  wrapped_count,
  before_called = wrapped_count - 1,
  GPUGUARD_CALLED_ENTRIES(GPUGUARD_ENUM)
  count
#undef GPUGUARD_ENUM
};
constexpr int wrapped_count = static_cast<int>(entry::wrapped_count);
constexpr int entry_count = static_cast<int>(entry::count);

constexpr std::array<const char*, entry_count> entry_names = {
#define GPUGUARD_NAME(name) #name,
    GPUGUARD_WRAPPED_ENTRIES(GPUGUARD_NAME) GPUGUARD_CALLED_ENTRIES(GPUGUARD_NAME)
#undef GPUGUARD_NAME
};

// The real driver's entry points, found once from the libcuda the process loaded.
alignas(64) std::array<std::atomic<void*>, entry_count> real_entries{};
std::atomic<bool> bound{false};
std::mutex bind_mutex;
std::atomic<std::uint64_t> wrapped{0};
std::atomic<std::uint64_t> unidentified{0};

void* real_dlsym(void* handle, const char* name) noexcept;

void bind_to(void* library) noexcept {
  if (library == nullptr) { return; }
  const std::lock_guard<std::mutex> lock(bind_mutex);
  if (bound.load(std::memory_order_relaxed)) { return; }
  // A lookup through the library's own handle finds its definitions, not the preloaded ones.
  for (int i = 0; i < entry_count; ++i) {
    real_entries[static_cast<std::size_t>(i)].store(real_dlsym(library, entry_names[static_cast<std::size_t>(i)]),
                                                    std::memory_order_relaxed);
  }
  bound.store(true, std::memory_order_release);
}

__attribute__((noinline, cold)) void bind_to_loaded_driver() noexcept {
  if (bound.load(std::memory_order_acquire)) { return; }
  void* library = ::dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  if (library == nullptr) { library = ::dlopen("libcuda.so", RTLD_NOLOAD | RTLD_LAZY); }
  bind_to(library);
}

// An entry point's type, as one that does not throw (the driver is C): a wrapper that ends with
// the real call then jumps to it rather than calling it, and adds no frame of its own.
template <class F>
struct nothrow_entry;
template <class R, class... A>
struct nothrow_entry<R (*)(A...)> {
  using type = R (*)(A...) noexcept;
};

template <class F>
__attribute__((always_inline)) inline typename nothrow_entry<F>::type real(entry e) noexcept {
  void* fn = real_entries[static_cast<std::size_t>(e)].load(std::memory_order_acquire);
  if (fn == nullptr && !bound.load(std::memory_order_acquire)) [[unlikely]] {
    bind_to_loaded_driver();
    fn = real_entries[static_cast<std::size_t>(e)].load(std::memory_order_acquire);
  }
  return reinterpret_cast<typename nothrow_entry<F>::type>(fn);
}

// A wrapper's call: the real entry point, or CUDA_ERROR_NOT_FOUND where the loaded driver lacks it
// (as that driver would answer a lookup of an entry point it does not have).
#define GPUGUARD_REAL(name, ...)                                                                           \
  const auto real_fn = ::gpuguard::preload::real<decltype(&::name)>(::gpuguard::preload::entry::name);     \
  if (real_fn == nullptr) { return CUDA_ERROR_NOT_FOUND; }                               \
  const CUresult status = real_fn(__VA_ARGS__)

// ---- side tables for what the ledger's (pointer, bytes) record does not say ------------------

struct vmm_handle {
  std::size_t bytes = 0;
  int device = 0;
  bool imported = false;
};
struct side_tables {
  std::mutex mutex;
  std::unordered_map<CUmemGenericAllocationHandle, vmm_handle> handles;
  std::unordered_map<CUdeviceptr, std::pair<std::size_t, CUmemGenericAllocationHandle>> mappings;
  std::unordered_map<CUdeviceptr, std::size_t> ipc;  // IPC mappings open: their size
  std::array<std::pair<CUmemoryPool, int>, 64> pools{};  // pools allocated from explicitly, and their device
  std::size_t pool_count = 0;
};
side_tables& sides() {
  static auto* s = new side_tables();  // used up to the last free at exit
  return *s;
}

const void* as_pointer(CUdeviceptr address) noexcept {
  return reinterpret_cast<const void*>(static_cast<std::uintptr_t>(address)); // NOLINT(performance-no-int-to-ptr): the driver API's addresses and handles are integers
}

void note_async_device(int device) noexcept {
  if (device < 0 || device >= 64) { return; }
  const std::uint64_t bit = std::uint64_t{1} << static_cast<unsigned>(device);
  if ((hot.async_devices.load(std::memory_order_relaxed) & bit) == 0) {
    hot.async_devices.fetch_or(bit, std::memory_order_relaxed);
    refresh_common();
  }
}

void note_pool(CUmemoryPool pool, int device) noexcept {
  side_tables& s = sides();
  const std::lock_guard<std::mutex> lock(s.mutex);
  for (std::size_t i = 0; i < s.pool_count; ++i) {
    if (s.pools[i].first == pool) { return; }
  }
  if (s.pool_count < s.pools.size()) { s.pools[s.pool_count++] = {pool, device}; }
}

// The device a stream's allocation lands on: the current context's (a stream of another context
// is rare, and asking the stream costs a driver call per allocation).
GPUGUARD_HOT_PATH CUresult alloc_async(entry which, CUdeviceptr* dptr, std::size_t bytes, CUstream stream, const void* caller) noexcept {
  const auto real_fn = real<decltype(&::cuMemAllocAsync)>(which);
  if (real_fn == nullptr) { return CUDA_ERROR_NOT_FOUND; }
  const CUresult status = real_fn(dptr, bytes, stream);
#if defined(GPUGUARD_VARIANT_BARE)  // a measurement build: the real call alone, nothing recorded
  if (caller != nullptr) { return status; }
#endif
  if (status == CUDA_SUCCESS && dptr != nullptr) {
    if (defer_common_allocation(as_pointer(*dptr), bytes, reinterpret_cast<cudaStream_t>(stream))) { return status; }
    const int device = context_device();
    note_async_device(device);
    record(as_pointer(*dptr), bytes, device, reinterpret_cast<cudaStream_t>(stream), memory_kind::device, caller);
  }
  return status;
}

CUresult alloc_from_pool(entry which, CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool, CUstream stream,
                         const void* caller) noexcept {
  const auto real_fn = real<decltype(&::cuMemAllocFromPoolAsync)>(which);
  if (real_fn == nullptr) { return CUDA_ERROR_NOT_FOUND; }
  const CUresult status = real_fn(dptr, bytes, pool, stream);
  if (status == CUDA_SUCCESS && dptr != nullptr) {
    const int device = context_device();
    note_pool(pool, device);
    record(as_pointer(*dptr), bytes, device, reinterpret_cast<cudaStream_t>(stream), memory_kind::device, caller);
  }
  return status;
}

// A stream-ordered free, recorded before it is passed on: the common one written to the ring here.
GPUGUARD_HOT_PATH inline void forget_async(CUdeviceptr dptr, CUstream stream) noexcept {
  const auto stream_id = reinterpret_cast<cudaStream_t>(stream);
  if (!defer_common_free(as_pointer(dptr), stream_id)) { forget(as_pointer(dptr), gpuguard::unknown_device, stream_id); }
}

GPUGUARD_HOT_PATH CUresult free_async(entry which, CUdeviceptr dptr, CUstream stream) noexcept {
  const auto real_fn = real<decltype(&::cuMemFreeAsync)>(which);
  if (real_fn == nullptr) { return CUDA_ERROR_NOT_FOUND; }
#if !defined(GPUGUARD_VARIANT_BARE)
  if (dptr != 0) { forget_async(dptr, stream); }
#endif
  return real_fn(dptr, stream);
}

CUresult ipc_open(entry which, CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) noexcept {
  const auto real_fn = real<decltype(&::cuIpcOpenMemHandle_v2)>(which);
  if (real_fn == nullptr) { return CUDA_ERROR_NOT_FOUND; }
  const CUresult status = real_fn(dptr, handle, flags);
  if (status == CUDA_SUCCESS && dptr != nullptr) {
    CUdeviceptr base = 0;
    std::size_t size = 0;
    const auto range = real<decltype(&::cuMemGetAddressRange_v2)>(entry::cuMemGetAddressRange_v2);
    if (range != nullptr && range(&base, &size, *dptr) != CUDA_SUCCESS) { size = 0; }
    side_tables& s = sides();
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.ipc[*dptr] = size;
  }
  return status;
}

}  // namespace

// ---- what preload.cpp asks of the driver ------------------------------------------------------

int context_device() noexcept {
  // With one device in the process, the context's device is that one: the driver is not asked
  // (cuCtxGetDevice would add a call to every stream-ordered allocation).
  std::int8_t one = hot.one_device.load(std::memory_order_relaxed);
  if (one < 0) {
    one = device_count() == 1 ? 1 : 0;
    hot.one_device.store(one, std::memory_order_relaxed);
    refresh_common();
  }
  if (one == 1) { return 0; }
  const auto get = real<decltype(&::cuCtxGetDevice)>(entry::cuCtxGetDevice);
  CUdevice device = 0;
  if (get == nullptr || get(&device) != CUDA_SUCCESS) { return 0; }
  return device;
}

bool driver_bound() noexcept { return bound.load(std::memory_order_acquire); }
std::uint64_t wrapped_lookups() noexcept { return wrapped.load(std::memory_order_relaxed); }
std::uint64_t unidentified_lookups() noexcept { return unidentified.load(std::memory_order_relaxed); }

int device_count() noexcept {
  const auto get = real<decltype(&::cuDeviceGetCount)>(entry::cuDeviceGetCount);
  int count = 0;
  if (get == nullptr || get(&count) != CUDA_SUCCESS) { return 0; }
  return count;
}

bool device_bus_id(int device, char* out, int size) noexcept {
  const auto get = real<decltype(&::cuDeviceGetPCIBusId)>(entry::cuDeviceGetPCIBusId);
  return get != nullptr && get(out, size, device) == CUDA_SUCCESS;
}

pool_figures pools_of(int device) noexcept {
  pool_figures figures;
  const auto attribute = real<decltype(&::cuMemPoolGetAttribute)>(entry::cuMemPoolGetAttribute);
  const auto default_pool = real<decltype(&::cuDeviceGetDefaultMemPool)>(entry::cuDeviceGetDefaultMemPool);
  if (attribute == nullptr) { return figures; }
  // The pools that served this device: those allocated from explicitly on it, and its default pool
  // if stream-ordered allocations used it.
  std::array<CUmemoryPool, 65> pools{};
  std::size_t count = 0;
  {
    side_tables& s = sides();
    const std::lock_guard<std::mutex> lock(s.mutex);
    for (std::size_t i = 0; i < s.pool_count; ++i) {
      if (s.pools[i].second == device) { pools[count++] = s.pools[i].first; }
    }
    const bool used_default = device >= 0 && device < 64 &&
                              ((hot.async_devices.load(std::memory_order_relaxed) >> static_cast<unsigned>(device)) & 1U) != 0;
    CUmemoryPool pool = nullptr;
    if (used_default && default_pool != nullptr && default_pool(&pool, device) == CUDA_SUCCESS) { pools[count++] = pool; }
  }
  for (std::size_t i = 0; i < count; ++i) {
    bool seen = pools[i] == nullptr;
    for (std::size_t j = 0; j < i; ++j) { seen = seen || pools[j] == pools[i]; }
    cuuint64_t reserved = 0;
    cuuint64_t used = 0;
    if (seen || attribute(pools[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS ||
        attribute(pools[i], CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS) {
      continue;
    }
    figures.reserved += reserved;
    figures.used += used;
    figures.known = true;
  }
  return figures;
}

import_figures imports() noexcept {
  import_figures figures;
  side_tables& s = sides();
  const std::lock_guard<std::mutex> lock(s.mutex);
  for (const auto& [address, size] : s.ipc) {
    figures.bytes += size;
    ++figures.mappings;
  }
  for (const auto& [handle, info] : s.handles) { figures.handles += info.imported ? 1 : 0; }
  return figures;
}

vmm_figures vmm() noexcept {
  vmm_figures figures;
  side_tables& s = sides();
  const std::lock_guard<std::mutex> lock(s.mutex);
  for (const auto& [handle, info] : s.handles) {
    if (info.imported) { continue; }
    ++figures.handles;
    figures.created_bytes += info.bytes;
  }
  for (const auto& [address, mapping] : s.mappings) {
    const auto it = s.handles.find(mapping.second);
    if (it != s.handles.end() && !it->second.imported) { figures.mapped_bytes += mapping.first; }
  }
  return figures;
}

}  // namespace gpuguard::preload

// ---- the wrappers, exported under the driver's own names (way 1) ------------------------------

using gpuguard::memory_kind;
using gpuguard::preload::forget;
using gpuguard::preload::record;
namespace pl = gpuguard::preload;

GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  const void* caller = __builtin_return_address(0);
  GPUGUARD_REAL(cuMemAlloc_v2, dptr, bytes);
  if (status == CUDA_SUCCESS && dptr != nullptr) {
    record(pl::as_pointer(*dptr), bytes, pl::context_device(), nullptr, memory_kind::device, caller);
  }
  return status;
}

GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                                        unsigned int element_bytes) {
  const void* caller = __builtin_return_address(0);
  GPUGUARD_REAL(cuMemAllocPitch_v2, dptr, pitch, width, height, element_bytes);
  if (status == CUDA_SUCCESS && dptr != nullptr && pitch != nullptr) {
    record(pl::as_pointer(*dptr), *pitch * height, pl::context_device(), nullptr, memory_kind::device, caller);
  }
  return status;
}

GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  const void* caller = __builtin_return_address(0);
  GPUGUARD_REAL(cuMemAllocManaged, dptr, bytes, flags);
  if (status == CUDA_SUCCESS && dptr != nullptr) {
    record(pl::as_pointer(*dptr), bytes, pl::context_device(), nullptr, memory_kind::managed, caller);
  }
  return status;
}

GPUGUARD_INTERPOSE GPUGUARD_HOT_PATH CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return pl::alloc_async(pl::entry::cuMemAllocAsync, dptr, bytes, stream, __builtin_return_address(0));
}
GPUGUARD_INTERPOSE GPUGUARD_HOT_PATH CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return pl::alloc_async(pl::entry::cuMemAllocAsync_ptsz, dptr, bytes, stream, __builtin_return_address(0));
}
GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                                             CUstream stream) {
  return pl::alloc_from_pool(pl::entry::cuMemAllocFromPoolAsync, dptr, bytes, pool, stream,
                             __builtin_return_address(0));
}
GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                                                  CUstream stream) {
  return pl::alloc_from_pool(pl::entry::cuMemAllocFromPoolAsync_ptsz, dptr, bytes, pool, stream,
                             __builtin_return_address(0));
}

GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  const auto real_fn = pl::real<decltype(&::cuMemFree_v2)>(pl::entry::cuMemFree_v2);
  if (real_fn == nullptr) { return CUDA_ERROR_NOT_FOUND; }
  if (dptr != 0) { forget(pl::as_pointer(dptr), gpuguard::unknown_device, nullptr); }
  return real_fn(dptr);
}
GPUGUARD_INTERPOSE GPUGUARD_HOT_PATH CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return pl::free_async(pl::entry::cuMemFreeAsync, dptr, stream);
}
GPUGUARD_INTERPOSE GPUGUARD_HOT_PATH CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return pl::free_async(pl::entry::cuMemFreeAsync_ptsz, dptr, stream);
}

// Physical memory (the virtual memory management API, PyTorch's expandable segments): the ledger
// records the physical allocation under its handle's value when it is made, and forgets it when it
// is released; the mappings of it say how much of it is in the address space.
GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                                                 const CUmemAllocationProp* prop, unsigned long long flags) {
  const void* caller = __builtin_return_address(0);
  GPUGUARD_REAL(cuMemCreate, handle, bytes, prop, flags);
  if (status == CUDA_SUCCESS && handle != nullptr && prop != nullptr) {
    const bool on_device = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    const int device = on_device ? prop->location.id : gpuguard::host_device_id;
    {
      pl::side_tables& s = pl::sides();
      const std::lock_guard<std::mutex> lock(s.mutex);
      s.handles[*handle] = {bytes, device, false};
    }
    record(pl::as_pointer(*handle), bytes, device, nullptr,
           on_device ? memory_kind::device : memory_kind::pinned_host, caller);
  }
  return status;
}

GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  const auto real_fn = pl::real<decltype(&::cuMemRelease)>(pl::entry::cuMemRelease);
  if (real_fn == nullptr) { return CUDA_ERROR_NOT_FOUND; }
  bool known = false;
  pl::vmm_handle info;
  {
    pl::side_tables& s = pl::sides();
    const std::lock_guard<std::mutex> lock(s.mutex);
    if (const auto it = s.handles.find(handle); it != s.handles.end()) {
      known = true;
      info = it->second;
      s.handles.erase(it);
    }
  }
  if (known && !info.imported) {
    forget(pl::as_pointer(handle), info.device, nullptr);
  }
  return real_fn(handle);
}

GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                              CUmemGenericAllocationHandle handle, unsigned long long flags) {
  GPUGUARD_REAL(cuMemMap, ptr, size, offset, handle, flags);
  if (status == CUDA_SUCCESS) {
    pl::side_tables& s = pl::sides();
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.mappings[ptr] = {size, handle};
  }
  return status;
}

GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  GPUGUARD_REAL(cuMemUnmap, ptr, size);
  if (status == CUDA_SUCCESS) {
    pl::side_tables& s = pl::sides();
    const std::lock_guard<std::mutex> lock(s.mutex);
    // An unmap covers whole mappings: every mapping that starts inside the range goes.
    for (auto it = s.mappings.begin(); it != s.mappings.end();) {
      it = it->first >= ptr && it->first < ptr + size ? s.mappings.erase(it) : std::next(it);
    }
  }
  return status;
}

GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                                                    CUmemAllocationHandleType type) {
  GPUGUARD_REAL(cuMemImportFromShareableHandle, handle, os_handle, type);
  if (status == CUDA_SUCCESS && handle != nullptr) {
    pl::side_tables& s = pl::sides();
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.handles[*handle] = {0, 0, true};
  }
  return status;
}

// Memory of another process, opened here: shown as imported, not recorded as this process's.
GPUGUARD_INTERPOSE CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  return pl::ipc_open(pl::entry::cuIpcOpenMemHandle, dptr, handle, flags);
}
GPUGUARD_INTERPOSE CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  return pl::ipc_open(pl::entry::cuIpcOpenMemHandle_v2, dptr, handle, flags);
}
GPUGUARD_INTERPOSE CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  GPUGUARD_REAL(cuIpcCloseMemHandle, dptr);
  if (status == CUDA_SUCCESS) {
    pl::side_tables& s = pl::sides();
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.ipc.erase(dptr);
  }
  return status;
}

// Pinned host memory.
GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  const void* caller = __builtin_return_address(0);
  GPUGUARD_REAL(cuMemHostAlloc, pp, bytes, flags);
  if (status == CUDA_SUCCESS && pp != nullptr) {
    record(*pp, bytes, gpuguard::host_device_id, nullptr, memory_kind::pinned_host, caller);
  }
  return status;
}
GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytes) {
  const void* caller = __builtin_return_address(0);
  GPUGUARD_REAL(cuMemAllocHost_v2, pp, bytes);
  if (status == CUDA_SUCCESS && pp != nullptr) {
    record(*pp, bytes, gpuguard::host_device_id, nullptr, memory_kind::pinned_host, caller);
  }
  return status;
}
GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemFreeHost(void* p) {
  const auto real_fn = pl::real<decltype(&::cuMemFreeHost)>(pl::entry::cuMemFreeHost);
  if (real_fn == nullptr) { return CUDA_ERROR_NOT_FOUND; }
  if (p != nullptr) { forget(p, gpuguard::host_device_id, nullptr); }
  return real_fn(p);
}
// Host memory the program allocated and then page-locked: recorded as pinned until unregistered.
GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  const void* caller = __builtin_return_address(0);
  GPUGUARD_REAL(cuMemHostRegister_v2, p, bytes, flags);
  if (status == CUDA_SUCCESS) { record(p, bytes, gpuguard::host_device_id, nullptr, memory_kind::pinned_host, caller); }
  return status;
}
GPUGUARD_INTERPOSE CUresult CUDAAPI cuMemHostUnregister(void* p) {
  const auto real_fn = pl::real<decltype(&::cuMemHostUnregister)>(pl::entry::cuMemHostUnregister);
  if (real_fn == nullptr) { return CUDA_ERROR_NOT_FOUND; }
  const CUresult status = real_fn(p);
  if (status == CUDA_SUCCESS && p != nullptr) { forget(p, gpuguard::host_device_id, nullptr); }
  return status;
}

// ---- lookups (ways 2 and 3) -------------------------------------------------------------------

namespace gpuguard::preload {
namespace {

const std::array<void*, wrapped_count> wrappers = {
#define GPUGUARD_WRAPPER(name) reinterpret_cast<void*>(&::name),
    GPUGUARD_WRAPPED_ENTRIES(GPUGUARD_WRAPPER)
#undef GPUGUARD_WRAPPER
};

// The wrapper for a real entry point's address, or the address itself when it is none of them.
void* wrapper_for(const char* name, void* address) noexcept {
  if (address == nullptr) { return nullptr; }
  for (int i = 0; i < wrapped_count; ++i) {
    if (real_entries[static_cast<std::size_t>(i)].load(std::memory_order_relaxed) == address) {
      wrapped.fetch_add(1, std::memory_order_relaxed);
      note_wrapped_lookup();
      return wrappers[static_cast<std::size_t>(i)];
    }
  }
  // A memory entry point gpuguard did not recognise: counted, so the report can say so.
  if (name != nullptr && (std::strncmp(name, "cuMemAlloc", 10) == 0 || std::strncmp(name, "cuMemFree", 9) == 0 ||
                          std::strcmp(name, "cuMemCreate") == 0 || std::strcmp(name, "cuMemRelease") == 0)) {
    bool ours = false;
    for (void* w : wrappers) { ours = ours || w == address; }
    if (!ours) { unidentified.fetch_add(1, std::memory_order_relaxed); }
  }
  return address;
}

}  // namespace
}  // namespace gpuguard::preload

GPUGUARD_INTERPOSE CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                                         cuuint64_t flags, CUdriverProcAddressQueryResult* symbol_status) {
  GPUGUARD_REAL(cuGetProcAddress_v2, symbol, pfn, cuda_version, flags, symbol_status);
  if (status == CUDA_SUCCESS && pfn != nullptr) { *pfn = pl::wrapper_for(symbol, *pfn); }
  return status;
}

GPUGUARD_INTERPOSE CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  GPUGUARD_REAL(cuGetProcAddress, symbol, pfn, cuda_version, flags);
  if (status == CUDA_SUCCESS && pfn != nullptr) { *pfn = pl::wrapper_for(symbol, *pfn); }
  return status;
}

// ---- dlsym ------------------------------------------------------------------------------------
// gpuguard's dlsym asks the hook first; for a name it does not answer it jumps to the real dlsym
// with the caller's registers and return address untouched, so that RTLD_NEXT and RTLD_DEFAULT
// still resolve relative to the code that called dlsym. (A dlsym hook that calls the real one
// instead makes RTLD_NEXT relative to itself: HAMi-core's reports of recursion and crashes.)

extern "C" {
struct gpuguard_dlsym_answer {
  void* symbol;
  std::uintptr_t answered;  // 0: not answered, jump to the real dlsym
};
__attribute__((visibility("hidden"), used)) void* gpuguard_preload_real_dlsym = nullptr;

using dlsym_fn = void* (*)(void*, const char*);

// The C library's dlsym, found once (glibc 2.34 moved it into libc under a new version).
dlsym_fn c_library_dlsym() noexcept {
  void* found = __atomic_load_n(&gpuguard_preload_real_dlsym, __ATOMIC_ACQUIRE);
  if (found == nullptr) {
    found = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (found == nullptr) { found = ::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"); }
    __atomic_store_n(&gpuguard_preload_real_dlsym, found, __ATOMIC_RELEASE);
  }
  return reinterpret_cast<dlsym_fn>(found);
}

__attribute__((visibility("hidden"), used)) gpuguard_dlsym_answer gpuguard_preload_dlsym_hook(void* handle,
                                                                                               const char* name) noexcept {
  static_cast<void>(c_library_dlsym());
  // Only the driver's names, and only through a handle (RTLD_NEXT is the caller's business).
  if (name == nullptr || name[0] != 'c' || name[1] != 'u' || handle == RTLD_NEXT || gpuguard_preload_real_dlsym == nullptr) {
    return {nullptr, 0};
  }
  void* address = c_library_dlsym()(handle, name);
  if (address == nullptr) { return {nullptr, 0}; }  // the real one again: it sets dlerror
  if (!pl::driver_bound() && (std::strcmp(name, "cuGetProcAddress_v2") == 0 || std::strcmp(name, "cuGetProcAddress") == 0)) {
    // The driver being looked up: bind to the library that defines it (libcuda, wherever it is).
    Dl_info info{};
    if (::dladdr(address, &info) != 0 && info.dli_fname != nullptr) {
      pl::bind_to(::dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY));
    }
  }
  if (!pl::driver_bound()) { return {address, 1}; }
  return {pl::wrapper_for(name, address), 1};
}
}

namespace gpuguard::preload {
namespace {
// gpuguard's own lookups through a library's handle (which do not depend on who calls).
void* real_dlsym(void* handle, const char* name) noexcept {
  const dlsym_fn fn = c_library_dlsym();
  return fn != nullptr ? fn(handle, name) : nullptr;
}
}  // namespace
}  // namespace gpuguard::preload

#if defined(__x86_64__)
// dlsym(handle, name): save the arguments, ask the hook; answered: return its symbol; else restore
// the arguments and jump (not call) to the real dlsym.
asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call gpuguard_preload_dlsym_hook
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rdx, %rdx
    jnz 1f
    jmpq *gpuguard_preload_real_dlsym(%rip)
1:
    ret
    .cfi_endproc
    .size dlsym, .-dlsym
)");
#else
// Elsewhere a C++ dlsym: RTLD_NEXT asked by other code resolves relative to this library.
GPUGUARD_INTERPOSE void* dlsym(void* handle, const char* name) noexcept {
  const gpuguard_dlsym_answer answer = gpuguard_preload_dlsym_hook(handle, name);
  if (answer.answered != 0) { return answer.symbol; }
  return c_library_dlsym()(handle, name);
}
#endif
