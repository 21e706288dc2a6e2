#include <gpuguard/core/options.hpp>

#include "util/option_table.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

namespace gpuguard {

namespace {

template <class E>
struct enum_spelling {
  E value;
  const char* name;
};

// The only place the enum spellings live: parsing, error messages and to_string all read them.
constexpr enum_spelling<stack_mode> stack_mode_spellings[] = {
    {stack_mode::off, "off"},
    {stack_mode::sampled, "sampled"},
    {stack_mode::all, "all"},
};

constexpr enum_spelling<device_mode> device_mode_spellings[] = {
    {device_mode::automatic, "auto"},
    {device_mode::cuda, "cuda"},
    {device_mode::async, "async"},
    {device_mode::host, "host"},
};

constexpr enum_spelling<torch_mode> torch_mode_spellings[] = {
    {torch_mode::observe, "observe"},
    {torch_mode::swap_in, "swap_in"},
    {torch_mode::off, "off"},
};

constexpr enum_spelling<python_frames_mode> python_frames_mode_spellings[] = {
    {python_frames_mode::user, "user"},
    {python_frames_mode::all, "all"},
    {python_frames_mode::off, "off"},
};

constexpr const auto& spellings(stack_mode /*tag*/) { return stack_mode_spellings; }
constexpr const auto& spellings(python_frames_mode /*tag*/) { return python_frames_mode_spellings; }
constexpr const auto& spellings(device_mode /*tag*/) { return device_mode_spellings; }
constexpr const auto& spellings(torch_mode /*tag*/) { return torch_mode_spellings; }
constexpr enum_spelling<torch_upstream_mode> torch_upstream_spellings[] = {
    {torch_upstream_mode::pool, "pool"},
    {torch_upstream_mode::async, "async"},
};
constexpr const auto& spellings(torch_upstream_mode /*tag*/) { return torch_upstream_spellings; }

template <auto member>
using member_type = std::remove_reference_t<decltype(std::declval<options&>().*member)>;

// Digits only: no sign, no whitespace, no trailing bytes; false on overflow.
template <class T>
bool parse_unsigned(std::string_view text, T& out) {
  if (text.empty()) { return false; }
  const char* const last = text.data() + text.size();
  T value = 0;
  const auto [end, error] = std::from_chars(text.data(), last, value);
  if (error != std::errc() || end != last) { return false; }
  out = value;
  return true;
}

// Each key kind supplies `set` (false = value rejected, options untouched) and `expected`, the
// end of the error message "expected ...".

template <auto member, std::uint64_t lo, std::uint64_t hi>
struct integer_key {
  using type = member_type<member>;
  static_assert(lo <= hi && hi <= static_cast<std::uint64_t>(std::numeric_limits<type>::max()));

  static bool set(options& o, std::string_view value) {
    std::uint64_t number = 0;
    if (!parse_unsigned(value, number) || number < lo || number > hi) { return false; }
    o.*member = static_cast<type>(number);
    return true;
  }
  static std::string expected() {
    return "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  }
};

template <auto member>
struct bool_key {
  static bool set(options& o, std::string_view value) {
    const std::optional<bool> parsed = detail::parse_option_bool(value);
    if (parsed) { o.*member = *parsed; }
    return parsed.has_value();
  }
  static std::string expected() { return detail::option_bool_spellings; }
};

template <auto member>
struct enum_key {
  static bool set(options& o, std::string_view value) {
    for (const auto& spelling : spellings(member_type<member>{})) {
      if (value == spelling.name) {
        o.*member = spelling.value;
        return true;
      }
    }
    return false;
  }
  static std::string expected() {
    std::string text = "one of ";
    const char* separator = "";
    for (const auto& spelling : spellings(member_type<member>{})) {
      text += separator;
      text += spelling.name;
      separator = ", ";
    }
    return text;
  }
};

// Any text, including none (which means "no file").
template <auto member>
struct string_key {
  static bool set(options& o, std::string_view value) {
    o.*member = std::string(value);
    return true;
  }
  static std::string expected() { return "any text"; }
};

struct byte_suffix {
  std::string_view text;
  unsigned shift;
};

constexpr byte_suffix byte_suffixes[] = {
    {"", 0},     {"K", 10},   {"M", 20},   {"G", 30},   {"T", 40},
    {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40},
};

template <auto member>
struct byte_count_key {
  static_assert(std::is_same_v<member_type<member>, std::size_t>);

