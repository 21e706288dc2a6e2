// libgpuguard_preload.so: `gpuguard run --track` preloads it into a program that was not changed.
// It interposes the CUDA runtime's allocation calls, passes each on to the real one (found with
// dlsym(RTLD_NEXT)) and records what succeeded in gpuguard's ledger, so the program gets the leak
// report, the outputs and the exit paths. What it cannot see (docs/run.md): a program that links
// the CUDA runtime statically (nvcc's default), the driver API (cuMemAlloc, cuMemCreate: PyTorch's
// expandable segments), and allocations inside CUDA libraries that do not go through these calls.
#include <gpuguard/ledger.hpp>
#include <gpuguard/options.hpp>
#include <gpuguard/tracking.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <dlfcn.h>
#include <unistd.h>

#define GPUGUARD_INTERPOSE extern "C" __attribute__((visibility("default")))

namespace {

std::atomic<std::uint64_t> intercepted{0};

// The real function `name`, looked up once. Null if no later object defines it (then the call
// fails with cudaErrorNotSupported, as a CUDA runtime that lacks it would).
template <class F>
F next_definition(const char* name) noexcept {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

int current_device() noexcept {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  return device;
}

// on_exit, so the report knows the status the process ends with (cleanup_timeout keeps it).
void exit_report(int status, void* /*unused*/) { gpuguard::run_exit_report(status); }

// After the first successful call the CUDA runtime is initialised: registering the exit report
// again now makes it run before the runtime's own teardown (handlers run in reverse order).
void after_first_call() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { static_cast<void>(::on_exit(exit_report, nullptr)); });
}

void record(void* ptr, std::size_t bytes, gpuguard::memory_kind kind, cudaStream_t stream) noexcept {
  intercepted.fetch_add(1, std::memory_order_relaxed);
  after_first_call();
  const int device = kind == gpuguard::memory_kind::pinned_host ? gpuguard::host_device_id : current_device();
  gpuguard::record_allocation({ptr, bytes, device, stream, kind});
}

void forget(void* ptr, bool host, cudaStream_t stream) noexcept {
  if (ptr == nullptr) { return; }
  intercepted.fetch_add(1, std::memory_order_relaxed);
  static_cast<void>(gpuguard::record_interposed_free(ptr, host ? gpuguard::host_device_id : current_device(), stream));
}

void say_what_was_not_seen() {
  if (intercepted.load(std::memory_order_relaxed) != 0) { return; }
  const bool runtime_loaded = ::dlopen("libcudart.so.13", RTLD_NOLOAD | RTLD_LAZY) != nullptr ||
                              ::dlopen("libcudart.so.12", RTLD_NOLOAD | RTLD_LAZY) != nullptr;
  std::fprintf(stderr, "[gpuguard] --track saw no CUDA runtime allocation in this process%s\n",
               runtime_loaded ? " (it allocated nothing through cudaMalloc and friends, or only through the driver API)"
                              : ": it may link the CUDA runtime statically (nvcc's default; build with -cudart shared "
                                "to track it) or not use CUDA at all");
}

__attribute__((constructor)) void start() {
  const gpuguard::options& opts = gpuguard::process_options();
  gpuguard::enable_ledger_reporting(opts);
  static_cast<void>(std::atexit(say_what_was_not_seen));
  const char* alloc_conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  if (alloc_conf != nullptr && std::strstr(alloc_conf, "expandable_segments:True") != nullptr) {
    std::fputs("[gpuguard] --track: PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True: PyTorch then maps "
               "memory through the driver API (cuMemCreate), which --track does not see\n", stderr);
  }
}

}  // namespace

// ---- the interposed calls -----------------------------------------------------------------------

GPUGUARD_INTERPOSE cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  static const auto real = next_definition<cudaError_t (*)(void**, std::size_t)>("cudaMalloc");
  if (real == nullptr) { return cudaErrorNotSupported; }
  const cudaError_t status = real(ptr, bytes);
  if (status == cudaSuccess && ptr != nullptr) { record(*ptr, bytes, gpuguard::memory_kind::device, nullptr); }
  return status;
}

