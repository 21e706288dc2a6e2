// What operation scopes and the exit report need from the outputs. Internal to libgpuguard.
#pragma once

#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/tracking.hpp>

namespace gpuguard::detail {

/// Settings scopes read on every entry, as bits of one word.
enum scope_flag : unsigned {
  scope_outputs_running = 1U << 0,
  scope_nvtx = 1U << 1,
  scope_device_query = 1U << 2,
};

/// The current flags. The first call in the process starts the outputs with process_options()
/// unless something has started (or stopped) them before.
unsigned scope_flags() noexcept;

struct thread_state;

/// Queues a finished operation of the thread that owns `thread` for the writer; drops (and
/// counts) it when the queue is full.
void submit(const op_result& op, thread_state& thread) noexcept;

/// stop_outputs with the leak report already collected by the caller (may be nullptr: none).
void stop_outputs_with(const char* reason, const leak_report* leaks) noexcept;

}  // namespace gpuguard::detail
