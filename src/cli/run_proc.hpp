/// @file
/// @brief What `gpuguard run` reads from /proc: the process table (parent, group, session, state,
///        start time), the descendants of a process, and which files under a device prefix
///        (`/dev/nvidia` by default) a process holds open or mapped.
///
/// Reading /proc is racy by nature: a process may end between two reads. Every function here
/// treats a process that vanished as gone, never as an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace gpuguard::cli {

/// One line of /proc/PID/stat, the fields the supervisor needs.
struct proc_entry {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  char state = '?';              // R, S, D, Z, T, t, X, I, ...
  bool zombie_with_threads = false;  // a leader that ended while other threads of it run
  std::uint64_t start_time = 0;  // clock ticks after boot: with the pid, names one process for good
  std::string comm;              // the kernel's short name (15 bytes at most)

  /// False for a zombie whose every thread has ended (a leader that ended while other threads
  /// run shows 'Z' too, and is still alive).
  [[nodiscard]] bool alive() const noexcept { return (state != 'Z' && state != 'X') || zombie_with_threads; }
};

/// /proc/PID/stat parsed; nullopt when the process is gone (or /proc says something unexpected).
std::optional<proc_entry> read_proc_entry(pid_t pid);

/// Every process /proc shows, in no particular order.
std::vector<proc_entry> list_processes();

/// The processes below `root` in `table` (children, their children, ...), found through the
/// parent links; `root` itself is not included. Breadth-first order.
std::vector<proc_entry> descendants_of(pid_t root, const std::vector<proc_entry>& table);

/// /proc/PID/cmdline with its NUL separators turned into spaces ("" if gone or a kernel thread).
std::string read_cmdline(pid_t pid);

/// The files under a device prefix one process holds.
struct device_files {
  std::vector<std::string> paths;  // sorted, each once: open descriptors and mappings together
  int error = 0;                   // errno of a failed look (EACCES: another user's process)
};

/// Which paths starting with `prefix` process `pid` has open (/proc/PID/fd) or mapped
/// (/proc/PID/maps: a mapping keeps the device open after its descriptor is closed).
device_files held_device_files(pid_t pid, std::string_view prefix);

}  // namespace gpuguard::cli
