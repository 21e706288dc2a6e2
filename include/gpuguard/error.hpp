/**
 * @file error.hpp
 * @brief Exceptions for CUDA failures and the one check macro that raises them.
 */
#pragma once

#include <gpuguard/config.hpp>

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace gpuguard {

/// A CUDA runtime call failed. `what()` names the call, the resource and the error.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(cudaError_t status, const std::string& message)
      : std::runtime_error(message), status_(status) {}

  /// The status the failing call returned.
  [[nodiscard]] cudaError_t status() const noexcept { return status_; }

 private:
  cudaError_t status_;
};

/// An allocation failed for lack of memory. A `std::bad_alloc`, so code that already handles
/// host out-of-memory handles this too.
class out_of_memory : public std::bad_alloc {
 public:
  explicit out_of_memory(std::string message) : message_(std::move(message)) {}
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

namespace detail {

/// "<what>: <error name>: <error text>", the one message format of every gpuguard CUDA error.
inline std::string format_cuda_error(const std::string& what, cudaError_t status) {
  std::string message = what;
  message += ": ";
  message += cudaGetErrorName(status);
  message += ": ";
  message += cudaGetErrorString(status);
  return message;
}

/// Throws for a failed status: `out_of_memory` for cudaErrorMemoryAllocation, `cuda_error`
/// otherwise. Clears the runtime's last error first, so the failure does not resurface from an
/// unrelated later call.
[[noreturn]] inline void throw_cuda_error(cudaError_t status, const std::string& what) {
  static_cast<void>(cudaGetLastError());
  if (status == cudaErrorMemoryAllocation) { throw out_of_memory(format_cuda_error(what, status)); }
  throw cuda_error(status, format_cuda_error(what, status));
}

/// "cudaMalloc(268435456 bytes) on device 0", the resource part of an allocation message.
inline std::string describe_allocation(const char* call, std::size_t bytes, int device) {
  std::string text = call;
  text += "(" + std::to_string(bytes) + " bytes) on ";
  text += device == host_device_id ? std::string("host") : "device " + std::to_string(device);
  return text;
}

}  // namespace detail
}  // namespace gpuguard

#define GPUGUARD_DETAIL_CUDA_TRY_2(call, what)                                      \
  do {                                                                              \
    const cudaError_t gpuguard_status_ = (call);                                    \
    if (gpuguard_status_ != cudaSuccess) {                                          \
      ::gpuguard::detail::throw_cuda_error(gpuguard_status_, (what));               \
    }                                                                               \
  } while (false)
#define GPUGUARD_DETAIL_CUDA_TRY_1(call) GPUGUARD_DETAIL_CUDA_TRY_2(call, #call)
#define GPUGUARD_DETAIL_CUDA_TRY_PICK(_1, _2, name, ...) name

/**
 * Runs a CUDA runtime call and throws `gpuguard::cuda_error` (or `gpuguard::out_of_memory`) if it
 * fails. `GPUGUARD_CUDA_TRY(call)` names the call by its source text; `GPUGUARD_CUDA_TRY(call,
 * what)` names it by `what`, a `std::string` expression evaluated only on failure, so a message
 * can carry sizes and devices at no cost on success.
 */
#define GPUGUARD_CUDA_TRY(...)                                                     \
  GPUGUARD_DETAIL_CUDA_TRY_PICK(__VA_ARGS__, GPUGUARD_DETAIL_CUDA_TRY_2,            \
                                GPUGUARD_DETAIL_CUDA_TRY_1, unused)(__VA_ARGS__)
