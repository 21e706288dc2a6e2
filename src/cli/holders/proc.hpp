/// @file
/// @brief What the commands read from /proc beyond the process layer's model (process/proc_stat.hpp:
/// the stat line, the process table, descendants): the scan of a process's descriptors and
/// mappings for device files under a prefix (`/dev/nvidia` by default), and the classification of a process
/// that holds a GPU device `gpuguard doctor` reports (running, stopped, zombie, uninterruptible,
/// orphaned, not visible in this PID namespace).
///
/// Reading /proc is racy by nature: a process may end between two reads. Every function here
/// treats a process that vanished as gone, never as an error, and nothing here throws for bad
/// input. The doctor's functions take the /proc root and the device prefix as parameters, so the
/// scan runs on fake device files (tests) as well as on /dev/nvidia*.
#pragma once

#include "process/proc_stat.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace gpuguard::cli {

// The /proc model is the process layer's, shared with the core (process/proc_stat.hpp).
using detail::parse_proc_stat;
using detail::pf_exiting;
using detail::proc_stat;
using detail::process_table;
using detail::read_stat;

/// What the commands read from the text of /proc/PID/status.
struct proc_status {
  std::optional<std::uint32_t> uid;   ///< the real UID (first field of the last "Uid:" line)
  std::optional<bool> sighup_ignored; ///< SIGHUP is in the "SigIgn:" mask
  std::vector<int> ns_pids;           ///< "NSpid:": this namespace's PID first, then nested ones'
};

/// Parses the text of /proc/PID/status; fields it cannot read are left unknown. Never throws for
/// bad input.
proc_status parse_proc_status(std::string_view text);

/// A process name or command line (any bytes a process chose) made safe for one line of a
/// terminal: every control byte (below 0x20, and DEL) becomes a space, so that no escape sequence
/// or newline of it reaches the terminal. What `gpuguard doctor` and `gpuguard run` print.
std::string printable_on_one_line(std::string_view text);

/// The cgroup v2 path in the text of /proc/PID/cgroup (its "0::" line); "" when there is none.
std::string parse_cgroup_v2(std::string_view text);

/// The paths under `prefix` that the text of /proc/PID/maps maps, one per mapping, in order (a
/// path is what follows the fifth field, " (deleted)" included).
std::vector<std::string_view> mapped_paths_under(std::string_view maps, std::string_view prefix);

/// "running", "sleeping", "disk sleep", "stopped", "tracing stop", "zombie", "dead", "idle", ...
const char* state_name(char state) noexcept;

/// One device file a process holds, by path: how many descriptors name it and how many of its
/// memory mappings (which keep the file open after the descriptor is closed).
struct device_use {
  std::string path;
  int fds = 0;
  int mappings = 0;
};

/// The device files under a prefix one process (or thread) holds, from one look at its fd
/// directory and its maps. Each command filters it as it needs.
struct device_scan {
  std::vector<device_use> uses;  ///< by path, sorted; a mapping's path as /proc/PID/maps shows it
  bool fds_readable = false;     ///< the fd directory could be listed
  int error = 0;                 ///< errno of the failed listing (EACCES: another user's process)
};

/// Counts the descriptors in DIR/fd and the mappings in DIR/maps (DIR: /proc/PID or a task
/// directory of it) that name files under `prefix`. The maps are read even when the fd directory
/// cannot be. Never throws but std::bad_alloc.
device_scan scan_device_files(const std::string& dir, std::string_view prefix);

/// A process as the doctor reports it.
struct process_info {
  int pid = 0;
  bool exists = false;             ///< has a /proc entry in this PID namespace
  proc_stat stat;                  ///< valid when exists
  char effective_state = '?';      ///< stat.state, or a live thread's when the main thread exited
  bool main_thread_exited = false; ///< the main thread is a zombie while other threads run
  std::string command;             ///< cmdline, arguments joined by spaces; comm when empty
  std::optional<std::uint32_t> uid;
  std::vector<int> ns_pids;        ///< NSpid: this namespace's PID first, then nested namespaces'
  std::vector<device_use> devices; ///< device files under the prefix it holds open or mapped
  bool fds_readable = false;       ///< its fd directory (and maps) could be read
  int fds_error = 0;               ///< errno of the failed listing (EACCES: another user's process)
  std::optional<bool> sighup_ignored; ///< SIGHUP is in SigIgn of /proc/PID/status (nohup); nullopt: unknown
  std::string cwd;                 ///< readlink /proc/PID/cwd; "" when unreadable (another user's process)
  std::string cgroup;              ///< its cgroup v2 path ("0::" line of /proc/PID/cgroup); "" when unknown
};

