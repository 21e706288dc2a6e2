// What every exit path shares: the end-of-run work, handed over by lifecycle/, that runs once
// whichever path gets there first; the cleanups' signal-safe side; the crash file. Internal to
// libgpuguard.
#pragma once

#include <cstddef>

namespace gpuguard::detail {

/// The end-of-run work (lifecycle/finish_run.cpp: cleanups, children, the leak report and the
/// outputs' last lines), handed to the exit paths when the library loads, so that exit/ runs it
/// without knowing what it is.
using end_of_run_work = void (*)(const char* reason, bool normal_exit, int end_signal, int exit_status) noexcept;
void hand_end_of_run(end_of_run_work work) noexcept;

/// What quick_exit runs (lifecycle/finish_run.cpp: the outputs' buffered lines flushed), handed
/// over the same way; registered with at_quick_exit by register_exit_report.
using quick_exit_work = void (*)() noexcept;
void hand_quick_exit(quick_exit_work work) noexcept;

/**
 * Runs the end-of-run work once, whichever exit path gets here first (never in a process whose
 * state is a copy of another's: util/process_identity.hpp), with `reason` ("exit",
 * "terminate", "signal SIGTERM") for the log's `end` line. With `normal_exit`, leak_exitcode may
 * end the process with its status; other paths keep theirs. If the work takes longer than
 * cleanup_timeout, the process ends by `end_signal` (when not 0) or with `exit_status` (when not
 * negative; else EXIT_FAILURE). A path with no `end_signal` that was handed a termination signal
 * while it ran the work (hand_signal_to_exit) ends the process by that signal afterwards.
 *
 * The first caller decides how the process ends; a later caller on another thread never goes on
 * past the work half-done:
 *  - if the first ends by a signal, the later caller waits until the process is ended;
 *  - if the first is an exit path and the later one ends by a signal, the signal is handed over
 *    and the caller waits; if that work is already done, the call returns (the caller ends the
 *    process by its signal);
 *  - if both are exit paths, the call returns once the work is done.
 * A later call on the thread running the work returns at once. Defined in exit_work.cpp.
 */
void end_run(const char* reason, bool normal_exit, int end_signal = 0, int exit_status = -1) noexcept;

/// True once end_run has started.
bool run_finished() noexcept;

/**
 * Async-signal-safe: when an exit path (one without an end signal: exit(), run_exit_report) runs
 * the end-of-run work and has not finished it, hands it `sig`, and the process ends by `sig`
 * once the work is done; true then (also when a signal was handed over before: the first wins).
 * False when no exit path runs the work, or it has finished: the caller ends the process itself.
 */
bool hand_signal_to_exit(int sig) noexcept;

/// The signal handed to the exit path that runs the work (0: none), for the cleanup_timeout
/// watchdog: a hung exit work that a SIGTERM came into ends by SIGTERM, not with exit's status.
int handed_over_signal() noexcept;

/// Closes the hand-over (later signals end the process themselves) and, if a signal was handed
/// over, ends the process by it now: stdio flushed, an unused crash file removed. end_run calls
/// it after an exit path's work; the work calls it before it ends the process with a status of
/// its own (leak_exitcode).
void end_by_handed_signal() noexcept;

/// Registers the end-of-run work with on_exit (again), and the quick_exit work with
/// at_quick_exit (once). Handlers run in reverse order of
/// registration, so registering after the CUDA runtime initialised makes the work run before the
/// runtime's teardown. Running it twice does nothing the second time. Defined in exit_work.cpp.
void register_exit_report() noexcept;

/// Async-signal-safe: runs the pending signal-safe cleanups, highest priority first (cleanup.cpp).
void run_signal_safe_cleanups() noexcept;

/// The name of the cleanup that run_cleanups is running now, copied into `out` ("" between
/// cleanups), for the exit watchdog (cleanup.cpp).
void running_cleanup_name(char* out, std::size_t size) noexcept;

/// Ends the process by `sig` now, from any thread: default action, unblocked, raised (hooks.cpp).
[[noreturn]] void die_by_signal(int sig) noexcept;

/// Closes the crash file opened in advance and removes it if nothing was written (hooks.cpp).
/// Async-signal-safe; does nothing in a process whose state is a copy of another's (the file is
/// the parent's).
void discard_unused_crash_file() noexcept;

/// The event log's file descriptor (the JSONL sink's), so that the crash handler can end the log
/// with a `crash` line; -1 when there is none. Set by the sink when it opens and closes.
void set_event_log_fd(int fd) noexcept;

}  // namespace gpuguard::detail
