/**
 * @file memory_resource.hpp
 * @brief The interface every allocator behind the guards implements.
 */
#pragma once

#include <gpuguard/stream.hpp>

#include <cstddef>

namespace gpuguard {

/// Where a resource's memory lives, which decides how owners enter a device and copy data.
enum class memory_kind {
  device,       ///< device memory of the device current at allocation (cudaMalloc, cudaMallocAsync)
  pinned_host,  ///< page-locked host memory (cudaMallocHost)
  managed,      ///< unified memory (cudaMallocManaged)
  host,         ///< ordinary host memory; needs no GPU (tests, `device=host`)
};

/// A short name for a memory kind, as reports print it.
constexpr const char* to_string(memory_kind kind) noexcept {
  switch (kind) {
    case memory_kind::device: return "device";
    case memory_kind::pinned_host: return "pinned_host";
    case memory_kind::managed: return "managed";
    case memory_kind::host: return "host";
  }
  return "unknown";
}

/**
 * A source of memory, in the shape of RMM's `device_memory_resource`: the public calls are
 * non-virtual and forward to the `do_` hooks, so that wrappers (tracking, statistics) see every
 * call in one place.
 *
 * Rules for callers: allocate and deallocate with the device the memory belongs to current;
 * deallocate with the same size (and, for stream-ordered resources, a stream on which the memory
 * is no longer in use). A size of 0 yields nullptr without calling the resource, and deallocating
 * nullptr does nothing.
 */
class memory_resource {
 public:
  memory_resource() = default;
  memory_resource(const memory_resource&) = default;
  memory_resource& operator=(const memory_resource&) = default;
  memory_resource(memory_resource&&) noexcept = default;
  memory_resource& operator=(memory_resource&&) noexcept = default;
  virtual ~memory_resource() = default;

  /// @throws out_of_memory when the memory is not there, cuda_error for other CUDA failures.
  [[nodiscard]] void* allocate(std::size_t bytes, stream_view stream = {}) {
    return bytes == 0 ? nullptr : do_allocate(bytes, stream);
  }

  void deallocate(void* ptr, std::size_t bytes, stream_view stream = {}) noexcept {
    if (ptr != nullptr) { do_deallocate(ptr, bytes, stream); }
  }

  [[nodiscard]] memory_kind kind() const noexcept { return do_kind(); }

  /// True if memory from one can be freed by the other.
  [[nodiscard]] bool is_equal(const memory_resource& other) const noexcept {
    return this == &other || do_is_equal(other);
  }

 private:
  virtual void* do_allocate(std::size_t bytes, stream_view stream) = 0;
  virtual void do_deallocate(void* ptr, std::size_t bytes, stream_view stream) noexcept = 0;
  [[nodiscard]] virtual memory_kind do_kind() const noexcept = 0;
  [[nodiscard]] virtual bool do_is_equal(const memory_resource& /*other*/) const noexcept {
    return false;
  }
};

}  // namespace gpuguard
