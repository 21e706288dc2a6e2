#include "util/option_table.hpp"

#include <cstdio>

namespace gpuguard::detail {

std::optional<bool> parse_option_bool(std::string_view text) noexcept {
  if (text == "1" || text == "true" || text == "yes") { return true; }
  if (text == "0" || text == "false" || text == "no") { return false; }
  return std::nullopt;
}

std::string quoted_for_message(std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  constexpr std::size_t shown = 80;
  const std::size_t full = text.size();
  if (full > shown) { text = text.substr(0, shown); }
  std::string out;
  out.reserve(text.size() + 32);
  out += '\'';
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) {
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    } else {
      out += c;
    }
  }
  out += '\'';
  if (full > shown) { out += "... (" + std::to_string(full) + " bytes)"; }
  return out;
}

void print_option_errors(std::string_view prefix, const std::vector<std::string>& errors) {
  constexpr std::size_t shown = 10;
  for (std::size_t i = 0; i < errors.size() && i < shown; ++i) {
    // One fputs per line, so lines from other threads or processes do not cut into it.
    const std::string line = std::string(prefix) + ": " + errors[i] + "\n";
    std::fputs(line.c_str(), stderr);
  }
  if (errors.size() > shown) {
    const std::string line = std::string(prefix) + ": " + std::to_string(errors.size() - shown) +
                             " more bad items, not shown (each was ignored)\n";
    std::fputs(line.c_str(), stderr);
  }
}

}  // namespace gpuguard::detail
