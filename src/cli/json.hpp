/// @file
/// @brief A small, strict JSON (RFC 8259) parser for the command-line tool's readers.
///
/// No third-party JSON library is available on every machine gpuguard builds on, and the tool only
/// reads small documents (one JSONL line at a time), so this is a plain DOM parser. It accepts
/// exactly RFC 8259 text: one value with optional whitespace around it, valid UTF-8 only, no
/// comments, no trailing commas, no NaN or Infinity, no unescaped control characters, no lone
/// surrogates in \u escapes. Integral numbers that fit are kept exactly as int64; every other
/// number is a double. Nesting is limited (`max_depth`), so hostile input cannot exhaust the stack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace gpuguard::cli {

class json_value;

/// An object's members in document order. Duplicate names are kept; `find` returns the first.
using json_object = std::vector<std::pair<std::string, json_value>>;
using json_array = std::vector<json_value>;

/// One JSON value: null, boolean, integer (int64), number (double), string, array or object.
class json_value {
 public:
  enum class kind { null, boolean, integer, number, string, array, object };

  json_value() = default;
  explicit json_value(bool b) : value_(b) {}
  explicit json_value(std::int64_t i) : value_(i) {}
  explicit json_value(double d) : value_(d) {}
  explicit json_value(std::string s) : value_(std::move(s)) {}
  explicit json_value(json_array a) : value_(std::move(a)) {}
  explicit json_value(json_object o) : value_(std::move(o)) {}

  [[nodiscard]] kind type() const noexcept { return static_cast<kind>(value_.index()); }
  [[nodiscard]] bool is_null() const noexcept { return type() == kind::null; }
  [[nodiscard]] bool is_bool() const noexcept { return type() == kind::boolean; }
  [[nodiscard]] bool is_integer() const noexcept { return type() == kind::integer; }
  /// True for integers and doubles alike.
  [[nodiscard]] bool is_number() const noexcept {
    return type() == kind::integer || type() == kind::number;
  }
  [[nodiscard]] bool is_string() const noexcept { return type() == kind::string; }
  [[nodiscard]] bool is_array() const noexcept { return type() == kind::array; }
  [[nodiscard]] bool is_object() const noexcept { return type() == kind::object; }

  // Accessors: the caller checks the kind first (std::bad_variant_access otherwise).
  [[nodiscard]] bool as_bool() const { return std::get<bool>(value_); }
  [[nodiscard]] std::int64_t as_integer() const { return std::get<std::int64_t>(value_); }
  /// The value as a double, for integers and doubles.
  [[nodiscard]] double as_double() const {
    return is_integer() ? static_cast<double>(as_integer()) : std::get<double>(value_);
  }
  [[nodiscard]] const std::string& as_string() const { return std::get<std::string>(value_); }
  [[nodiscard]] const json_array& as_array() const { return std::get<json_array>(value_); }
  [[nodiscard]] const json_object& as_object() const { return std::get<json_object>(value_); }

  /// The first member called `name` of an object; nullptr if absent or if this is not an object.
  [[nodiscard]] const json_value* find(std::string_view name) const noexcept;

 private:
  // The order matches `kind`.
  std::variant<std::monostate, bool, std::int64_t, double, std::string, json_array, json_object>
      value_;
};

/// Name of a kind as a reader would say it: "null", "boolean", "integer", "number", ...
const char* kind_name(json_value::kind k) noexcept;

/// Why a text is not JSON: a message and the byte offset (0-based) where the problem was found.
struct json_error {
  std::size_t offset = 0;
  std::string message;
};

/// Deepest nesting of arrays and objects `parse_json` accepts by default.
inline constexpr std::size_t json_default_max_depth = 128;

/// Parses `text` as one JSON document. Returns the value, or nullopt with `*error` (when not null)
/// saying what is wrong and where. Never throws for bad input (only std::bad_alloc).
std::optional<json_value> parse_json(std::string_view text, json_error* error = nullptr,
                                     std::size_t max_depth = json_default_max_depth);

}  // namespace gpuguard::cli
