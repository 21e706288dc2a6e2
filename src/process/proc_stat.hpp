/// @file
/// @brief The one model of /proc that gpuguard::spawn, `gpuguard run` and `gpuguard doctor` share:
/// a process's /proc/PID/stat line (its identity is the PID with the start time), the process
/// table, and the descendants of a process.
///
/// Reading /proc is racy by nature: a process may end between two reads. Every function here
/// treats a process that vanished as gone, never as an error, and nothing throws for bad input
/// (only std::bad_alloc). Functions take the /proc root as a parameter, so tests can point them at
/// a copy. Internal to the core and the CLI (compiled into both; not an installed header).
#pragma once

#include <charconv>
#include <cstdint>
#include <system_error>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace gpuguard::detail {

/// The fields of /proc/PID/stat gpuguard uses (proc(5) numbering in the comments).
struct proc_stat {
  int pid = 0;                  ///< (1)
  std::string comm;             ///< (2) without the parentheses
  char state = '?';             ///< (3) R S D Z T t X I ...
  int ppid = 0;                 ///< (4) 0 when the parent is outside this PID namespace
  int pgid = 0;                 ///< (5)
  int sid = 0;                  ///< (6)
  std::uint64_t flags = 0;      ///< (9) PF_* flags
  std::int64_t num_threads = 0; ///< (20)
  std::uint64_t start_time = 0; ///< (22) clock ticks after boot: with the PID, the identity of a process

  /// False for a zombie (or dead) process; true for a leader that shows 'Z' because its main
  /// thread ended while other threads run (the zombie leader still counts in num_threads).
  [[nodiscard]] bool alive() const noexcept {
    return (state != 'Z' && state != 'X' && state != 'x') || num_threads > 1;
  }
};

/// The kernel's PF_EXITING: the process is in do_exit().
inline constexpr std::uint64_t pf_exiting = 0x4;

/// Parses the text of /proc/PID/stat. The command name may hold spaces and parentheses (it ends at
/// the last ')'). Returns nullopt for text that is not a stat line; never throws for bad input.
std::optional<proc_stat> parse_proc_stat(std::string_view text);

/// Reads `proc_root`/PID/stat; nullopt when the process is gone or the line is unreadable.
std::optional<proc_stat> read_stat(const std::string& proc_root, int pid);

/// The whole of a small file (a /proc file reports size 0), read with plain syscalls, at most
/// `max_bytes`; nullopt when it cannot be opened or read.
std::optional<std::string> read_small_file(const std::string& path, std::size_t max_bytes);

/// The most of /proc/PID/cmdline that is read.
inline constexpr std::size_t max_cmdline_bytes = 4096;

/// `text` as a whole decimal number of type T (nothing before or after it).
template <typename T>
bool parse_number(std::string_view text, T& out) {
  if (text.empty()) { return false; }
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

/// The fields of `text` separated by runs of blanks (space, tab, newline).
std::vector<std::string_view> split_fields(std::string_view text);

/// The numeric entries of a directory (PIDs, TIDs, fds), sorted; nullopt with errno set when it
/// cannot be listed.
std::optional<std::vector<int>> numeric_entries(const std::string& dir);

/// The stat line of every process under `proc_root`, by PID.
using process_table = std::map<int, proc_stat>;

/// Reads every process's stat line under `proc_root` (an empty table when it cannot be listed).
process_table read_process_table(const std::string& proc_root = "/proc");

/// The processes below `root` in `table` (children, their children, ...), found through the parent
/// links; `root` itself is not included. Breadth-first order.
std::vector<proc_stat> descendants_of(int root, const process_table& table);

/// `proc_root`/PID/cmdline with its NUL separators turned into spaces ("" if gone or a kernel thread).
std::string read_cmdline(const std::string& proc_root, int pid);

}  // namespace gpuguard::detail
