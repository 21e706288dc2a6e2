/// @file
/// @brief Reads a JSONL event log (schema gpuguard.events version 1, docs/formats.md) line by line
/// and aggregates it on the fly into what the HTML report shows.
///
/// Memory stays bounded whatever the log's length: memory samples are downsampled per device into
/// at most `max_buckets` time buckets (each keeping its first, last, lowest and highest sample, so
/// peaks survive), operation bands are thinned per thread to the longest and the biggest, and only
/// the first skipped lines and alerts are kept in full. Every aggregate that is not thinned (the
/// per-operation summary, counts) covers the whole log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace gpuguard::cli {

/// Bounds on what the report keeps from a log.
struct report_limits {
  std::size_t max_buckets = 1000;          ///< time buckets per device and series (<= 4 points each)
  std::size_t max_ops_per_thread = 2000;   ///< operation bands drawn per thread
  std::size_t max_op_names = 10000;        ///< distinct names in the per-operation summary
  std::size_t max_alerts = 500;            ///< alerts listed and drawn
  std::size_t max_skipped_shown = 50;      ///< skipped lines listed with their reason
  std::size_t max_bands = 2000;            ///< allocations drawn as bands per device (half the largest, half the most area)
};

/// What the reader made of a log: feed it lines with `add_line`, then ask for `data_json`.
class log_aggregate {
 public:
  explicit log_aggregate(report_limits limits = {});
  ~log_aggregate();
  log_aggregate(const log_aggregate&) = delete;
  log_aggregate& operator=(const log_aggregate&) = delete;
  log_aggregate(log_aggregate&&) noexcept;
  log_aggregate& operator=(log_aggregate&&) noexcept;

  /// Takes line `number` (1-based) of the log, without its newline. `unterminated` says the line
  /// is the last one and had no newline (a writer that died mid-line leaves one). Returns "" when
  /// the line was used or deliberately ignored (an unknown type), else why it was skipped.
  std::string add_line(std::string_view line, std::size_t number, bool unterminated);

  /// Counts line `number` as read and skipped for `reason`, for lines the caller could not even
  /// hand over (longer than it reads). Returns `reason`.
  std::string add_skipped_line(std::size_t number, std::string reason);

  [[nodiscard]] std::size_t lines_read() const noexcept;
  [[nodiscard]] std::size_t events_used() const noexcept;
  [[nodiscard]] std::size_t lines_skipped() const noexcept;
  /// The program named by the log's `start` line ("" before one).
  [[nodiscard]] const std::string& program() const noexcept;

  /// Everything the page shows, as one JSON object (see docs/report.md); `title` and `log_path`
  /// are shown in the page's header.
  [[nodiscard]] std::string data_json(std::string_view title, std::string_view log_path) const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace gpuguard::cli
