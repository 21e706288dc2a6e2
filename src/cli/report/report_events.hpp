/// @file
/// @brief Reads one line of a JSONL event log (schema gpuguard.events version 1, docs/formats.md)
/// into a typed record, or says in one bounded line why it cannot.
///
/// A record keeps what the page needs of its line, checked: every field the page reads is there
/// and of its type, or the line is refused with the first thing wrong ("field \"dur\" must be a
/// non-negative integer, not -5"). Lists inside one line (sites, leaks, frames) are kept up to a
/// fixed length and counted whole, so a record's size is bounded whatever the line holds. Lines of
/// types this reader does not know are records too (`unknown_event`): newer logs still render.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace gpuguard::cli::report {

/// Bounds on what one record keeps of its line, beyond the schema's own.
inline constexpr std::size_t max_sites_kept = 100;       ///< sites of a `sites` line
inline constexpr std::size_t max_leak_sites_kept = 200;  ///< sites of a `leaks` line
inline constexpr std::size_t max_frames_kept = 64;       ///< frames of one site (and raw ids)
/// Longest reason a refused line gets; a longer one (a hostile key or string quoted in it) is cut.
inline constexpr std::size_t max_reason_bytes = 400;
/// Longest string a record keeps of its line (a name, tag, program, frame, message, misuse key):
/// gpuguard writes operation names of at most 47 bytes, tags of 63 and thread names of 15. A
/// longer one is cut at a character boundary and marked, "name… (102400 bytes)" (the original
/// length), so that what the report keeps per distinct string is bounded whatever the log holds.
inline constexpr std::size_t max_string_bytes = 256;

/// The objects of a list in a line: the first few, and how many the line had.
template <typename Row>
struct kept_rows {
  std::vector<Row> rows;
  std::size_t total = 0;
};

/// One stack frame of a site, innermost first.
struct frame {
  std::string address;
  std::string function;
  std::string file;
  std::int64_t line = 0;
};

struct start_event {
  std::int64_t pid = 0;
  std::string program;
  std::int64_t unix_ns = 0;
  std::string stack_backend;  ///< "" when the line names none
};

struct device_event {
  std::int64_t device = 0;
  std::string name;
  std::int64_t total_bytes = 0;
};

struct thread_event {
  std::int64_t thread = 0;
  std::int64_t tid = 0;
  std::string name;
};

/// A memory sample (`mem`).
struct mem_event {
  std::int64_t device = 0;
  std::int64_t live_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t allocations = 0;
  std::int64_t frees = 0;
  std::optional<std::int64_t> used_bytes;   ///< with total_bytes, or neither
  std::optional<std::int64_t> total_bytes;
};

/// One line of the memory timeline: an `alloc` or a `free`.
struct alloc_event {
  bool alloc = true;  ///< false: a free
  std::int64_t device = 0;
  std::uint64_t address = 0;
  std::int64_t bytes = 0;
  std::int64_t live_bytes = 0;
  std::int64_t site = 0;
  std::int64_t thread = 0;
};

/// Allocations and frees folded into one step of the memory timeline (`mem_step`).
struct mem_step_event {
  std::int64_t end = 0;
  std::int64_t device = 0;
  std::int64_t end_bytes = 0;
  std::int64_t min_bytes = 0;  ///< not above max_bytes
  std::int64_t min_t = 0;
  std::int64_t max_bytes = 0;
  std::int64_t max_t = 0;
  std::int64_t allocs = 0;
};

/// An operation scope that ended (`op`).
struct op_event {
  std::string name;
  std::int64_t thread = 0;
  std::int64_t depth = 0;
  std::int64_t dur = 0;
  std::int64_t alloc_bytes = 0;
  std::int64_t free_bytes = 0;
  std::int64_t net_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t allocs = 0;
  std::int64_t frees = 0;
  bool exception = false;
  std::optional<std::int64_t> device;  ///< with used_before and used_after
  std::int64_t used_before = 0;
  std::int64_t used_after = 0;
};