GPUGUARD_INTERPOSE cudaError_t cudaMallocPitch(void** ptr, std::size_t* pitch, std::size_t width, std::size_t height) {
  static const auto real = next_definition<cudaError_t (*)(void**, std::size_t*, std::size_t, std::size_t)>("cudaMallocPitch");
  if (real == nullptr) { return cudaErrorNotSupported; }
  const cudaError_t status = real(ptr, pitch, width, height);
  if (status == cudaSuccess && ptr != nullptr && pitch != nullptr) {
    record(*ptr, *pitch * height, gpuguard::memory_kind::device, nullptr);
  }
  return status;
}

GPUGUARD_INTERPOSE cudaError_t cudaMallocManaged(void** ptr, std::size_t bytes, unsigned int flags) {
  static const auto real = next_definition<cudaError_t (*)(void**, std::size_t, unsigned int)>("cudaMallocManaged");
  if (real == nullptr) { return cudaErrorNotSupported; }
  const cudaError_t status = real(ptr, bytes, flags);
  if (status == cudaSuccess && ptr != nullptr) { record(*ptr, bytes, gpuguard::memory_kind::managed, nullptr); }
  return status;
}

GPUGUARD_INTERPOSE cudaError_t cudaFree(void* ptr) {
  static const auto real = next_definition<cudaError_t (*)(void*)>("cudaFree");
  if (real == nullptr) { return cudaErrorNotSupported; }
  forget(ptr, false, nullptr);
  return real(ptr);
}

namespace {

cudaError_t malloc_async(const char* name, void** ptr, std::size_t bytes, cudaStream_t stream) {
  const auto real = next_definition<cudaError_t (*)(void**, std::size_t, cudaStream_t)>(name);
  if (real == nullptr) { return cudaErrorNotSupported; }
  const cudaError_t status = real(ptr, bytes, stream);
  if (status == cudaSuccess && ptr != nullptr) { record(*ptr, bytes, gpuguard::memory_kind::device, stream); }
  return status;
}

cudaError_t free_async(const char* name, void* ptr, cudaStream_t stream) {
  const auto real = next_definition<cudaError_t (*)(void*, cudaStream_t)>(name);
  if (real == nullptr) { return cudaErrorNotSupported; }
  forget(ptr, false, stream);
  return real(ptr, stream);
}

}  // namespace

GPUGUARD_INTERPOSE cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t stream) {
  return malloc_async("cudaMallocAsync", ptr, bytes, stream);
}
// The per-thread-default-stream spellings (programs built with --default-stream per-thread).
GPUGUARD_INTERPOSE cudaError_t cudaMallocAsync_ptsz(void** ptr, std::size_t bytes, cudaStream_t stream) {
  return malloc_async("cudaMallocAsync_ptsz", ptr, bytes, stream);
}
GPUGUARD_INTERPOSE cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) { return free_async("cudaFreeAsync", ptr, stream); }
GPUGUARD_INTERPOSE cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  return free_async("cudaFreeAsync_ptsz", ptr, stream);
}

GPUGUARD_INTERPOSE cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  static const auto real = next_definition<cudaError_t (*)(void**, std::size_t)>("cudaMallocHost");
  if (real == nullptr) { return cudaErrorNotSupported; }
  const cudaError_t status = real(ptr, bytes);
  if (status == cudaSuccess && ptr != nullptr) { record(*ptr, bytes, gpuguard::memory_kind::pinned_host, nullptr); }
  return status;
}

GPUGUARD_INTERPOSE cudaError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned int flags) {
  static const auto real = next_definition<cudaError_t (*)(void**, std::size_t, unsigned int)>("cudaHostAlloc");
  if (real == nullptr) { return cudaErrorNotSupported; }
  const cudaError_t status = real(ptr, bytes, flags);
  if (status == cudaSuccess && ptr != nullptr) { record(*ptr, bytes, gpuguard::memory_kind::pinned_host, nullptr); }
  return status;
}

GPUGUARD_INTERPOSE cudaError_t cudaFreeHost(void* ptr) {
  static const auto real = next_definition<cudaError_t (*)(void*)>("cudaFreeHost");
  if (real == nullptr) { return cudaErrorNotSupported; }
  forget(ptr, true, nullptr);
  return real(ptr);
}