/// The result of one scan.
struct scan_result {
  process_table table;
  std::vector<process_info> holders; ///< processes holding a device file, by PID
  int unreadable = 0;                ///< processes whose fds could not be read (permission)
  bool proc_readable = true;         ///< false when the /proc root itself could not be listed
  std::string proc_error;
};

/// True when `target` (a readlink result or a maps path) names a file under `prefix`: the prefix
/// is a plain string prefix ("/dev/nvidia" matches /dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm).
bool under_prefix(std::string_view target, std::string_view prefix) noexcept;

/// Reads one process (stat, status, cmdline, and its device files under `prefix`).
/// Returns an entry with exists == false when /proc_root/PID is absent or unreadable.
process_info read_process(const std::string& proc_root, int pid, const std::string& prefix);

/// Reads every process under `proc_root`, skipping `self`; holders are those with at least one
/// device file under `prefix`.
scan_result scan_processes(const std::string& proc_root, const std::string& prefix, int self);

/// How a holder is classified; see docs/doctor.md ("How a holder is classified").
enum class holder_class { running, stopped, zombie, uninterruptible, orphaned, not_visible };

/// "running", "stopped", "zombie", "uninterruptible", "orphaned", "not_visible".
const char* class_name(holder_class c) noexcept;

/// What the orphan rule reads beyond the process table, about the process itself and its process
/// group's leader. Unknown facts ("" or nullopt) never make a process orphaned.
struct process_facts {
  std::string command;                ///< its command line (arguments joined by spaces)
  std::optional<bool> sighup_ignored; ///< SIGHUP ignored (nohup, or inherited from a nohup'd parent)
  std::string cwd;                    ///< its working directory ("/" is what daemon(3) leaves)
  std::string cgroup;                 ///< its cgroup v2 path
  std::string leader_cgroup;          ///< the cgroup v2 path of its process group's live leader
};

/// True when `command` is a Python multiprocessing child or helper (spawn_main, the forkserver,
/// the resource tracker): a process that some other Python process started for its own work.
bool is_multiprocessing_child(std::string_view command) noexcept;

/// The cgroup v2 path of a process ("0::" line of /proc_root/PID/cgroup); "" when gone or unknown.
std::string read_cgroup(const std::string& proc_root, int pid);

struct classification {
  holder_class cls = holder_class::running;
  bool orphaned = false; ///< the orphan rule holds (what --reap acts on)
  std::string why;       ///< one sentence: the evidence
  std::string hint;      ///< one sentence: what to do
};

/// Classifies a process. `p` is null for a PID with no /proc entry (NVML's host PID seen from a
/// container). `state` is the process's effective state (a live thread's when the main thread
/// exited); `facts` what is known beyond the table (null: nothing). The orphan rule (docs/doctor.md,
/// "The orphan rule"): the process is alive and not exiting, is not PID 1, leads neither its
/// process group nor its session; it was reparented (its parent is PID 1, outside this namespace,
/// or a subreaper outside its process group that does not lead its session); it has no live
/// children of its own; its process group's live leader, if any, is not its ancestor and is in its
/// cgroup (when both are known); and it does not look detached on purpose: it does not ignore
/// SIGHUP (nohup), and it is not alone in a session whose leader is gone with "/" as its working
/// directory (a double-forked daemon), unless its command line is a Python multiprocessing child's.
classification classify(const proc_stat* p, char state, const process_table& table,
                        const process_facts* facts = nullptr);

// ---- `gpuguard run`: held device files ----

/// The device paths a process holds (info.devices, open or mapped), each once; a mapping of a
/// file removed since is named without the kernel's " (deleted)" suffix.
std::vector<std::string> held_paths(const process_info& info, std::string_view prefix);

}  // namespace gpuguard::cli
