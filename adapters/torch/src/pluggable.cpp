// libgpuguard_torch_alloc.so: gpuguard's swap-in allocator for Python, through
// torch.cuda.memory.CUDAPluggableAllocator(path, "gpuguard_torch_alloc", "gpuguard_torch_free").
// The same two calls as the C++ swap-in (install_allocator); what Python's pluggable path cannot
// give (recordStream, memory statistics) is listed in docs/torch.md.
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/options.hpp>
#include <gpuguard/core/tracking.hpp>

#include "adapter_internal.hpp"

#include <sys/types.h>

#define GPUGUARD_TORCH_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// Loading the library is the user's "swap in" step: the ledger's report and outputs start here.
__attribute__((constructor)) void start() {
  gpuguard::enable_ledger_reporting(gpuguard::process_options());
  gpuguard::torch::detail::prepare_reports();
}

}  // namespace

/// PyTorch's pluggable allocation call. Throws torch.OutOfMemoryError (through c10) when the
/// device is full: PyTorch's pluggable allocator does not check for a null pointer.
GPUGUARD_TORCH_EXPORT void* gpuguard_torch_alloc(ssize_t size, int device, cudaStream_t stream) {
  return gpuguard::torch::detail::swap_allocate(static_cast<std::size_t>(size), device, stream);
}

/// PyTorch's pluggable free call.
GPUGUARD_TORCH_EXPORT void gpuguard_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream) {
  gpuguard::torch::detail::swap_deallocate(ptr, static_cast<std::size_t>(size), device, stream);
}
