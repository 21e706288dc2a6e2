// What every exit path shares: the end-of-run work (cleanups, children, leak report, the outputs'
// end lines) that runs once, whichever path gets there first. Internal to libgpuguard.
#pragma once

#include <cstddef>

#include <sys/types.h>

namespace gpuguard::detail {

/**
 * Runs the end of the run once: cleanups, termination of spawned children's process groups,
 * the leak report (text and JSON, when tracking is on) and the outputs' last lines, with `reason`
 * ("exit", "terminate", "signal SIGTERM") in the log's `end` line. With `normal_exit`,
 * leak_exitcode may end the process with its status; other paths keep theirs. Later calls return
 * at once. If it takes longer than cleanup_timeout, the process ends by `end_signal` (when not 0)
 * or with `exit_status` (when not negative; else EXIT_FAILURE). In a child made by fork() there
 * is no leak report: it is the parent's. Defined in finish_run.cpp.
 */
void finish_run(const char* reason, bool normal_exit, int end_signal = 0, int exit_status = -1) noexcept;

/// True once finish_run has started.
bool run_finished() noexcept;

/// Registers the exit report with atexit (again). Handlers run in reverse order of registration,
/// so registering after the CUDA runtime initialised makes the report run before its teardown.
/// Running the report twice does nothing the second time. Defined in finish_run.cpp.
void register_exit_report() noexcept;

/// Async-signal-safe: runs the pending signal-safe cleanups, highest priority first (cleanup.cpp).
void run_signal_safe_cleanups() noexcept;

/// The name of the cleanup that run_cleanups is running now, copied into `out` ("" between
/// cleanups), for the exit watchdog (cleanup.cpp).
void running_cleanup_name(char* out, std::size_t size) noexcept;

/// Ends the process by `sig` now, from any thread: default action, unblocked, raised (hooks.cpp).
[[noreturn]] void die_by_signal(int sig) noexcept;

/// Closes the crash file opened in advance and removes it if nothing was written (hooks.cpp).
void discard_unused_crash_file() noexcept;

/// Process groups of children started with gpuguard::spawn (process/child_process.cpp).
/// Async-signal-safe: sends SIGKILL to every registered group.
void kill_child_groups() noexcept;
/// SIGTERM to every registered group, up to `grace_ms` for them to go, then SIGKILL.
void end_child_groups(int grace_ms) noexcept;

/// The event log's file descriptor (the JSONL sink's), so that the crash handler can end the log
/// with a `crash` line; -1 when there is none. Set by the sink when it opens and closes.
void set_event_log_fd(int fd) noexcept;

}  // namespace gpuguard::detail
