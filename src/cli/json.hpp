/// @file
/// @brief The command-line tool's JSON: nlohmann::ordered_json, and a reader for untrusted text.
///
/// Documents are `nlohmann::ordered_json`, so that members keep the order they were read or
/// written in. `parse_json` is the one way the tool reads JSON it did not make itself (event logs,
/// crash records, --track records): it never throws for bad input, says what is wrong and where,
/// and bounds what hostile input can cost. Nesting is limited (`max_depth`), and so are an object's
/// members (`json_max_members`: an ordered object finds a member by a linear search, so one object
/// of a million members would take quadratic time to build). Integers that fit are exact int64
/// (`is_number_integer()`); every other number is a double. Of duplicate member names, the first
/// position and the last value are kept (nlohmann's rule).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace gpuguard::cli {

using json = nlohmann::ordered_json;

/// Why a text is not JSON: a message and the byte offset (0-based) where the problem was found.
struct json_error {
  std::size_t offset = 0;
  std::string message;
};

/// Deepest nesting of arrays and objects `parse_json` accepts by default.
inline constexpr std::size_t json_default_max_depth = 128;
/// Most members one object may have; far more than any gpuguard document holds.
inline constexpr std::size_t json_max_members = 256;

/// Parses `text` as one JSON document (RFC 8259: valid UTF-8, no comments, no trailing commas, no
/// NaN). Returns the value, or nullopt with `*error` (when not null) saying what is wrong and
/// where. Never throws for bad input (only std::bad_alloc).
std::optional<json> parse_json(std::string_view text, json_error* error = nullptr,
                               std::size_t max_depth = json_default_max_depth);

/// The member called `name` of an object; nullptr if absent or if `object` is not an object.
const json* member(const json& object, std::string_view name);

/// Name of a value's kind as a reader would say it: "null", "boolean", "integer" (exact int64),
/// "number", "string", "array", "object".
const char* kind_name(const json& value) noexcept;

}  // namespace gpuguard::cli
