/**
 * @file detail/teardown.hpp
 * @brief The one place destructors send the status of a free, a destroy or a device restore.
 */
#pragma once

#include <gpuguard/config.hpp>

#include <atomic>
#include <cstdio>

namespace gpuguard {
namespace detail {

GPUGUARD_SHARED_STATE inline std::atomic<unsigned long>& teardown_error_counter() noexcept {
  static std::atomic<unsigned long> counter{0};
  return counter;
}

/// How many lines a process prints for teardown failures before it only counts them.
inline constexpr unsigned long teardown_report_limit = 10;

/**
 * Accepts a destructor's CUDA status. Success, "CUDA runtime unloading" and "context destroyed"
 * are silent: at process exit the runtime may already be gone and the driver reclaims the memory.
 * Anything else is counted and reported on stderr (the first few times), never thrown: a
 * destructor may run during unwinding.
 */
inline void report_teardown(cudaError_t status, const char* what) noexcept {
  if (status == cudaSuccess || status == cudaErrorCudartUnloading ||
      status == cudaErrorContextIsDestroyed) {
    return;
  }
  static_cast<void>(cudaGetLastError());
  const unsigned long seen = teardown_error_counter().fetch_add(1, std::memory_order_relaxed);
  if (seen < teardown_report_limit) {
    std::fprintf(stderr, "[gpuguard] teardown: %s: %s: %s\n", what, cudaGetErrorName(status),
                 cudaGetErrorString(status));
  } else if (seen == teardown_report_limit) {
    std::fprintf(stderr, "[gpuguard] teardown: further teardown errors are only counted\n");
  }
}

/**
 * Enters `device` for a destructor's free or destroy and restores the previous device after, like
 * `scoped_device` but without throwing: a failure is reported through `report_teardown` and
 * `entered()` says whether the free may go ahead (freeing in the wrong context is worse than a
 * leak the driver reclaims at exit). `host_device_id` needs no device and always succeeds.
 */
class teardown_device_guard {
 public:
  explicit teardown_device_guard(int device, const char* what) noexcept : what_(what) {
    if (device == host_device_id) { return; }
    if (const cudaError_t status = cudaGetDevice(&previous_); status != cudaSuccess) {
      report_teardown(status, what_);
      entered_ = false;
      return;
    }
    if (previous_ == device) {
      previous_ = host_device_id;  // nothing to restore
      return;
    }
    if (const cudaError_t status = cudaSetDevice(device); status != cudaSuccess) {
      report_teardown(status, what_);
      previous_ = host_device_id;
      entered_ = false;
    }
  }
  teardown_device_guard(const teardown_device_guard&) = delete;
  teardown_device_guard& operator=(const teardown_device_guard&) = delete;
  teardown_device_guard(teardown_device_guard&&) = delete;
  teardown_device_guard& operator=(teardown_device_guard&&) = delete;
  ~teardown_device_guard() {
    if (previous_ != host_device_id) { report_teardown(cudaSetDevice(previous_), what_); }
  }

  [[nodiscard]] bool entered() const noexcept { return entered_; }

 private:
  const char* what_;
  int previous_ = host_device_id;
  bool entered_ = true;
};

}  // namespace detail

/// Teardown failures seen so far in this process (frees, destroys and restores in destructors).
inline unsigned long teardown_error_count() noexcept {
  return detail::teardown_error_counter().load(std::memory_order_relaxed);
}

}  // namespace gpuguard
