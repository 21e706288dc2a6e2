/**
 * @file cuda_memory_resources.hpp
 * @brief Resources over the CUDA runtime: plain, stream-ordered, pinned host and managed memory.
 */
#pragma once

#include <gpuguard/detail/teardown.hpp>
#include <gpuguard/error.hpp>
#include <gpuguard/memory_resource.hpp>

#include <cstddef>
#include <typeinfo>

namespace gpuguard {

namespace detail {
/// The device a failing call ran on, for its message; -1 when even that cannot be read.
inline int device_for_message() noexcept {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) { device = -1; }
  return device;
}

/// Stateless resources of one type are interchangeable.
template <class Resource>
bool same_type(const Resource& /*self*/, const memory_resource& other) noexcept {
  return typeid(other) == typeid(Resource);
}
}  // namespace detail

/// `cudaMalloc` / `cudaFree` on the current device. Frees synchronise the device, as cudaFree does.
class cuda_memory_resource final : public memory_resource {
 private:
  void* do_allocate(std::size_t bytes, stream_view /*stream*/) override {
    void* ptr = nullptr;
    GPUGUARD_CUDA_TRY(cudaMalloc(&ptr, bytes),
                      detail::describe_allocation("cudaMalloc", bytes, detail::device_for_message()));
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t /*bytes*/, stream_view /*stream*/) noexcept override {
    detail::report_teardown(cudaFree(ptr), "cudaFree");
  }
  [[nodiscard]] memory_kind do_kind() const noexcept override { return memory_kind::device; }
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override {
    return detail::same_type(*this, other);
  }
};

/// `cudaMallocAsync` / `cudaFreeAsync` from the current device's default memory pool: allocation
/// and free are ordered on the given stream, and freed memory is reused without a device sync.
class cuda_async_memory_resource final : public memory_resource {
 private:
  void* do_allocate(std::size_t bytes, stream_view stream) override {
    void* ptr = nullptr;
    GPUGUARD_CUDA_TRY(cudaMallocAsync(&ptr, bytes, stream.get()),
                      detail::describe_allocation("cudaMallocAsync", bytes,
                                                  detail::device_for_message()));
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t /*bytes*/, stream_view stream) noexcept override {
    detail::report_teardown(cudaFreeAsync(ptr, stream.get()), "cudaFreeAsync");
  }
  [[nodiscard]] memory_kind do_kind() const noexcept override { return memory_kind::device; }
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override {
    return detail::same_type(*this, other);
  }
};

/// `cudaMallocHost` / `cudaFreeHost`: page-locked host memory for fast, asynchronous copies.
class pinned_memory_resource final : public memory_resource {
 private:
  void* do_allocate(std::size_t bytes, stream_view /*stream*/) override {
    void* ptr = nullptr;
    GPUGUARD_CUDA_TRY(cudaMallocHost(&ptr, bytes),
                      detail::describe_allocation("cudaMallocHost", bytes, host_device_id));
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t /*bytes*/, stream_view /*stream*/) noexcept override {
    detail::report_teardown(cudaFreeHost(ptr), "cudaFreeHost");
  }
  [[nodiscard]] memory_kind do_kind() const noexcept override { return memory_kind::pinned_host; }
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override {
    return detail::same_type(*this, other);
  }
};

/// `cudaMallocManaged` (attached globally) / `cudaFree`: memory reachable from host and devices.
/// Ask only for what the card holds: oversubscribing managed memory can hang the GPU.
class managed_memory_resource final : public memory_resource {
 private:
  void* do_allocate(std::size_t bytes, stream_view /*stream*/) override {
    void* ptr = nullptr;
    GPUGUARD_CUDA_TRY(cudaMallocManaged(&ptr, bytes, cudaMemAttachGlobal),
                      detail::describe_allocation("cudaMallocManaged", bytes,
                                                  detail::device_for_message()));
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t /*bytes*/, stream_view /*stream*/) noexcept override {
    detail::report_teardown(cudaFree(ptr), "cudaFree (managed)");
  }
  [[nodiscard]] memory_kind do_kind() const noexcept override { return memory_kind::managed; }
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override {
    return detail::same_type(*this, other);
  }
};

}  // namespace gpuguard
