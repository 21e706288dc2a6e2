/**
 * @file device_array.hpp
 * @brief `device_array<T>`, a typed owner of `size()` elements of trivially copyable `T`.
 */
#pragma once

#include <gpuguard/device_buffer.hpp>

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace gpuguard {

namespace detail {
template <class T>
std::size_t bytes_for(std::size_t count) {
  if (count > std::numeric_limits<std::size_t>::max() / sizeof(T)) {
    throw std::length_error("gpuguard: " + std::to_string(count) + " elements of " +
                            std::to_string(sizeof(T)) + " bytes overflow size_t");
  }
  return count * sizeof(T);
}
}  // namespace detail

/// `count` elements of `T` in memory from a resource (device memory by default), with the same
/// ownership rules as `device_buffer`. The elements are not initialised.
template <class T>
class device_array {
  static_assert(std::is_trivially_copyable_v<T>,
                "device_array<T> copies T as bytes between host and device: T must be trivially copyable");

 public:
  using value_type = T;

  device_array() noexcept = default;

  /// @throws out_of_memory, cuda_error, std::length_error when the byte count overflows.
  explicit device_array(std::size_t count, stream_view stream = {})
      : buffer_(detail::bytes_for<T>(count), stream) {}
  device_array(std::size_t count, stream_view stream, memory_resource& resource)
      : buffer_(detail::bytes_for<T>(count), stream, resource) {}

  /// Allocates `host.size()` elements and copies `host` into them.
  explicit device_array(const std::vector<T>& host, stream_view stream = {})
      : device_array(host.size(), stream) {
    copy_from_host(host);
  }
  device_array(const std::vector<T>& host, stream_view stream, memory_resource& resource)
      : device_array(host.size(), stream, resource) {
    copy_from_host(host);
  }

  [[nodiscard]] T* data() noexcept { return static_cast<T*>(buffer_.data()); }
  [[nodiscard]] const T* data() const noexcept { return static_cast<const T*>(buffer_.data()); }
  [[nodiscard]] std::size_t size() const noexcept { return buffer_.size() / sizeof(T); }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return buffer_.size(); }
  [[nodiscard]] bool empty() const noexcept { return buffer_.empty(); }
  [[nodiscard]] stream_view stream() const noexcept { return buffer_.stream(); }
  [[nodiscard]] int device() const noexcept { return buffer_.device(); }
  [[nodiscard]] const device_buffer& buffer() const noexcept { return buffer_; }

  /// Copies `host` (at most size() elements) to the front of the array and waits.
  void copy_from_host(const std::vector<T>& host) {
    buffer_.copy_from_host(host.data(), detail::bytes_for<T>(host.size()));
  }
  /// Copies the whole array to a new host vector and waits.
  [[nodiscard]] std::vector<T> to_host() const {
    std::vector<T> host(size());
    buffer_.copy_to_host(host.data(), size_bytes());
    return host;
  }

  /// Gives up ownership of the untyped storage.
  [[nodiscard]] device_buffer release_buffer() noexcept { return std::move(buffer_); }

 private:
  device_buffer buffer_;
};

}  // namespace gpuguard
