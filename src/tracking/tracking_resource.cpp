#include <gpuguard/core/tracking_resource.hpp>

#include <gpuguard/detail/teardown.hpp>
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>

#include <cuda.h>

namespace gpuguard {

namespace {

using context_device_fn = CUresult(CUDAAPI*)(CUdevice*);

/// The driver's cuCtxGetDevice, looked up once through the runtime; null if the driver has none.
context_device_fn driver_context_device() noexcept {
  static const context_device_fn fn = [] {
    void* found = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetDevice", &found, 12000, cudaEnableDefault, &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      static_cast<void>(cudaGetLastError());
      found = nullptr;
    }
    return reinterpret_cast<context_device_fn>(found);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  }();
  return fn;
}

/// The device current on this thread, or host_device_id if CUDA cannot say. The device of the
/// current context, asked of the driver: the runtime's cudaGetDevice answers the same where a
/// context is current (cudaSetDevice makes the device's primary context current), at a cost that
/// shows beside a stream-ordered pair. Where no context is current yet, the runtime answers.
int current_device_or_host() noexcept {
  // With one device in the process, the current device is that one, and nothing need be asked.
  static const bool single = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    return count == 1;
  }();
  if (single) { return 0; }
  if (const context_device_fn fn = driver_context_device(); fn != nullptr) {
    CUdevice device = 0;
    if (fn(&device) == CUDA_SUCCESS) { return device; }
  }
  int device = host_device_id;
  if (cudaGetDevice(&device) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return host_device_id;
  }
  return device;
}

}  // namespace

tracking_resource::tracking_resource(memory_resource& upstream, int device) noexcept
    : upstream_(&upstream), device_(device), kind_(upstream.kind()) {}

void* tracking_resource::do_allocate(std::size_t bytes, stream_view stream) {
  void* ptr = upstream_->allocate(bytes, stream);
#if !defined(GPUGUARD_VARIANT_NO_LEDGER)  // a measurement build leaves the ledger out (CMakeLists.txt)
  record_allocation(allocation_event{ptr, bytes, device_, stream.get(), kind_});
#endif
  return ptr;
}

void tracking_resource::do_deallocate(void* ptr, std::size_t bytes, stream_view stream) noexcept {
#if defined(GPUGUARD_VARIANT_NO_CTX)  // a measurement build: the resource's own device, not asked
  const int current = kind_ == memory_kind::device ? (static_cast<void>(&current_device_or_host), device_) : host_device_id;
#else
  const int current = kind_ == memory_kind::device ? current_device_or_host() : host_device_id;
#endif
#if defined(GPUGUARD_VARIANT_NO_LEDGER)
  free_result known;
  known.known = true;
  known.bytes = bytes;
  known.device = current;
#else
  const free_result known = record_free(ptr, bytes, current, stream.get());
#endif
  if (!known.known) { return; }
  if (kind_ == memory_kind::device && known.device != current) {
    const detail::teardown_device_guard on_device(known.device, "tracked free (enter its device)");
    if (on_device.entered()) { upstream_->deallocate(ptr, known.bytes, stream); }
    return;
  }
  upstream_->deallocate(ptr, known.bytes, stream);
}

memory_kind tracking_resource::do_kind() const noexcept { return kind_; }

bool tracking_resource::do_is_equal(const memory_resource& other) const noexcept {
  const auto* tracked = dynamic_cast<const tracking_resource*>(&other);
  return tracked != nullptr && tracked->upstream_->is_equal(*upstream_) && tracked->device_ == device_;
}

}  // namespace gpuguard
