#include <gpuguard/tracking_resource.hpp>

#include <gpuguard/detail/teardown.hpp>
#include <gpuguard/ledger.hpp>

namespace gpuguard {

tracking_resource::tracking_resource(memory_resource& upstream, int device) noexcept
    : upstream_(&upstream), device_(device), kind_(upstream.kind()) {}

void* tracking_resource::do_allocate(std::size_t bytes, stream_view stream) {
  void* ptr = upstream_->allocate(bytes, stream);
  record_allocation(allocation_event{ptr, bytes, device_, stream.get(), kind_});
  return ptr;
}

void tracking_resource::do_deallocate(void* ptr, std::size_t bytes, stream_view stream) noexcept {
  int current = host_device_id;
  if (kind_ == memory_kind::device && cudaGetDevice(&current) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    current = host_device_id;
  }
  const free_result known = record_free(ptr, bytes, current, stream.get());
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
