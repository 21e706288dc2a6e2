/**
 * @file event.hpp
 * @brief `event`, an owning CUDA event, and the time elapsed between two of them.
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/detail/teardown.hpp>
#include <gpuguard/device.hpp>
#include <gpuguard/error.hpp>
#include <gpuguard/stream.hpp>

#include <chrono>
#include <string>
#include <type_traits>
#include <utility>

namespace gpuguard {

/// An owning CUDA event on the current device, destroyed on that device. Timing is on by
/// default, since measuring is what events are mostly made for here.
class event {
 public:
  /// @throws cuda_error if there is no device or creation fails.
  explicit event(unsigned int flags = cudaEventDefault) : device_(current_device()) {
    GPUGUARD_CUDA_TRY(cudaEventCreateWithFlags(&handle_, flags),
                      "cudaEventCreateWithFlags on device " + std::to_string(device_));
  }

  [[nodiscard]] static event adopt(cudaEvent_t handle, int device) noexcept {
    return event(handle, device);
  }

  event(const event&) = delete;
  event& operator=(const event&) = delete;
  event(event&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  event& operator=(event&& other) noexcept {
    std::swap(handle_, other.handle_);
    std::swap(device_, other.device_);
    return *this;
  }
  ~event() {
    if (handle_ == nullptr) { return; }
    const detail::teardown_device_guard on_device(device_, "cudaEventDestroy (enter its device)");
    if (on_device.entered()) { detail::report_teardown(cudaEventDestroy(handle_), "cudaEventDestroy"); }
  }

  [[nodiscard]] cudaEvent_t get() const noexcept { return handle_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] cudaEvent_t release() noexcept { return std::exchange(handle_, nullptr); }

  /// Records the event on `on` (which must belong to this event's device). @throws cuda_error.
  void record(stream_view on = {}) { GPUGUARD_CUDA_TRY(cudaEventRecord(handle_, on.get())); }
  /// Blocks until the recorded work is done. @throws cuda_error.
  void synchronize() const { GPUGUARD_CUDA_TRY(cudaEventSynchronize(handle_)); }
  /// True once the recorded work is done. @throws cuda_error on a failure other than "not ready".
  [[nodiscard]] bool ready() const {
    const cudaError_t status = cudaEventQuery(handle_);
    if (status == cudaErrorNotReady) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    GPUGUARD_CUDA_TRY(status, std::string("cudaEventQuery"));
    return true;
  }

 private:
  event(cudaEvent_t handle, int device) noexcept : handle_(handle), device_(device) {}

  cudaEvent_t handle_ = nullptr;
  int device_ = 0;
};

static_assert(!std::is_copy_constructible_v<event> && std::is_nothrow_move_constructible_v<event>,
              "event is move-only and nothrow movable");

/// Time between two recorded, completed events. @throws cuda_error (e.g. not recorded, or created
/// with cudaEventDisableTiming).
[[nodiscard]] inline std::chrono::duration<float, std::milli> elapsed_time(const event& start,
                                                                          const event& end) {
  float ms = 0.0F;
  GPUGUARD_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), end.get()));
  return std::chrono::duration<float, std::milli>(ms);
}

}  // namespace gpuguard
