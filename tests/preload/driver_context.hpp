// What the driver-API test programs (driver_program.cpp, defer_program.cpp) share: a checked
// call, and device 0's primary context made current. The real driver needs a context; the
// stand-in (fake_driver.cpp) has none and needs none, so there `context` stays null.
#pragma once

#include <cuda.h>

#include <cstdio>

namespace gpuguard_test {

/// Whether `status` is success; else says which call of `program` failed, on stderr.
inline bool ok(const char* program, CUresult status, const char* what) {
  if (status == CUDA_SUCCESS) { return true; }
  std::fprintf(stderr, "%s: %s failed: %d\n", program, what, static_cast<int>(status));
  return false;
}

/// cuInit, then device 0's primary context retained and made current (real driver only).
inline bool init_driver(const char* program, CUcontext& context) {
  context = nullptr;
  CUdevice device = 0;
  if (!ok(program, cuInit(0), "cuInit")) { return false; }
  if (cuDeviceGet(&device, 0) == CUDA_SUCCESS &&
      !ok(program, cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain")) {
    return false;
  }
  return context == nullptr || ok(program, cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

}  // namespace gpuguard_test
