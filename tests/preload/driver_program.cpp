// A program that calls the CUDA driver API directly, linked against libcuda (the fake one on the
// CPU machine, the real one on the GPU): 4 MiB of cuMemAlloc and a 2 MiB physical allocation made
// with cuMemCreate and mapped stay live; a cuMemAlloc, a pinned cuMemHostAlloc and a second physical
// allocation are freed. So --track must see the driver API itself, and the virtual memory API.
#include "driver_context.hpp"

#include <cuda.h>

#include <cstdio>

namespace {

bool ok(CUresult status, const char* what) { return gpuguard_test::ok("driver_program", status, what); }

constexpr std::size_t mib = std::size_t{1024} * 1024;

}  // namespace

int main() {
  CUcontext context = nullptr;
  if (!gpuguard_test::init_driver("driver_program", context)) { return 1; }
  CUdeviceptr kept = 0;
  CUdeviceptr freed = 0;
  void* pinned = nullptr;
  if (!ok(cuMemAlloc(&kept, 4 * mib), "cuMemAlloc") || !ok(cuMemAlloc(&freed, mib), "cuMemAlloc") ||
      !ok(cuMemHostAlloc(&pinned, mib, 0), "cuMemHostAlloc")) {
    return 1;
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle physical[2] = {};
  CUdeviceptr range = 0;
  if (!ok(cuMemCreate(&physical[0], 2 * mib, &prop, 0), "cuMemCreate") ||
      !ok(cuMemCreate(&physical[1], 2 * mib, &prop, 0), "cuMemCreate")) {
    return 1;
  }
  if (context != nullptr) {
    // The mapping half runs on the real driver only (the fake one maps nothing).
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (!ok(cuMemAddressReserve(&range, 2 * mib, 0, 0, 0), "cuMemAddressReserve") ||
        !ok(cuMemMap(range, 2 * mib, 0, physical[0], 0), "cuMemMap") ||
        !ok(cuMemSetAccess(range, 2 * mib, &access, 1), "cuMemSetAccess")) {
      return 1;
    }
  } else if (!ok(cuMemMap(0x7000000, 2 * mib, 0, physical[0], 0), "cuMemMap")) {
    return 1;
  }
  ok(cuMemFree(freed), "cuMemFree");
  ok(cuMemFreeHost(pinned), "cuMemFreeHost");
  ok(cuMemRelease(physical[1]), "cuMemRelease");
  std::printf("driver_program: leaving 6 MiB in 2 allocations behind\n");
  return 0;
}