  static bool set(options& o, std::string_view value) {
    const std::size_t digits_end = std::min(value.find_first_not_of("0123456789"), value.size());
    std::size_t number = 0;
    if (!parse_unsigned(value.substr(0, digits_end), number)) { return false; }
    const std::string_view suffix = value.substr(digits_end);
    for (const auto& candidate : byte_suffixes) {
      if (suffix != candidate.text) { continue; }
      if (number > (std::numeric_limits<std::size_t>::max() >> candidate.shift)) { return false; }
      o.*member = number << candidate.shift;
      return true;
    }
    return false;
  }
  static std::string expected() {
    return "a byte count (digits, then optionally K, M, G, T, KiB, MiB, GiB or TiB) of at most " +
           std::to_string(std::numeric_limits<std::size_t>::max());
  }
};

// A decimal fraction in [lo, hi], written as digits with an optional '.' and more digits
// ("0.8", "1"; ".5" and "0." are rejected: a digit is required on each side of the point).
template <auto member>
struct fraction_key {
  static_assert(std::is_same_v<member_type<member>, double>);

  static bool set(options& o, std::string_view value) {
    if (value.empty() || value.front() < '0' || value.front() > '9') { return false; }
    if (value.back() < '0' || value.back() > '9') { return false; }
    if (value.find_first_not_of("0123456789.") != std::string_view::npos) { return false; }
    double number = 0;
    const char* const last = value.data() + value.size();
    const auto [end, error] = std::from_chars(value.data(), last, number, std::chars_format::fixed);
    if (error != std::errc() || end != last || number < 0.0 || number > 1.0) { return false; }
    o.*member = number;
    return true;
  }
  static std::string expected() { return "a decimal number in 0..1 (e.g. 0.8)"; }
};

using key_entry = detail::option_key<options>;

template <class Key>
constexpr key_entry make_key(std::string_view name, std::string_view help) {
  return {name, &Key::set, &Key::expected, help};
}

// One line per key; docs/options.md has the long form of each help text.
constexpr key_entry keys[] = {
    make_key<enum_key<&options::stacks>>("stacks", "when allocation-site stacks are captured"),
    make_key<integer_key<&options::stack_sample, 1, 1000000>>("stack_sample", "1 in N allocations gets a stack when stacks=sampled"),
    make_key<integer_key<&options::stack_depth, 1, 64>>("stack_depth", "frames kept per stack"),
    make_key<bool_key<&options::fast_unwind>>("fast_unwind", "walk frame pointers where they hold; 0 = always unwind by the tables"),
    make_key<enum_key<&options::python_frames>>("python_frames", "which Python frames an allocation made while holding the GIL records: user, all or off"),
    make_key<bool_key<&options::abort_on_error>>("abort_on_error", "misuse (double free, ...) aborts the process"),
    make_key<bool_key<&options::leak_report>>("leak_report", "text leak report on stderr at exit"),
    make_key<string_key<&options::leak_json>>("leak_json", "path of a JSON leak report written at exit; empty = none"),
    make_key<integer_key<&options::leak_exitcode, 0, 255>>("leak_exitcode", "exit status when leaks remain; 0 = leave it unchanged"),
    make_key<integer_key<&options::leak_sites, 1, 100000>>("leak_sites", "at most this many sites in the text leak report"),
    make_key<enum_key<&options::device>>("device", "which memory the tracking resources use"),
    make_key<byte_count_key<&options::host_capacity>>("host_capacity", "bytes available with device=host; 0 = unlimited"),
    make_key<bool_key<&options::strict>>("strict", "a bad key or value ends the process instead of being ignored"),
    make_key<string_key<&options::text_log>>("text_log", "one line per operation scope: stderr, stdout, off or a path"),
    make_key<string_key<&options::jsonl_log>>("jsonl_log", "path of the JSONL event log; empty = none"),
    make_key<string_key<&options::trace_file>>("trace_file", "path of the Chrome trace-event JSON; empty = none"),
    make_key<string_key<&options::prometheus_file>>("prometheus_file", "path of the Prometheus textfile; empty = none"),
    make_key<integer_key<&options::prometheus_interval_ms, 100, 3600000>>("prometheus_interval_ms", "how often the Prometheus file is rewritten"),
    make_key<string_key<&options::prometheus_job>>("prometheus_job", "the job_id label of the Prometheus file; empty = $SLURM_JOB_ID where set, else none"),
    make_key<bool_key<&options::nvtx>>("nvtx", "an NVTX range per operation scope"),
    make_key<integer_key<&options::sample_ms, 1, 60000>>("sample_ms", "memory sampling period of the writer thread"),
    make_key<bool_key<&options::op_device_query>>("op_device_query", "cudaMemGetInfo before and after each operation scope"),
    make_key<fraction_key<&options::alert_fraction>>("alert_fraction", "device-full alert threshold; 0 = off"),
    make_key<fraction_key<&options::alert_hysteresis>>("alert_hysteresis", "re-arm the alert below threshold minus this"),
    make_key<byte_count_key<&options::alert_op_growth>>("alert_op_growth", "alert when one scope's net growth passes this many bytes; 0 = off"),
    make_key<integer_key<&options::queue_capacity, 64, max_queue_capacity>>("queue_capacity", "events the output queue holds before it drops"),
    make_key<integer_key<&options::timeline_events, 0, 1000000>>("timeline_events", "alloc and free lines per device per millisecond in the event log and trace before the rest of that millisecond is folded into one mem_step; 0 = no memory timeline"),
    make_key<bool_key<&options::hooks>>("hooks", "enable_tracking installs the exit-path hooks (terminate, signals, crashes)"),
    make_key<string_key<&options::crash_file>>("crash_file", "path of the crash record written on a fatal signal; empty = stderr only"),
    make_key<integer_key<&options::cleanup_timeout, 0, 86400>>("cleanup_timeout", "seconds the exit work (cleanups, report) may take before the process is ended; 0 = no limit"),
    make_key<enum_key<&options::torch>>("torch", "what gpuguard::torch::enable() does with PyTorch's CUDA allocator"),
    make_key<enum_key<&options::torch_upstream>>("torch_upstream", "what the swap-in allocator takes memory from: gpuguard's caching pool or cudaMallocAsync"),
};

template <class E>
const char* spelling_of(E mode) noexcept {
  for (const auto& spelling : spellings(mode)) {
    if (spelling.value == mode) { return spelling.name; }
  }
  return "unknown";
}

}  // namespace

parsed_options parse_options(std::string_view text, const options& base) {
  parsed_options result{base, {}};
  result.errors = detail::apply_option_items(text, keys, result.values);
  return result;
}

const options& process_options() {
  static const options values = [] {
    const char* const text = std::getenv("GPUGUARD_OPTIONS");
    parsed_options parsed = parse_options(text == nullptr ? std::string_view() : std::string_view(text));
    detail::print_option_errors("gpuguard: GPUGUARD_OPTIONS", parsed.errors);
    if (parsed.values.strict && !parsed.errors.empty()) {
      std::fputs("gpuguard: GPUGUARD_OPTIONS: strict=1, stopping\n", stderr);
      // _Exit, not exit: atexit work (the leak report) would run on options nobody asked for.
      std::_Exit(2);
    }
    return std::move(parsed.values);
  }();
  return values;
}

const char* to_string(stack_mode mode) noexcept { return spelling_of(mode); }
const char* to_string(device_mode mode) noexcept { return spelling_of(mode); }
const char* to_string(torch_mode mode) noexcept { return spelling_of(mode); }
const char* to_string(torch_upstream_mode mode) noexcept { return spelling_of(mode); }
const char* to_string(python_frames_mode mode) noexcept { return spelling_of(mode); }

}  // namespace gpuguard
