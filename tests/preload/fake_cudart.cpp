// A stand-in for the CUDA runtime, shaped as the real one reaches the driver: it loads
// libcuda.so.1 with dlopen, finds cuGetProcAddress_v2 with dlsym, asks it for "cuGetProcAddress"
// itself, and from then on finds every entry point through what that returned (CUDA >= 12; with
// FAKE_CUDART_VERSION=11030 it asks as CUDA 11.3-11.8 runtimes do and gets the version-1 lookup).
// Run against fake_driver.cpp on the CPU machine, it is what --track meets in a real program.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include <dlfcn.h>

#undef cuGetProcAddress

#define FAKE extern "C" __attribute__((visibility("default")))

namespace {

using lookup_v2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using lookup_v1 = CUresult (*)(const char*, void**, int, cuuint64_t);

struct driver {
  lookup_v2 v2 = nullptr;
  lookup_v1 v1 = nullptr;
  int version = 12000;

  template <class F>
  F get(const char* name) const {
    void* fn = nullptr;
    const CUresult status = v2 != nullptr ? v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, nullptr)
                                          : v1(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
    return status == CUDA_SUCCESS ? reinterpret_cast<F>(fn) : nullptr;
  }
};

const driver& the_driver() {
  static const driver d = [] {
    driver out;
    if (const char* v = std::getenv("FAKE_CUDART_VERSION")) { out.version = std::atoi(v); }
    void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      std::fprintf(stderr, "fake_cudart: %s\n", ::dlerror());
      std::exit(3);
    }
    auto first = reinterpret_cast<lookup_v2>(::dlsym(library, "cuGetProcAddress_v2"));
    void* self = nullptr;
    if (first == nullptr || first("cuGetProcAddress", &self, out.version, 0, nullptr) != CUDA_SUCCESS || self == nullptr) {
      std::fputs("fake_cudart: no cuGetProcAddress\n", stderr);
      std::exit(3);
    }
    if (out.version >= 12000) {
      out.v2 = reinterpret_cast<lookup_v2>(self);
    } else {
      out.v1 = reinterpret_cast<lookup_v1>(self);
    }
    return out;
  }();
  return d;
}

cudaError_t status_of(CUresult r) { return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorMemoryAllocation; }

template <class F>
F entry(const char* name) {
  const F fn = the_driver().get<F>(name);
  if (fn == nullptr) {
    std::fprintf(stderr, "fake_cudart: the driver has no %s\n", name);
    std::exit(3);
  }
  return fn;
}

}  // namespace

FAKE cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  static const auto fn = entry<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc");
  CUdeviceptr p = 0;
  const CUresult r = fn(&p, bytes);
  *ptr = reinterpret_cast<void*>(p);
  return status_of(r);
}
FAKE cudaError_t cudaMallocPitch(void** ptr, std::size_t* pitch, std::size_t width, std::size_t height) {
  static const auto fn = entry<CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned)>("cuMemAllocPitch");
  CUdeviceptr p = 0;
  const CUresult r = fn(&p, pitch, width, height, 4);
  *ptr = reinterpret_cast<void*>(p);
  return status_of(r);
}
FAKE cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t stream) {
  static const auto fn = entry<CUresult (*)(CUdeviceptr*, size_t, CUstream)>("cuMemAllocAsync");
  CUdeviceptr p = 0;
  const CUresult r = fn(&p, bytes, reinterpret_cast<CUstream>(stream));
  *ptr = reinterpret_cast<void*>(p);
  return status_of(r);
}
FAKE cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  static const auto fn = entry<CUresult (*)(void**, size_t)>("cuMemAllocHost");
  return status_of(fn(ptr, bytes));
}
FAKE cudaError_t cudaFree(void* ptr) {
  static const auto fn = entry<CUresult (*)(CUdeviceptr)>("cuMemFree");
  return status_of(fn(reinterpret_cast<CUdeviceptr>(ptr)));
}
FAKE cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  static const auto fn = entry<CUresult (*)(CUdeviceptr, CUstream)>("cuMemFreeAsync");
  return status_of(fn(reinterpret_cast<CUdeviceptr>(ptr), reinterpret_cast<CUstream>(stream)));
}
FAKE cudaError_t cudaFreeHost(void* ptr) {
  static const auto fn = entry<CUresult (*)(void*)>("cuMemFreeHost");
  return status_of(fn(ptr));
}
FAKE cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
FAKE cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
FAKE cudaError_t cudaDeviceReset() { return cudaSuccess; }
FAKE const char* cudaGetErrorString(cudaError_t /*status*/) { return "fake runtime error"; }
