/**
 * @file pinned_buffer.hpp
 * @brief `pinned_buffer<T>`, an owner of page-locked host memory, the staging area of fast,
 *        asynchronous copies.
 */
#pragma once

#include <gpuguard/current_resource.hpp>
#include <gpuguard/device_array.hpp>
#include <gpuguard/device_buffer.hpp>

#include <cstddef>
#include <type_traits>

namespace gpuguard {

/// `count` elements of `T` in pinned host memory, readable and writable from the host. By default
/// from the current pinned resource (`cudaMallocHost` unless overridden).
template <class T>
class pinned_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "pinned_buffer<T> needs a trivially copyable T");

 public:
  using value_type = T;

  pinned_buffer() noexcept = default;
  /// @throws out_of_memory, cuda_error (no GPU or driver: pinning needs one).
  explicit pinned_buffer(std::size_t count)
      : pinned_buffer(count, *get_current_pinned_resource()) {}
  pinned_buffer(std::size_t count, memory_resource& resource)
      : buffer_(detail::bytes_for<T>(count), stream_view{}, resource) {}

  [[nodiscard]] T* data() noexcept { return static_cast<T*>(buffer_.data()); }
  [[nodiscard]] const T* data() const noexcept { return static_cast<const T*>(buffer_.data()); }
  [[nodiscard]] std::size_t size() const noexcept { return buffer_.size() / sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return buffer_.empty(); }
  [[nodiscard]] T& operator[](std::size_t i) noexcept { return data()[i]; }
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return data()[i]; }
  [[nodiscard]] T* begin() noexcept { return data(); }
  [[nodiscard]] T* end() noexcept { return data() + size(); }
  [[nodiscard]] const T* begin() const noexcept { return data(); }
  [[nodiscard]] const T* end() const noexcept { return data() + size(); }

 private:
  device_buffer buffer_;
};

}  // namespace gpuguard
