/**
 * @file current_resource.hpp
 * @brief Which resource the guards allocate from: one per device, one for pinned host memory, and
 *        scoped overrides. This is where a tracking resource slots in under every guard.
 */
#pragma once

#include <gpuguard/cuda_memory_resources.hpp>
#include <gpuguard/device.hpp>
#include <gpuguard/memory_resource.hpp>

#include <atomic>
#include <new>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <utility>

namespace gpuguard {

namespace detail {

// Slot 0: pinned host memory; slot 1: host fallback when no GPU is usable; slot 2 + d: device d.
inline constexpr int pinned_slot = 0;
inline constexpr int host_slot = 1;

GPUGUARD_SHARED_STATE inline std::atomic<memory_resource*>& resource_slot(int slot) noexcept {
  static std::atomic<memory_resource*> slots[max_devices + 2] = {};
  return slots[slot];
}

inline int device_slot(int device) {
  if (device == host_device_id) { return host_slot; }
  if (device < 0 || device >= max_devices) {
    throw std::out_of_range("gpuguard: device " + std::to_string(device) +
                            " is outside 0.." + std::to_string(max_devices - 1));
  }
  return device + 2;
}

/// A function-local object that is never destroyed: buffers in static objects may still free
/// through the default resources while the process exits, after ordinary statics are gone.
template <class T>
GPUGUARD_SHARED_STATE T& never_destroyed() noexcept {
  static_assert(std::is_nothrow_default_constructible_v<T>, "constructed where it cannot throw");
  alignas(T) static unsigned char storage[sizeof(T)];
  static T* const object = ::new (static_cast<void*>(storage)) T();
  return *object;
}

inline memory_resource& default_device_resource() noexcept {
  return never_destroyed<cuda_memory_resource>();
}
inline memory_resource& default_pinned_resource() noexcept {
  return never_destroyed<pinned_memory_resource>();
}

/// The resource set for device `device` (not the host), or the default.
inline memory_resource& device_resource_or_default(int device) {
  memory_resource* set = resource_slot(device_slot(device)).load(std::memory_order_acquire);
  return set != nullptr ? *set : default_device_resource();
}

}  // namespace detail

/**
 * The resource device buffers on `device` allocate from: the one set for it, or `cudaMalloc`.
 * For `host_device_id`, the host fallback (nullptr when none is set).
 * @throws std::out_of_range for a device id outside 0..max_devices-1.
 */
[[nodiscard]] inline memory_resource* get_current_resource(int device) {
  if (device == host_device_id) {
    return detail::resource_slot(detail::host_slot).load(std::memory_order_acquire);
  }
  return &detail::device_resource_or_default(device);
}

/**
 * Makes `resource` current for `device` and returns the previous one (nullptr: the default).
 * The resource must outlive its use: buffers keep a pointer to the resource that made them.
 * Setting one for `host_device_id` makes buffers without an explicit resource fall back to it when
 * no GPU is usable (the CPU-only mode, `device=host`).
 */
inline memory_resource* set_current_resource(memory_resource* resource, int device) {
  return detail::resource_slot(detail::device_slot(device)).exchange(resource, std::memory_order_acq_rel);
}

/// The resource pinned host buffers allocate from: the one set, or `cudaMallocHost`.
[[nodiscard]] inline memory_resource* get_current_pinned_resource() noexcept {
  memory_resource* set = detail::resource_slot(detail::pinned_slot).load(std::memory_order_acquire);
  return set != nullptr ? set : &detail::default_pinned_resource();
}

/// Makes `resource` current for pinned host buffers; returns the previous one (nullptr: default).
inline memory_resource* set_current_pinned_resource(memory_resource* resource) noexcept {
  return detail::resource_slot(detail::pinned_slot).exchange(resource, std::memory_order_acq_rel);
}

/// A device and the resource buffers made there without an explicit resource use.
struct device_resource {
  int device;
  memory_resource* resource;
};

/**
 * The current device and its current resource. With no usable GPU and a host fallback set, that
 * fallback on `host_device_id`.
 * @throws cuda_error "no CUDA-capable device is available ..." with no GPU and no host fallback.
 */
[[nodiscard]] inline device_resource current_device_resource() {
  int device = 0;
  const cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) { return {device, &detail::device_resource_or_default(device)}; }
  if (detail::is_no_device_status(status)) {
    if (memory_resource* host = get_current_resource(host_device_id)) {
      static_cast<void>(cudaGetLastError());
      return {host_device_id, host};
    }
  }
  detail::throw_cuda_error(status, detail::is_no_device_status(status)
                                       ? detail::no_device_message("cudaGetDevice")
                                       : std::string("cudaGetDevice"));
}

/**
 * Makes a resource current (for a device, or for pinned host buffers) until the end of the scope,
 * then restores the one before. Overrides nest; they are process-wide, not per thread.
 */
class scoped_current_resource {
 public:
  /// Overrides the resource of `device`. @throws std::out_of_range for a bad device id.
  scoped_current_resource(memory_resource& resource, int device)
      : slot_(detail::device_slot(device)), previous_(set_current_resource(&resource, device)) {}

  /// Overrides the resource of pinned host buffers.
  struct pinned_t {};
  static constexpr pinned_t pinned{};
  scoped_current_resource(memory_resource& resource, pinned_t /*tag*/) noexcept
      : slot_(detail::pinned_slot), previous_(set_current_pinned_resource(&resource)) {}

  scoped_current_resource(const scoped_current_resource&) = delete;
  scoped_current_resource& operator=(const scoped_current_resource&) = delete;
  scoped_current_resource(scoped_current_resource&&) = delete;
  scoped_current_resource& operator=(scoped_current_resource&&) = delete;

  ~scoped_current_resource() {
    detail::resource_slot(slot_).store(previous_, std::memory_order_release);
  }

 private:
  int slot_;
  memory_resource* previous_;
};

}  // namespace gpuguard
