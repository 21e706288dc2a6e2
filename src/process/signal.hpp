/// @file
/// @brief The one way gpuguard signals a process it did not just fork: through a pidfd, after
/// checking the process's identity (PID and start time), so that a PID reused by an unrelated
/// process is never hit. Used by `gpuguard run`, `gpuguard doctor --reap` and gpuguard::spawn.
///
/// The policy where pidfds are missing (Linux before 5.3, or a seccomp filter that blocks
/// pidfd_open, as older container runtimes' default profiles do): the start time is compared and
/// kill(2) is sent right after. That leaves a window of microseconds in which the process could
/// exit, be reaped and its PID be handed to a new one (the PID space would have to wrap in that
/// time); refusing instead would leave the GPU memory held, which is what gpuguard exists to
/// prevent. Callers say in their output when this fallback was used (pidfd_unavailable_reason()).
#pragma once

#include "process/proc_stat.hpp"

#include <string>

namespace gpuguard::detail {

/// "" when pidfd_open and pidfd_send_signal work here; else why not. Probed once (with the
/// caller's own PID; nothing is sent) and remembered.
const std::string& pidfd_unavailable_reason();

/// What became of one signal.
enum class signal_result {
  sent,      ///< delivered to the process that was meant
  gone,      ///< the process had exited (or is a zombie's PID no longer readable)
  reused,    ///< the PID now names another process (a different start time): not signalled
  failed,    ///< the signal could not be sent; `*error` says why (EPERM: another user's process)
};

/// Sends `signal` (0 to probe) to the process `pid` that started at `start_time` (field 22 of
/// /proc/PID/stat as read under `proc_root`). Opens a pidfd first, then reads the start time:
/// while the pidfd is open and the process alive, the PID names nobody else, so the start time
/// read is the pidfd's process's. Without pidfds, see the policy above. On `failed`, `*error` (when
/// not null) says why ("Operation not permitted"); it is left alone otherwise. Never throws but
/// std::bad_alloc.
signal_result send_checked_signal(int pid, std::uint64_t start_time, int signal, std::string* error = nullptr,
                                  const std::string& proc_root = "/proc");

}  // namespace gpuguard::detail
