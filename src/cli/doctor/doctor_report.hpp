/// @file
/// @brief One sample of `gpuguard doctor` (holders, devices, residue) and its two renderings: the
/// table people read and the "gpuguard.doctor" version 1 JSON document (docs/doctor.md,
/// docs/schemas/doctor-v1.schema.json).
#pragma once

#include "doctor/doctor_reap.hpp"
#include "holders/holder.hpp"
#include "holders/nvml.hpp"
#include "holders/proc.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuguard::cli::doctor {

inline constexpr const char* schema_name = "gpuguard.doctor";
inline constexpr int schema_version = 1;

/// Exit statuses (docs/doctor.md).
inline constexpr int exit_no_holders = 0;
inline constexpr int exit_holders = 1;
inline constexpr int exit_usage = 2;
inline constexpr int exit_error = 3;

/// One process in the report: the holder record run keeps too (info, NVML memory), classified.
struct holder : gpu_holder {
  bool pid_names_other = false;        ///< NVML's PID names a local process that holds no device file
  classification verdict;
  bool holds = false;                  ///< device files open or mapped, or NVML memory listed
  bool named = false;                  ///< named with --pid
  std::optional<std::uint64_t> named_start_time;  ///< --pid PID:START_TIME
  std::optional<reap_outcome> reap;    ///< what --reap did (nullopt: not a target)
  double age_s = -1;                   ///< seconds since it started; -1 when unknown
};

/// One device as NVML reports it, with the residue: used memory no visible process accounts for.
struct device_summary {
  nvml_device nvml;
  std::uint64_t process_bytes = 0;          ///< what NVML attributes to processes, any namespace
  std::uint64_t visible_process_bytes = 0;  ///< ... to processes that exist in this namespace
  std::optional<std::uint64_t> residue_bytes;
};

/// A device file and how many listed holders hold it.
struct device_file_summary {
  std::string path;
  int holders = 0;
};

struct reap_summary {
  double grace_s = 0;
  std::string unavailable;  ///< "" when pidfds work
};

/// What --watch adds to each sample.
struct watch_summary {
  double interval_s = 0;
  int sample = 1;                 ///< 1-based
  std::optional<int> count;       ///< --count, nullopt for unbounded
  double elapsed_s = 0;           ///< since the first sample
  std::string residue_trend;      ///< "shrinking", "growing", "steady", "unknown"
  std::optional<std::uint64_t> residue_first_bytes;
  std::optional<std::uint64_t> residue_last_bytes;
  std::optional<std::uint64_t> residue_min_bytes;
  std::optional<std::uint64_t> residue_max_bytes;
  int holders_first = 0;
  int holders_last = 0;
};

/// One sample.
struct sample {
  std::string time;  ///< ISO 8601 UTC
  std::string pid_namespace;
  std::string device_prefix;
  bool nvml_available = false;
  std::string nvml_library;
  std::string nvml_driver_version;
  std::string nvml_note;   ///< "NVML not available: per-process memory unknown (...)", "" when available
  std::string nvml_error;  ///< an error while sampling (device count, ...)
  std::vector<device_summary> devices;
  std::vector<device_file_summary> device_files;
  std::vector<holder> holders;  ///< every listed process (with --pid: the named ones)
  int holder_count = 0;         ///< listed processes that hold something
  std::optional<std::uint64_t> residue_bytes;  ///< sum over devices; nullopt without NVML
  int unreadable_processes = 0;
  bool scan_failed = false;  ///< the /proc root could not be listed (a note says why)
  std::vector<std::string> notes;
  std::optional<reap_summary> reap;
  std::optional<watch_summary> watch;
  int exit_status = exit_no_holders;
};

/// "steady" when `last` is within max(1 MiB, 1% of `first`) of `first`, else "growing" or
/// "shrinking"; "unknown" when either is unknown.
std::string residue_trend(std::optional<std::uint64_t> first, std::optional<std::uint64_t> last);

/// The exit status a sample calls for: 3 when /proc could not be read or --reap could not end a
/// target it chose, else 1 when a listed process still holds something, else 0.
int exit_status_of(const sample& s);

/// The sample as one line of JSON (schema gpuguard.doctor, version 1), newline included.
std::string render_json(const sample& s);

/// The sample in Prometheus' text exposition format (gpuguard_doctor_* gauges, `_bytes` units),
/// for node_exporter's textfile collector: holders, holders by class, orphans and their NVML
/// memory, per-device memory and residue from NVML, and what --reap did. `time_s` is the sample's
/// Unix time. See docs/doctor.md ("--prometheus").
std::string render_prometheus(const sample& s, double time_s);

/// The sample as the table people read.
std::string render_text(const sample& s);

/// One line for a --watch sample after the first: time, holders, residue and what changed.
std::string render_watch_line(const sample& s, const sample& first, const sample& previous);

/// The closing summary of --watch: the residue's trend over the samples.
std::string render_watch_summary(const sample& last);

}  // namespace gpuguard::cli::doctor
