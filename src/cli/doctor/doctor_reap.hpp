/// @file
/// @brief Ending GPU holders for `gpuguard doctor --reap`: the identity check of each target, then
/// the process layer's one way of ending processes (process/end.hpp: SIGTERM, the grace period,
/// SIGKILL, through identity-checked signals), as `gpuguard run` ends its leftovers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpuguard::cli::doctor {

/// A process to end, identified by PID and start time (field 22 of /proc/PID/stat) as scanned.
struct reap_target {
  int pid = 0;
  std::uint64_t start_time = 0;
};

/// What happened to one target.
struct reap_outcome {
  /// "terminated" (ended after SIGTERM), "killed" (ended after SIGKILL), "gone" (had exited before
  /// any signal), "refused" (the PID now names another process, or it could not be verified: not
  /// signalled), "survived" (still alive after SIGKILL: stuck in the kernel), "failed" (a signal
  /// could not be sent).
  std::string action;
  std::vector<std::string> signals;  ///< the signals sent, in order ("SIGTERM", "SIGCONT", "SIGKILL")
  std::string detail;                ///< one sentence for people
};

/// "" when pidfd_open and pidfd_send_signal work here; else why not (Linux before 5.3, a seccomp
/// filter, ...): then signals go by kill(2) right after the start-time check (process/signal.hpp).
std::string pidfd_unavailable_reason();

/// Ends each target: re-reads the start time under `proc_root` and refuses when it differs from
/// the scanned one, then sends SIGTERM (and SIGCONT to a stopped process, so that it can act on
/// it) to all through pidfds, waits up to `grace_s` seconds for them to exit, sends SIGKILL to the
/// rest and waits up to `kill_wait_s` more. Returns one outcome per target, in order. Never throws for a
/// process that vanished or cannot be signalled.
std::vector<reap_outcome> reap(const std::vector<reap_target>& targets, const std::string& proc_root, double grace_s,
                               double kill_wait_s);

}  // namespace gpuguard::cli::doctor
