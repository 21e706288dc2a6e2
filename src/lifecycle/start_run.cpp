// A tracked run's start: tracking turned on under the guards' resources (enable_tracking), or the
// ledger's reporting for another source (enable_ledger_reporting), and off again.
#include <gpuguard/core/tracking.hpp>

#include <gpuguard/current_resource.hpp>
#include <gpuguard/core/hooks.hpp>
#include <gpuguard/device.hpp>
#include <gpuguard/host_memory_resource.hpp>
#include <gpuguard/core/outputs.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include "exit/exit_paths.hpp"
#include "lifecycle/lifecycle.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <utility>
#include <vector>

namespace gpuguard {

namespace {

struct tracking_state {
  std::mutex mutex;
  bool enabled = false;
  bool reporting = false;  // enable_ledger_reporting: another source feeds the ledger
  bool exit_handler_registered = false;
  options opts;
  // What was current before enable_tracking, to put back on disable (slot -1: host fallback).
  std::vector<std::pair<int, memory_resource*>> previous_devices;
  memory_resource* previous_pinned = nullptr;
  bool pinned_replaced = false;
};

tracking_state& tracking() {
  static auto* s = new tracking_state();  // the exit handler reads it after statics are gone
  return *s;
}

}  // namespace

bool detail::reporting_options(options& out) {
  tracking_state& st = tracking();
  const std::lock_guard<std::mutex> lock(st.mutex);
  if (!st.enabled && !st.reporting) { return false; }
  out = st.opts;
  return true;
}

namespace {

// The resources made here are never freed: buffers hold pointers to them and may free through
// them at any time, up to and during exit.
template <class T, class... Args>
T* make_forever(Args&&... args) {
  return new T(std::forward<Args>(args)...);  // NOLINT: deliberate, see above
}

}  // namespace

void enable_tracking(const options& opts) {
  tracking_state& st = tracking();
  const std::lock_guard<std::mutex> lock(st.mutex);
  if (st.enabled) { return; }
  st.opts = opts;
  configure_ledger(opts);

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);  // also initialises the runtime
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    if (!detail::is_no_device_status(status)) {
      detail::throw_cuda_error(status, "gpuguard::enable_tracking: cudaGetDeviceCount");
    }
    count = 0;
  }
  count = std::min(count, max_devices);
  device_mode mode = opts.device;
  if (mode == device_mode::automatic) { mode = count > 0 ? device_mode::cuda : device_mode::host; }
  if (mode != device_mode::host && count == 0) {
    std::fprintf(stderr, "[gpuguard] device=%s asked for, but no CUDA device is usable: "
                 "tracking host memory instead (device=host)\n", to_string(opts.device));
    mode = device_mode::host;
  }

  st.previous_devices.clear();
  if (mode == device_mode::host) {
    const std::size_t capacity = opts.host_capacity == 0 ? host_memory_resource::unlimited : opts.host_capacity;
    auto* tracker = make_forever<tracking_resource>(*make_forever<host_memory_resource>(capacity),
                                                    host_device_id);
    std::fprintf(stderr, "[gpuguard] tracking host memory (device=host%s): device buffers are "
                 "allocated in host memory\n", opts.device == device_mode::automatic ? ", no CUDA device found" : "");
    st.previous_devices.emplace_back(host_device_id, set_current_resource(tracker, host_device_id));
    for (int d = 0; d < count; ++d) {
      st.previous_devices.emplace_back(d, set_current_resource(tracker, d));
    }
  } else {
    for (int d = 0; d < count; ++d) {
      memory_resource* upstream = mode == device_mode::async
                                      ? make_forever<cuda_async_memory_resource>()
                                      : get_current_resource(d);
      auto* tracker = make_forever<tracking_resource>(*upstream, d);
      st.previous_devices.emplace_back(d, set_current_resource(tracker, d));
    }
    auto* pinned = make_forever<tracking_resource>(*get_current_pinned_resource(), host_device_id);
    st.previous_pinned = set_current_pinned_resource(pinned);
    st.pinned_replaced = true;
  }
  if (!st.exit_handler_registered) {
    // Registered after the CUDA runtime initialised (cudaGetDeviceCount above), so it runs first
    // at exit, while device memory can still be inspected and freed.
    detail::register_exit_report();
    st.exit_handler_registered = true;
  }
  st.enabled = true;
  start_outputs(opts);
  if (opts.hooks) { install_hooks(opts); }
}

void enable_ledger_reporting(const options& opts) {
  tracking_state& st = tracking();
  {
    const std::lock_guard<std::mutex> lock(st.mutex);
    if (st.enabled || st.reporting) { return; }
    st.opts = opts;
    st.reporting = true;
  }
  configure_ledger(opts);
  start_outputs(opts);
  if (opts.hooks) { install_hooks(opts); }
  detail::register_exit_report();
}

void disable_tracking() noexcept {
  tracking_state& st = tracking();
  const std::lock_guard<std::mutex> lock(st.mutex);
  if (!st.enabled) { return; }
  for (const auto& [device, resource] : st.previous_devices) { set_current_resource(resource, device); }
  if (st.pinned_replaced) { set_current_pinned_resource(st.previous_pinned); }
  st.previous_devices.clear();
  st.pinned_replaced = false;
  st.enabled = false;
}

bool tracking_enabled() noexcept {
  tracking_state& st = tracking();
  const std::lock_guard<std::mutex> lock(st.mutex);
  return st.enabled;
}

}  // namespace gpuguard
