/// @file
/// @brief The process machinery of `gpuguard run`: start CMD, forward signals to it, reap, and
///        when CMD ends, end every process it left behind and look for the ones that still hold
///        a GPU device.
///
/// Three processes take part (docs/run.md has the picture):
///  - the supervisor (the `gpuguard run` process): a child subreaper; forwards signals to CMD's
///    process group, learns how CMD ended, ends the leftovers, writes the summary and the report;
///  - the anchor, its child (comm `gpuguard-anchor`): also a child subreaper, parent of CMD. It
///    reaps, tells the supervisor how CMD ended, and, when the supervisor dies (even by SIGKILL),
///    ends every process below it itself. If the anchor dies, CMD dies with it (its death
///    signal) and the orphans climb to the supervisor, which ends them;
///  - CMD, in a process group of its own, with SIGKILL as its parent-death signal, and, where
///    cgroup v2 is writable, in a cgroup of its own (run_cgroup.hpp) that the teardown ends with
///    cgroup.kill. Elsewhere the anchor is PID 1 of a PID namespace of its own
///    (run_namespace.hpp), which the teardown ends by ending the anchor; only where neither can be
///    made does the subreaper path stand alone.
#pragma once

#include "holders/holder.hpp"
#include "holders/nvml.hpp"
#include "holders/proc.hpp"
#include "run/run_cgroup.hpp"
#include "run/run_postmortem.hpp"

#include <array>
#include <optional>
#include <cstdint>
#include <csignal>
#include <string>
#include <vector>

#include <sys/types.h>

namespace gpuguard::cli {

/// What `gpuguard run` was asked to do.
struct run_config {
  std::vector<std::string> command;      // CMD and its arguments; command[0] is looked up on PATH
  std::vector<std::string> environment;  // CMD's environment, "NAME=VALUE" each
  std::int64_t grace_ms = 5000;          // SIGTERM to SIGKILL
  std::string device_prefix = "/dev/nvidia";
  std::string report_path;               // "" for no report
  bool use_cgroup = true;                // the job's own cgroup where cgroup v2 is writable (--no-cgroup: off)
  bool use_namespace = true;             // else the job's own PID namespace (--no-namespace: off)
  bool require_clean = false;            // --require-clean: the GPU gate after the job
};

/// Exit status of `gpuguard run --require-clean` when the GPU is not clean after the job.
inline constexpr int exit_not_clean = 125;
/// Exit status of `gpuguard run` when the job could not be ended: a process of it outlived the
/// teardown, or the boundary cannot prove that none did (it wins over CMD's status and over 125).
inline constexpr int exit_not_ended = 124;
/// How far above its level before the job a device's used memory may be and still count as back.
inline constexpr std::uint64_t clean_tolerance_bytes = std::uint64_t{64} << 20;

/// The device check over a set of processes at one moment.
struct residue_check {
  bool done = false;
  std::vector<gpu_holder> holders;  // the processes holding files under the device prefix
  std::vector<std::pair<pid_t, int>> not_inspected;  // pid, errno (EACCES: another user's process)
  bool nvml_queried = false;  // NVML is asked only when some process holds a device file
  bool nvml_available = false;
  std::string nvml_note;
};

/// The GPU gate of --require-clean: after the teardown, within the grace period (at least 1 s),
/// no process of the job holds a device file, NVML lists no PID of the job, and every device's
/// used memory is back to where it was before CMD started (within clean_tolerance_bytes).
struct clean_check {
  bool required = false;
  bool clean = false;
  std::int64_t waited_ns = 0;  // from the end of the teardown until clean, or until the deadline
  struct device {
    unsigned index = 0;
    std::optional<std::uint64_t> before;  // used memory before CMD started
    std::optional<std::uint64_t> after;   // at the last look
  };
  std::vector<device> devices;
  std::vector<int> holders;  // processes of the job still holding a device file at the last look
  std::vector<int> listed;   // PIDs of the job NVML still listed at the last look
  std::string note;          // why it could not be verified (no NVML), else ""
};

/// One process that outlived CMD.
struct leftover {
  proc_stat process;       // as first seen
  std::string cmdline;
  bool left_group = false;  // not in CMD's process group (setsid, setpgid)
  bool sent_sigterm = false;
  bool sent_sigkill = false;
  bool ended = false;       // gone (or a zombie) by the end
  bool found_late = false;  // missed by the first round of scans; found by a later one or in the cgroup before its last kill
  std::int64_t ended_after_ns = -1;  // from the start of the teardown, when seen gone
  std::string signal_error;  // why a signal could not be sent ("Operation not permitted"); "" if none failed
};

/// How the leftovers were ended.
struct teardown_result {
  std::vector<leftover> leftovers;  // in the order they were found
  bool cut_short = false;           // a signal to the supervisor ended the grace period early
  int cut_short_by = 0;
  std::int64_t duration_ns = 0;
  /// The boundary proves that no process of the job is left: its cgroup is empty (`populated 0`)
  /// where it ran in one, its PID namespace is gone (the anchor reaped) where it ran in one, and
  /// otherwise the anchor (the job's subreaper) has no live child.
  bool job_empty = false;
  /// The last cgroup.kill found the cgroup populated although every process the scans saw had
  /// ended: it ended processes no scan saw (a job forking faster than it is read).
  bool unseen_ended_by_cgroup_kill = false;
  /// Ending the job's PID namespace (its anchor) ended processes although the anchor had answered
  /// for them: the job still had processes below the anchor when the rounds were over.
  bool unseen_ended_by_namespace_end = false;
  std::string not_empty_why;        // when !job_empty: what is still there, or why it cannot be told
};

/// How CMD ended, and everything the summary and the report say.
struct run_outcome {
  enum class end { exited, signaled, not_started, unknown };
  end how = end::unknown;
  int code = 0;          // exit code or signal number
  int exec_error = 0;    // errno when CMD could not be started
  bool setup_failed = false;  // ... because the anchor could not fork it (exec_error: why): exit status 1
  int exit_status = 1;   // what `gpuguard run` exits with: the code, 128+N, 126/127, 1 if unknown
  pid_t supervisor_pid = 0;
  pid_t anchor_pid = 0;
  pid_t command_pid = 0;
  std::int64_t start_unix_ns = 0;
  std::int64_t duration_ns = 0;  // from the start until CMD ended
  std::array<int, NSIG> forwarded{};  // signals forwarded to CMD's group, by number
  teardown_result teardown;
  residue_check at_end;          // the processes CMD left, when it ended (before any signal)
  residue_check after_teardown;  // any process that could not be ended
  std::string cgroup;            // the job's cgroup (/proc/PID/cgroup's spelling) when CMD ran in it, else ""
  std::string boundary_note;     // why the cgroup boundary was not used ("" when it was)
  bool pid_namespace = false;    // without the cgroup: the anchor was PID 1 of the job's own PID namespace
  bool user_namespace = false;   // ... inside a user namespace of its own
  std::string namespace_note;    // without the cgroup: why no PID namespace was made ("" when one was)
  clean_check clean;             // --require-clean
  std::vector<process_postmortem> postmortems;  // tracked processes that died without their exit path
  std::string postmortem_note;   // why no post-mortem could be read ("" when the region was read)
  std::vector<std::string> notes;
};

/// Runs the job and ends what it leaves. Returns only in the supervisor (the anchor and CMD never
/// return from it). Throws std::system_error when the machinery cannot be set up (signalfd, pipe,
/// fork); CMD that cannot be executed is an outcome (`end::not_started`), not an exception.
run_outcome supervise(const run_config& config);

}  // namespace gpuguard::cli
