// Option strings in the GPUGUARD_OPTIONS style ("key=value:key=value"), read through a table of
// keys. GPUGUARD_OPTIONS (options/options.cpp) and gpuguard run's GPUGUARD_RUN_OPTIONS both read
// theirs this way, so both name a bad item alike and bound what they print. Internal to gpuguard.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuguard::detail {

/// One key of a table: how it sets its value in `Target`, and what it expects.
template <class Target>
struct option_key {
  std::string_view name;
  bool (*set)(Target&, std::string_view);  ///< false: the value is rejected and `Target` untouched
  std::string (*expected)();               ///< the end of the error message "expected ..."
  std::string_view help;                   ///< one line; the docs have the long form
};

/// A boolean value as option strings spell it: 1, true, yes or 0, false, no; nullopt otherwise.
std::optional<bool> parse_option_bool(std::string_view text) noexcept;
/// What parse_option_bool takes, for "expected ..." in a message.
inline constexpr const char* option_bool_spellings = "one of 0, 1, true, false, yes, no";

/// `text` in quotes for a message that must stay one printable line: control and non-ASCII bytes
/// as \xNN, and past 80 bytes cut, with its length said.
std::string quoted_for_message(std::string_view text);

/// The key of `keys` called `name`, or nullptr.
template <class Target, std::size_t N>
const option_key<Target>* find_option_key(const option_key<Target> (&keys)[N], std::string_view name) {
  for (const option_key<Target>& key : keys) {
    if (key.name == name) { return &key; }
  }
  return nullptr;
}

/// Applies each item of `text` (items separated by ':', empty ones skipped) through `keys` to
/// `target`. Returns one message per item it ignored: one without '=', an unknown key, a value
/// its key rejects. Never throws for bad input (only std::bad_alloc).
template <class Target, std::size_t N>
std::vector<std::string> apply_option_items(std::string_view text, const option_key<Target> (&keys)[N], Target& target) {
  std::vector<std::string> errors;
  while (!text.empty()) {
    const std::size_t colon = text.find(':');
    const std::string_view item = text.substr(0, colon);
    text = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
    if (item.empty()) { continue; }
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      errors.push_back("item " + quoted_for_message(item) + " has no '='; ignored");
      continue;
    }
    const std::string_view name = item.substr(0, equals);
    const std::string_view value = item.substr(equals + 1);
    const option_key<Target>* key = find_option_key(keys, name);
    if (key == nullptr) {
      errors.push_back("unknown key " + quoted_for_message(name) + " (value " + quoted_for_message(value) + "); ignored");
    } else if (!key->set(target, value)) {
      errors.push_back("bad value " + quoted_for_message(value) + " for key " + quoted_for_message(name) +
                       ": expected " + key->expected() + "; ignored");
    }
  }
  return errors;
}

/// Prints `errors` on stderr, each on one line as "PREFIX: message": the first ten, then how many
/// more there were (10,000 bad items must not print 10,000 lines).
void print_option_errors(std::string_view prefix, const std::vector<std::string>& errors);

}  // namespace gpuguard::detail
