// Formatting shared by every report and sink of the compiled core: sizes people read and JSON
// strings. One place, so that every output spells a size and escapes text the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpuguard::detail {

/// "512 B", "1.5 KiB", "768.0 MiB", "2.00 GiB".
std::string format_bytes(std::size_t bytes);

/// A signed size with its sign: "+512.0 MiB", "-256 B", "+0 B".
std::string format_signed_bytes(std::int64_t bytes);

/// How closely format_duration spells a duration.
enum class duration_precision {
  fine,    ///< a unit and up to three figures: "850 ns", "12.3 us", "12.4 ms", "1.23 s" (reports, summaries)
  coarse,  ///< whole units, as a table column shows an age: "45s", "5m", "3h", "2d" (the doctor)
};

/// A duration people read, from nanoseconds. Fine: "850 ns", "12.3 us", "12.4 ms", "1.23 s".
/// Coarse, each rounded down: seconds under 2 minutes ("119s"), minutes under 2 hours ("5m"),
/// hours under 2 days ("47h"), else days ("2d"); a negative duration has "-" in front ("-5s").
std::string format_duration(std::int64_t ns, duration_precision precision = duration_precision::fine);

/// `path` with every "%p" replaced by the process id (so processes of one job write apart).
std::string expand_path(std::string_view path);

/// `text` as a JSON string literal, quotes included; bytes that are not valid UTF-8 become U+FFFD.
std::string json_string(std::string_view text);
/// Appends what json_string returns, without a temporary.
void append_json_string(std::string& out, std::string_view text);

/// An address or offset as reports and crash records print it: hexadecimal digits (either case),
/// "0x" in front or not, at most 16 of them. False, with `out` untouched, when it is not one.
bool parse_hex(std::string_view text, std::uint64_t& out);

/// The Prometheus text exposition's shared pieces (the sink and `gpuguard doctor --prometheus` write
/// the format): a metric family's "# HELP" and "# TYPE" lines, and a label value with backslash,
/// double quote and newline escaped (without the quotes around it).
void append_prometheus_family(std::string& out, std::string_view name, std::string_view type, std::string_view help);
void append_prometheus_label_value(std::string& out, std::string_view value);
/// The labels that name a device in both Prometheus files: `device="INDEX",uuid="UUID"`, UUID
/// "unknown" where it is "" (NVML could not say) and "host" for the index -1 (host memory). The
/// index is the writer's (NVML's for the doctor, CUDA's for the library); the UUID is the same
/// GPU's in both.
void append_prometheus_device_labels(std::string& out, long long index, std::string_view uuid);

}  // namespace gpuguard::detail
