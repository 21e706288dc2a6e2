/**
 * @file host_memory_resource.hpp
 * @brief Ordinary host memory behind the resource interface, with an optional capacity, so the
 *        whole pipeline can run (and out-of-memory paths can be tested) on a machine with no GPU.
 */
#pragma once

#include <gpuguard/error.hpp>
#include <gpuguard/memory_resource.hpp>

#include <atomic>
#include <cstddef>
#include <limits>
#include <new>
#include <string>

namespace gpuguard {

/// Host memory aligned like `cudaMalloc`'s (256 bytes). With a capacity, an allocation that would
/// take the bytes in use past it throws `out_of_memory`, as a full device would.
class host_memory_resource final : public memory_resource {
 public:
  static constexpr std::size_t alignment = 256;
  static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

  explicit host_memory_resource(std::size_t capacity = unlimited) noexcept : capacity_(capacity) {}

  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t used() const noexcept { return used_.load(std::memory_order_relaxed); }

 private:
  void* do_allocate(std::size_t bytes, stream_view /*stream*/) override {
    std::size_t before = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > capacity_ - before) {
        throw out_of_memory("host_memory_resource: allocate(" + std::to_string(bytes) +
                            " bytes) on host: over capacity (" + std::to_string(capacity_) +
                            " bytes, " + std::to_string(before) + " in use)");
      }
    } while (!used_.compare_exchange_weak(before, before + bytes, std::memory_order_relaxed));
    void* ptr = ::operator new(bytes, std::align_val_t{alignment}, std::nothrow);
    if (ptr == nullptr) {
      used_.fetch_sub(bytes, std::memory_order_relaxed);
      throw out_of_memory("host_memory_resource: allocate(" + std::to_string(bytes) +
                          " bytes) on host: the system is out of memory");
    }
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t bytes, stream_view /*stream*/) noexcept override {
    ::operator delete(ptr, std::align_val_t{alignment});
    used_.fetch_sub(bytes, std::memory_order_relaxed);
  }
  [[nodiscard]] memory_kind do_kind() const noexcept override { return memory_kind::host; }

  std::size_t capacity_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace gpuguard
