/**
 * @file stream.hpp
 * @brief `stream_view`, a non-owning stream handle, and `stream`, an owning one.
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/detail/teardown.hpp>
#include <gpuguard/device.hpp>
#include <gpuguard/error.hpp>

#include <string>
#include <type_traits>
#include <utility>

namespace gpuguard {

/// A non-owning, trivially copyable view of a CUDA stream. The default is the legacy default
/// stream (0), which needs no setup and exists on every device.
class stream_view {
 public:
  constexpr stream_view() noexcept = default;
  constexpr stream_view(cudaStream_t handle) noexcept : handle_(handle) {}  // NOLINT: implicit by design

  [[nodiscard]] constexpr cudaStream_t get() const noexcept { return handle_; }
  constexpr operator cudaStream_t() const noexcept { return handle_; }  // NOLINT

  /// Blocks until all work queued on the stream is done. @throws cuda_error.
  void synchronize() const { GPUGUARD_CUDA_TRY(cudaStreamSynchronize(handle_)); }

  friend constexpr bool operator==(stream_view a, stream_view b) noexcept {
    return a.handle_ == b.handle_;
  }
  friend constexpr bool operator!=(stream_view a, stream_view b) noexcept { return !(a == b); }

 private:
  cudaStream_t handle_ = nullptr;
};

static_assert(std::is_trivially_copyable_v<stream_view>, "stream_view is a plain handle");

/**
 * An owning, non-blocking CUDA stream created on the current device. It remembers that device and
 * destroys the stream there, whatever device is current when it ends.
 */
class stream {
 public:
  /// Creates a stream with `flags` (default: does not synchronise with the legacy stream).
  /// @throws cuda_error if there is no device or creation fails.
  explicit stream(unsigned int flags = cudaStreamNonBlocking) : device_(current_device()) {
    GPUGUARD_CUDA_TRY(cudaStreamCreateWithFlags(&handle_, flags),
                      "cudaStreamCreateWithFlags on device " + std::to_string(device_));
  }

  /// Takes ownership of an existing stream created on `device`.
  [[nodiscard]] static stream adopt(cudaStream_t handle, int device) noexcept {
    return stream(handle, device);
  }

  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream(stream&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  stream& operator=(stream&& other) noexcept {
    swap(other);
    return *this;
  }
  ~stream() { destroy(); }

  void swap(stream& other) noexcept {
    std::swap(handle_, other.handle_);
    std::swap(device_, other.device_);
  }

  [[nodiscard]] cudaStream_t get() const noexcept { return handle_; }
  [[nodiscard]] stream_view view() const noexcept { return stream_view(handle_); }
  operator stream_view() const noexcept { return view(); }  // NOLINT: a stream is usable as its view
  [[nodiscard]] int device() const noexcept { return device_; }

  void synchronize() const { view().synchronize(); }

  /// Gives up ownership; the caller must destroy the returned stream.
  [[nodiscard]] cudaStream_t release() noexcept { return std::exchange(handle_, nullptr); }

 private:
  stream(cudaStream_t handle, int device) noexcept : handle_(handle), device_(device) {}

  void destroy() noexcept {
    if (handle_ == nullptr) { return; }
    const detail::teardown_device_guard on_device(device_, "cudaStreamDestroy (enter its device)");
    if (on_device.entered()) { detail::report_teardown(cudaStreamDestroy(handle_), "cudaStreamDestroy"); }
    handle_ = nullptr;
  }

  cudaStream_t handle_ = nullptr;
  int device_ = 0;
};

static_assert(!std::is_copy_constructible_v<stream> && std::is_nothrow_move_constructible_v<stream> &&
                  std::is_nothrow_move_assignable_v<stream>,
              "stream is move-only and nothrow movable");

}  // namespace gpuguard
