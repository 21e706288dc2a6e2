/**
 * @file device.hpp
 * @brief The current device: queries, and `scoped_device`, which restores it on every exit path.
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/detail/teardown.hpp>
#include <gpuguard/error.hpp>

#include <string>
#include <type_traits>

namespace gpuguard {

namespace detail {
/// Statuses that mean "this machine has no usable GPU" rather than a fault in the program.
constexpr bool is_no_device_status(cudaError_t status) noexcept {
  return status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver ||
         status == cudaErrorStubLibrary;
}

inline std::string no_device_message(const char* call) {
  return std::string("no CUDA-capable device is available (") + call + ")";
}
}  // namespace detail

/**
 * Number of CUDA devices visible to this process. 0 on a machine without a usable GPU (no device,
 * no driver or the toolkit's stub driver, or `CUDA_VISIBLE_DEVICES` hiding them all), so that a
 * program can ask before it touches a device; the runtime's last error is cleared then (where there
 * is no driver at all, the runtime reports that again on every call).
 * @throws cuda_error for any other failure of cudaGetDeviceCount, naming the call and the error.
 */
[[nodiscard]] inline int device_count() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess) { return count; }
  if (detail::is_no_device_status(status)) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  detail::throw_cuda_error(status, "cudaGetDeviceCount");
}

/// True when at least one CUDA device is usable. Never throws.
[[nodiscard]] inline bool has_device() noexcept {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  static_cast<void>(cudaGetLastError());
  return ok;
}

/**
 * The calling thread's current device.
 * @throws cuda_error whose message starts "no CUDA-capable device is available" when the machine
 *         has no usable GPU, and names the call and the CUDA error.
 */
[[nodiscard]] inline int current_device() {
  int device = 0;
  const cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) { return device; }
  detail::throw_cuda_error(status, detail::is_no_device_status(status)
                                       ? detail::no_device_message("cudaGetDevice")
                                       : std::string("cudaGetDevice"));
}

/**
 * Makes `device` current for the lifetime of this object and restores the previous device when it
 * ends, however the scope is left. Host memory (`host_device_id`) needs no device, so entering it
 * changes nothing. Use `GPUGUARD_SCOPED_DEVICE(dev);` to get a named guard.
 */
class scoped_device {
 public:
  /// @throws cuda_error if the current device cannot be read or `device` cannot be made current.
  explicit scoped_device(int device) {
    if (device == host_device_id) { return; }
    previous_ = current_device();
    if (previous_ != device) {
      GPUGUARD_CUDA_TRY(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
    }
  }

  scoped_device(const scoped_device&) = delete;
  scoped_device& operator=(const scoped_device&) = delete;
  scoped_device(scoped_device&&) = delete;
  scoped_device& operator=(scoped_device&&) = delete;

  ~scoped_device() {
    if (previous_ == host_device_id) { return; }
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now == previous_) { return; }
    detail::report_teardown(cudaSetDevice(previous_), "cudaSetDevice (restore previous device)");
  }

  /// The device that was current before this guard and will be again after it.
  [[nodiscard]] int previous() const noexcept { return previous_; }

 private:
  int previous_ = host_device_id;
};

static_assert(!std::is_copy_constructible_v<scoped_device> &&
                  !std::is_move_constructible_v<scoped_device>,
              "scoped_device is tied to its scope: neither copyable nor movable");

}  // namespace gpuguard

/// Declares a named `gpuguard::scoped_device` for the rest of the enclosing scope.
#define GPUGUARD_SCOPED_DEVICE(device) \
  ::gpuguard::scoped_device GPUGUARD_DETAIL_UNIQUE(gpuguard_scoped_device_)(device)
