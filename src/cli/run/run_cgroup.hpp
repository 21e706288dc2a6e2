/// @file
/// @brief The job's own cgroup (v2) for `gpuguard run`: a boundary nothing of the job escapes.
///
/// Where cgroup v2 is writable (a container with its own cgroup, a systemd scope with delegation,
/// root on a host), the supervisor makes a child of its own cgroup, `gpuguard-run.PID.PIDNS` (PIDNS:
/// the inode of its PID namespace, so that supervisors that are each PID 1 of a container do not
/// collide), and CMD
/// moves itself into it between fork and exec; every process CMD starts is born there, whatever
/// it does with sessions, process groups or double forks. The job is ended with `cgroup.kill`
/// (Linux 5.14+), which SIGKILLs every member at once, with no window in which a process being
/// forked is missed. Where it is not writable, the subreaper path alone ends the job.
#pragma once

#include "process/proc_stat.hpp"
#include "util/unique_fd.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace gpuguard::cli {

/// Movable, not copyable. Destroying one closes its cgroup.procs; the directory is removed by remove().
class job_cgroup {
 public:
  /// Makes `gpuguard-run.<supervisor>.<pid namespace inode>` under this process's cgroup v2 and opens its cgroup.procs
  /// (close-on-exec) for CMD to join. When cgroup v2 is not mounted, not writable, or lacks
  /// cgroup.kill, the result is not active() and why_not() says why; nothing is left behind.
  /// First removes empty `gpuguard-run.N.PIDNS` siblings of this PID namespace whose supervisor N
  /// is gone (a run whose supervisor and anchor were both killed leaves one). Never throws but std::bad_alloc.
  static job_cgroup create(pid_t supervisor);

  [[nodiscard]] bool active() const noexcept { return procs_fd_.valid(); }
  /// Why the cgroup is not used ("" when it is).
  [[nodiscard]] const std::string& why_not() const noexcept { return why_not_; }
  /// Its path as /proc/PID/cgroup shows it ("/gpuguard-run.4200.4026531836", or deeper).
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Its directory (under the cgroup2 mount).
  [[nodiscard]] const std::string& directory() const noexcept { return directory_; }
  /// cgroup.procs, open for writing: CMD writes "0" to it between fork and exec (a write(2) on a
  /// descriptor opened beforehand is async-signal-safe). -1 when not active.
  [[nodiscard]] int procs_fd() const noexcept { return procs_fd_.get(); }

  /// The live processes in it and in any cgroup below it (a nested `gpuguard run` makes one).
  [[nodiscard]] std::vector<detail::proc_stat> members() const;
  /// Writes "1" to cgroup.kill: SIGKILL to every member at once, and to any process being forked
  /// in it meanwhile. False when it could not.
  bool kill() const noexcept;
  /// Whether a live process is in it or below it (`populated` of cgroup.events; zombies do not
  /// count). True when cgroup.events cannot be read: emptiness is only what the kernel says.
  [[nodiscard]] bool populated() const noexcept;
  /// Waits up to `timeout_ms` for `populated 0` (poll on cgroup.events, which the kernel signals
  /// when it changes; read again every few milliseconds in case a notification is missed). True
  /// when the cgroup is empty: the proof that no process of the job is left.
  bool wait_empty(int timeout_ms) const noexcept;
  /// Removes the directory (and any below it), waiting up to `timeout_ms` for the killed members to
  /// leave. True when it is gone.
  bool remove(int timeout_ms) const;

 private:
  std::string directory_;
  std::string name_;
  std::string why_not_;
  detail::unique_fd procs_fd_;
};

/// The memory cgroup a process is charged to: where the kernel counts the OOM kills of its
/// processes. cgroup v2 where the process's v2 cgroup (or, where that one has no memory controller
/// of its own, the nearest ancestor that has: its counts include those below it) has the memory
/// controller; else the cgroup v1 hierarchy that holds the memory controller.
struct memory_cgroup {
  int version = 0;        // 2 or 1; 0: none found (why_not says why)
  std::string name;       // its path as /proc/PID/cgroup shows it ("/process_api/job")
  std::string directory;  // under its hierarchy's mount
  std::string why_not;

  [[nodiscard]] bool found() const noexcept { return version != 0; }
  /// "cgroup v2 /a/b" or "cgroup v1 memory:/a/b"
  [[nodiscard]] std::string text() const;
};

/// The memory cgroup of `pid` (0: this process), from /proc/PID/cgroup and /proc/self/mountinfo.
/// `v2_path`, when not empty, stands in for the process's cgroup v2 path (the job's cgroup that
/// CMD joins between fork and exec, for a count taken before CMD exists). Never throws but
/// std::bad_alloc.
memory_cgroup find_memory_cgroup(pid_t pid, const std::string& v2_path);

/// Its count of OOM kills: v2 memory.events `oom_kill`, v1 memory.oom_control `oom_kill` (Linux
/// 4.13+). nullopt when the file or the line cannot be read.
std::optional<std::uint64_t> read_oom_kills(const memory_cgroup& memory);

}  // namespace gpuguard::cli
