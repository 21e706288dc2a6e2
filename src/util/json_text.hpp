// The one way gpuguard writes JSON text (the leak report, the event log, the Chrome trace, the
// --track record), appended to a std::string without temporaries: numbers, fields and arrays of
// numbers here, strings through format.hpp's append_json_string. Readers of JSON are the command
// line tool's (cli/json.hpp). Internal to gpuguard.
#pragma once

#include "util/format.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gpuguard::detail {

/// Appends a decimal integer.
void append_int(std::string& out, std::int64_t value);
void append_uint(std::string& out, std::uint64_t value);

/// Appends `,"name":value`, the value an integer (signed or not) or a bool.
template <class Value>
void append_field(std::string& out, std::string_view name, Value value) {
  out += ",\"";
  out += name;
  out += "\":";
  if constexpr (std::is_same_v<Value, bool>) {
    out += value ? "true" : "false";
  } else if constexpr (std::is_signed_v<Value>) {
    append_int(out, value);
  } else {
    append_uint(out, value);
  }
}

/// Appends `,"name":"text"`, the text escaped.
inline void append_string_field(std::string& out, std::string_view name, std::string_view text) {
  out += ",\"";
  out += name;
  out += "\":";
  append_json_string(out, text);
}

/// A named value for append_fields and append_object: an integer, a bool, or text (anything that
/// converts to std::string_view), referred to, not copied.
template <class Value>
struct json_field {
  std::string_view name;
  const Value& value;
};
template <class Value>
json_field(std::string_view, const Value&) -> json_field<Value>;

/// Appends `,"name":value` for each field, text escaped as a JSON string.
template <class... Values>
void append_fields(std::string& out, const json_field<Values>&... fields) {
  const auto append_one = [&out](const auto& field) {
    if constexpr (std::is_convertible_v<decltype(field.value), std::string_view>) {
      append_string_field(out, field.name, field.value);
    } else {
      append_field(out, field.name, field.value);
    }
  };
  (append_one(fields), ...);
}

/// Appends `{"name":value,...` with at least one field, left open for the caller to add more fields
/// and the closing brace.
template <class Value, class... Values>
void open_object(std::string& out, const json_field<Value>& first, const json_field<Values>&... rest) {
  const std::size_t brace = out.size();
  append_fields(out, first, rest...);
  out[brace] = '{';  // in place of the first field's comma
}

/// Appends `[item,item,...]`, each item written by `append_item(out, item)`.
template <class Items, class AppendItem>
void append_array(std::string& out, const Items& items, AppendItem append_item) {
  out += '[';
  bool first = true;
  for (const auto& item : items) {
    if (!first) { out += ','; }
    first = false;
    append_item(out, item);
  }
  out += ']';
}

/// Appends `[1,2,3]`.
template <class Unsigned>
void append_uint_array(std::string& out, const std::vector<Unsigned>& values) {
  append_array(out, values, [](std::string& text, Unsigned value) { append_uint(text, value); });
}

}  // namespace gpuguard::detail
