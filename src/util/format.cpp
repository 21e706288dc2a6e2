#include "util/format.hpp"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace gpuguard::detail {

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) { return std::to_string(bytes) + " B"; }
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit >= 2 ? "%.2f %s" : "%.1f %s", value, units[unit]);
  return text;
}

std::string format_signed_bytes(std::int64_t bytes) {
  const std::uint64_t magnitude =
      bytes < 0 ? static_cast<std::uint64_t>(-(bytes + 1)) + 1 : static_cast<std::uint64_t>(bytes);
  return (bytes < 0 ? "-" : "+") + format_bytes(static_cast<std::size_t>(magnitude));
}

namespace {

// "45s", "5m", "3h", "2d": the largest unit of which there are at least 2, rounded down.
std::string coarse_duration(std::int64_t ns) {
  struct unit {
    long long seconds;
    long long below;  // used while the duration is shorter
    char suffix;
  };
  static constexpr unit units[] = {{1, 120, 's'}, {60, 7200, 'm'}, {3600, 172800, 'h'}, {86400, LLONG_MAX, 'd'}};
  const long long seconds = ns / 1000000000;  // toward zero: small enough to negate
  const long long magnitude = seconds < 0 ? -seconds : seconds;
  const unit* u = units;
  while (magnitude >= u->below) { ++u; }
  return (seconds < 0 ? "-" : "") + std::to_string(magnitude / u->seconds) + u->suffix;
}

}  // namespace

std::string format_duration(std::int64_t ns, duration_precision precision) {
  if (precision == duration_precision::coarse) { return coarse_duration(ns); }
  char text[32];
  const double value = static_cast<double>(ns);
  if (ns < 1000) {
    std::snprintf(text, sizeof text, "%lld ns", static_cast<long long>(ns));
  } else if (ns < 1000000) {
    std::snprintf(text, sizeof text, "%.1f us", value / 1e3);
  } else if (ns < 1000000000) {
    std::snprintf(text, sizeof text, "%.1f ms", value / 1e6);
  } else {
    std::snprintf(text, sizeof text, "%.2f s", value / 1e9);
  }
  return text;
}

std::string expand_path(std::string_view path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
      out += std::to_string(::getpid());
      ++i;
    } else {
      out += path[i];
    }
  }
  return out;
}

namespace {
// Length of the valid UTF-8 sequence at s[i], or 0 if there is none.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  std::size_t n = 0;
  if (c >= 0xC2 && c <= 0xDF) { n = 2; }
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; }
  else { return 0; }
  if (i + n > s.size()) { return 0; }
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) { return 0; }
  }
  if (n == 3 && ((c == 0xE0 && byte(i + 1) < 0xA0) || (c == 0xED && byte(i + 1) >= 0xA0))) { return 0; }
  if (n == 4 && ((c == 0xF0 && byte(i + 1) < 0x90) || (c == 0xF4 && byte(i + 1) >= 0x90))) { return 0; }
  return n;
}
}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  out.reserve(out.size() + text.size() + 2);
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_length(text, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char escape[8];
          std::snprintf(escape, sizeof escape, "\\u%04x", c);
          out += escape;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

std::string json_string(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

bool parse_hex(std::string_view text, std::uint64_t& out) {
  if (text.substr(0, 2) == "0x") { text.remove_prefix(2); }
  if (text.empty() || text.size() > 16) { return false; }
  std::uint64_t value = 0;
  for (const char c : text) {
    int digit = 0;
    if (c >= '0' && c <= '9') { digit = c - '0'; }
    else if (c >= 'a' && c <= 'f') { digit = c - 'a' + 10; }
    else if (c >= 'A' && c <= 'F') { digit = c - 'A' + 10; }
    else { return false; }
    value = value * 16 + static_cast<std::uint64_t>(digit);
  }
  out = value;
  return true;
}

void append_prometheus_family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void append_prometheus_label_value(std::string& out, std::string_view value) {
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

void append_prometheus_device_labels(std::string& out, long long index, std::string_view uuid) {
  out += "device=\"";
  out += std::to_string(index);
  out += "\",uuid=\"";
  append_prometheus_label_value(out, index < 0 ? std::string_view("host") : uuid.empty() ? std::string_view("unknown") : uuid);
  out += '"';
}


}  // namespace gpuguard::detail