/// The figures of an `op_growth` alert.
struct op_growth_alert {
  std::string name;
  std::int64_t thread = 0;
  std::int64_t net_bytes = 0;
  std::int64_t limit_bytes = 0;
};

/// The figures of a `device_full` or `device_recovered` alert.
struct device_fill_alert {
  std::int64_t device = 0;
  double fraction = 0.0;
  double threshold = 0.0;
  std::int64_t used_bytes = 0;
  std::int64_t total_bytes = 0;
};

struct alert_event {
  std::string kind;
  std::int64_t suppressed = 0;
  std::string message;
  std::optional<op_growth_alert> op_growth;
  std::optional<device_fill_alert> device_fill;
  std::optional<std::int64_t> device;  ///< of a kind this reader does not know, when it names one
};

struct dropped_event {
  std::int64_t count = 0;
  std::int64_t total = 0;
};

struct site_row {
  std::int64_t site = 0;
  std::int64_t allocs = 0;
  std::int64_t bytes = 0;
  std::optional<std::vector<std::int64_t>> raw_sites;  ///< absent in logs from before sites were grouped
  std::vector<frame> frames;
};

struct sites_event {
  bool sampled = false;
  kept_rows<site_row> sites;  ///< the first max_sites_kept
  std::string stack_backend;
};

struct leak_row {
  std::int64_t site = 0;
  std::int64_t device = 0;
  std::string tag;
  std::int64_t bytes = 0;
  std::int64_t count = 0;
  std::vector<frame> frames;
};

struct leaks_event {
  std::int64_t total_bytes = 0;
  std::int64_t total_count = 0;
  kept_rows<leak_row> sites;  ///< the first max_leak_sites_kept
  std::string stack_backend;
};

/// A device's ledger counters at exit.
struct end_device {
  std::int64_t device = 0;
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t total_bytes = 0;
  std::int64_t allocations = 0;
  std::int64_t frees = 0;
};

struct end_event {
  std::string reason;
  std::int64_t dropped = 0;
  std::vector<end_device> devices;
  std::vector<std::pair<std::string, std::int64_t>> misuse;  ///< in the line's order
  std::string stack_backend;
};

/// What was live on a device when the process crashed.
struct crash_device {
  std::int64_t device = 0;
  std::int64_t live_bytes = 0;
  std::int64_t live_count = 0;
  std::int64_t peak_bytes = 0;
};

/// The crash line the fatal-signal handler writes; its raw frames are left to `gpuguard symbolize`.
struct crash_event {
  std::string signal;
  std::int64_t code = 0;
  std::string address;
  std::int64_t thread = 0;
  std::string crash_file;
  std::vector<crash_device> devices;
};

/// A line of a type this reader does not know: ignored, and counted by type.
struct unknown_event {};

using event_body = std::variant<start_event, device_event, thread_event, mem_event, alloc_event, mem_step_event,
                                op_event, alert_event, dropped_event, sites_event, leaks_event, end_event, crash_event,
                                unknown_event>;

/// One line of the log as a record: its header (`type`, `t`) and its body.
struct log_event {
  std::string type;
  std::int64_t t = 0;  ///< nanoseconds since the process started
  event_body body;
};

/// Why parse_event refused a line.
struct refusal {
  /// One printable line of at most max_reason_bytes, naming the field and what is wrong with it
  /// ("op: field \"dur\" must be a non-negative integer, not -5"), or the column of a syntax error.
  std::string reason;
  /// The line is the last, has no newline and is not whole JSON: the process writing it ended
  /// mid-line (a SIGKILL may stop a write anywhere), so it was cut, not written wrong.
  bool cut = false;
};

/// Reads one line of the log, without its newline; `unterminated` says it is the last line and had
/// no newline. Returns its record, or nullopt with `*why` (when not null) set to why the line
/// cannot be used. A blank line is refused too. Strings are kept to max_string_bytes.
std::optional<log_event> parse_event(std::string_view line, bool unterminated, refusal* why);

}  // namespace gpuguard::cli::report
