/// @file
/// @brief The one way gpuguard ends processes, whoever ends them (`gpuguard run`'s supervisor and
/// anchor, `gpuguard doctor --reap`, gpuguard::spawn's child_process and exit paths): SIGTERM, and
/// SIGCONT to a stopped process (it acts on SIGTERM only once it runs); a grace period during
/// which the processes are looked up again every few milliseconds (new ones get SIGTERM too);
/// SIGKILL to what is left; then a bounded wait for them to go (a process in uninterruptible sleep,
/// such as one inside a GPU driver call, ends only when that call returns). Every signal goes
/// through send_checked_signal (signal.hpp), so a reused PID is never hit.
#pragma once

#include "process/proc_stat.hpp"
#include "process/signal.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuguard::detail {

/// The grace period's range, the same for every command: 0 to a day.
inline constexpr double max_grace_s = 86400.0;

/// Parses a grace period: plain decimal digits with an optional fraction ("5", "0.5", "10.25"),
/// from 0 to max_grace_s seconds. Milliseconds (rounded up), or nullopt for anything else.
std::optional<std::int64_t> parse_grace_ms(std::string_view text);

/// What happened to one process.
struct ended_process {
  proc_stat process;                 ///< as first seen
  signal_result first_signal = signal_result::sent;  ///< what the SIGTERM (or first SIGKILL) met
  bool sent_sigterm = false;
  bool sent_sigcont = false;         ///< it was seen stopped, and continued so that it sees SIGTERM
  bool sent_sigkill = false;
  bool ended = false;                ///< gone (or a zombie) by the end
  std::int64_t ended_after_ns = -1;  ///< from the start, when seen gone
  std::string signal_error;          ///< why a signal could not be sent ("Operation not permitted"); "" if none failed
};

/// What end_processes needs from its caller.
struct end_plan {
  std::int64_t grace_ms = 5000;      ///< SIGTERM to SIGKILL (0: SIGKILL at once)
  std::int64_t kill_wait_ms = 5000;  ///< after SIGKILL, how long to wait for them to go
  int rescan_ms = 10;                ///< how often `live` is asked again while waiting
  /// The live processes to end, asked at the start and after every wait: a fixed list looked up
  /// again, a process's descendants, the members of a cgroup or of process groups. A process it
  /// no longer returns (or returns with another start time) counts as ended.
  std::function<std::vector<proc_stat>()> live;
  /// Optional: collects zombies among the caller's own children (called before every `live`).
  std::function<void()> reap;
  /// Optional: waits up to `timeout_ms` (instead of sleeping); returns a signal number when the
  /// grace period is to be cut short (SIGKILL at once), else 0.
  std::function<int(int timeout_ms)> wait;
  /// Optional: ends every process at once when the SIGKILL phase starts (cgroup.kill, or SIGKILL
  /// to process groups that cannot be reused); returns true when it did, and every process still
  /// live then counts as sent SIGKILL. The per-process SIGKILLs follow for any it did not reach.
  std::function<bool()> kill_all;
};

/// The result, in the order the processes were first seen.
struct end_result {
  std::vector<ended_process> processes;
  int cut_short_by = 0;      ///< the signal `wait` returned, 0 when the grace period ran out
  std::int64_t duration_ns = 0;
};

/// Ends what `plan.live` returns (see the file comment). Returns when none is left or the kill
/// wait is over. Never throws but std::bad_alloc (and what the caller's functions throw).
end_result end_processes(const end_plan& plan);

}  // namespace gpuguard::detail
