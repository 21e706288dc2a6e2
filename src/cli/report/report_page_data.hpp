/// @file
/// @brief Folds the records of an event log (report_events.hpp), line by line as they are read,
/// into what the HTML report shows: a memory timeline and allocation bands per device, operation
/// bands per thread and totals per name, sites, leaks, alerts, the run's start and end, and the
/// lines that could not be used.
///
/// Memory stays bounded whatever the log's length: memory samples are downsampled per device into
/// at most `max_buckets` time buckets (each keeping its first, last, lowest and highest sample, so
/// peaks survive), operation bands are thinned per thread to the longest and the biggest, and only
/// the first skipped lines and alerts are kept in full. Every aggregate that is not thinned (the
/// per-operation summary, counts) covers the whole log.
#pragma once

#include "report/report_events.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace gpuguard::cli::report {

/// Bounds on what the report keeps from a log.
struct report_limits {
  std::size_t max_buckets = 1000;          ///< time buckets per device and series (<= 4 points each)
  std::size_t max_ops_per_thread = 2000;   ///< operation bands drawn per thread
  std::size_t max_op_names = 10000;        ///< distinct names in the per-operation summary
  std::size_t max_alerts = 500;            ///< alerts listed and drawn
  std::size_t max_skipped_shown = 50;      ///< skipped lines listed with their reason
  std::size_t max_bands = 2000;            ///< allocations drawn as bands per device (half the largest, half the most area)
};

/// What the page shows of a log: feed it lines with `add_line`, then ask for `data_json`.
class page_data {
 public:
  explicit page_data(report_limits limits = {});
  ~page_data();
  page_data(const page_data&) = delete;
  page_data& operator=(const page_data&) = delete;
  page_data(page_data&&) noexcept;
  page_data& operator=(page_data&&) noexcept;

  /// Takes line `number` (1-based) of the log, without its newline; `unterminated` says it is the
  /// last line and had no newline. Returns true when the line was used or deliberately ignored (an
  /// unknown type); false when it was skipped, with `*error` (when not null) set to why: one
  /// printable line of bounded length (parse_event's reason, or one of the page's own limits, such
  /// as "mem: device 256 is past the 256 devices a report keeps"). Skipped lines are listed in the
  /// page with `number`.
  bool add_line(std::string_view line, std::size_t number, bool unterminated, std::string* error);

  /// Takes an event read by parse_event from line `number`; the same answer as add_line.
  bool add_event(const log_event& event, std::size_t number, std::string* error);

  /// Counts line `number` as read and skipped for `reason`, for lines the caller could not even
  /// hand over (longer than it reads).
  void add_skipped_line(std::size_t number, const std::string& reason);

  [[nodiscard]] std::size_t lines_read() const noexcept;
  [[nodiscard]] std::size_t events_used() const noexcept;
  [[nodiscard]] std::size_t lines_skipped() const noexcept;
  /// Whether the last line was cut short (the process writing it ended mid-line); it is counted
  /// among the skipped lines.
  [[nodiscard]] bool last_line_cut() const noexcept;
  /// The program named by the log's `start` line ("" before one).
  [[nodiscard]] const std::string& program() const noexcept;

  /// Everything the page shows, as one JSON object (see docs/report.md); `title` and `log_path`
  /// are shown in the page's header.
  [[nodiscard]] std::string data_json(std::string_view title, std::string_view log_path) const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace gpuguard::cli::report
