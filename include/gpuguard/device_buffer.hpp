/**
 * @file device_buffer.hpp
 * @brief `device_buffer`, an untyped owner of memory from a resource, freed on its own device
 *        and stream.
 */
#pragma once

#include <gpuguard/current_resource.hpp>
#include <gpuguard/detail/teardown.hpp>
#include <gpuguard/device.hpp>
#include <gpuguard/error.hpp>
#include <gpuguard/memory_resource.hpp>
#include <gpuguard/stream.hpp>

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace gpuguard {

/**
 * Owns `size()` bytes from a memory resource. It remembers the device, stream and resource it was
 * made with; its destructor enters that device, frees on that stream, and restores the device that
 * was current. Size 0 is allowed and allocates nothing.
 */
class device_buffer {
 public:
  /// An empty buffer that owns nothing.
  device_buffer() noexcept = default;

  /**
   * Allocates `bytes` on the current device from its current resource, ordered on `stream`.
   * @throws out_of_memory, or cuda_error ("no CUDA-capable device ..." when there is none).
   */
  explicit device_buffer(std::size_t bytes, stream_view stream = {})
      : device_buffer(bytes, stream, current_device_resource()) {}

  /// Allocates `bytes` from `resource` (on the current device, unless it is host memory).
  device_buffer(std::size_t bytes, stream_view stream, memory_resource& resource)
      : device_buffer(bytes, stream, device_resource{device_for(resource), &resource}) {}

  /**
   * Takes ownership of `bytes` at `ptr`, which `resource` allocated on `device`.
   * The buffer will free it with `resource.deallocate(ptr, bytes, stream)` on that device.
   */
  [[nodiscard]] static device_buffer adopt(void* ptr, std::size_t bytes, stream_view stream,
                                           memory_resource& resource, int device) noexcept {
    device_buffer buffer;
    buffer.ptr_ = ptr;
    buffer.size_ = bytes;
    buffer.stream_ = stream;
    buffer.resource_ = &resource;
    buffer.device_ = device;
    return buffer;
  }

  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        stream_(other.stream_),
        resource_(other.resource_),
        device_(other.device_) {}
  device_buffer& operator=(device_buffer&& other) noexcept {
    swap(other);
    return *this;
  }
  ~device_buffer() { free(); }

  void swap(device_buffer& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(size_, other.size_);
    std::swap(stream_, other.stream_);
    std::swap(resource_, other.resource_);
    std::swap(device_, other.device_);
  }

  [[nodiscard]] void* data() noexcept { return ptr_; }
  [[nodiscard]] const void* data() const noexcept { return ptr_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] stream_view stream() const noexcept { return stream_; }
  /// The device the memory belongs to; `host_device_id` for host memory.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The resource that will free the memory (nullptr for a default-constructed buffer).
  [[nodiscard]] memory_resource* resource() const noexcept { return resource_; }

  /// Later frees (and copies) are ordered on `stream` instead; it must belong to the same device.
  void set_stream(stream_view stream) noexcept { stream_ = stream; }

  /// Gives up ownership. The caller frees the pointer with `resource()` on `device()`.
  [[nodiscard]] void* release() noexcept {
    size_ = 0;
    return std::exchange(ptr_, nullptr);
  }

  /// Copies `bytes` from host memory at `src` to the buffer at `offset`, and waits for the copy.
  /// @throws std::out_of_range past the end, cuda_error when the copy fails.
  void copy_from_host(const void* src, std::size_t bytes, std::size_t offset = 0) {
    check_range(bytes, offset, "copy_from_host");
    copy(static_cast<char*>(ptr_) + offset, src, bytes);
  }

  /// Copies `bytes` from the buffer at `offset` to host memory at `dst`, and waits for the copy.
  /// @throws std::out_of_range past the end, cuda_error when the copy fails.
  void copy_to_host(void* dst, std::size_t bytes, std::size_t offset = 0) const {
    check_range(bytes, offset, "copy_to_host");
    copy(dst, static_cast<const char*>(ptr_) + offset, bytes);
  }

 private:
  device_buffer(std::size_t bytes, stream_view stream, device_resource where)
      : size_(bytes), stream_(stream), resource_(where.resource), device_(where.device) {
    ptr_ = resource_->allocate(bytes, stream_);  // the device is current: the resource's rule
  }

  static int device_for(const memory_resource& resource) {
    return resource.kind() == memory_kind::host ? host_device_id : current_device();
  }

  void check_range(std::size_t bytes, std::size_t offset, const char* call) const {
    if (offset > size_ || bytes > size_ - offset) {
      throw std::out_of_range(std::string("gpuguard::device_buffer::") + call + ": " +
                              std::to_string(bytes) + " bytes at offset " +
                              std::to_string(offset) + " exceed the buffer's " +
                              std::to_string(size_) + " bytes");
    }
  }

  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0 || resource_ == nullptr) { return; }  // only an empty buffer has no resource
    if (resource_->kind() == memory_kind::host) {
      std::memcpy(dst, src, bytes);
      return;
    }
    const scoped_device on_device(device_);
    GPUGUARD_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_.get()),
                      detail::describe_allocation("cudaMemcpyAsync", bytes, device_));
    stream_.synchronize();
  }

  void free() noexcept {
    if (ptr_ == nullptr) { return; }
    const detail::teardown_device_guard on_device(device_, "device_buffer free (enter its device)");
    if (on_device.entered()) { resource_->deallocate(ptr_, size_, stream_); }
    ptr_ = nullptr;
    size_ = 0;
  }

  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  stream_view stream_{};
  memory_resource* resource_ = nullptr;
  int device_ = host_device_id;
};

static_assert(!std::is_copy_constructible_v<device_buffer> &&
                  !std::is_copy_assignable_v<device_buffer> &&
                  std::is_nothrow_move_constructible_v<device_buffer> &&
                  std::is_nothrow_move_assignable_v<device_buffer>,
              "device_buffer is move-only and nothrow movable");

}  // namespace gpuguard
