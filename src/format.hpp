// Formatting shared by every report and sink of the compiled core: sizes people read and JSON
// strings. One place, so that every output spells a size and escapes text the same way.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpuguard::detail {

/// "512 B", "1.5 KiB", "768.0 MiB", "2.00 GiB".
std::string format_bytes(std::size_t bytes);

/// `text` as a JSON string literal, quotes included; bytes that are not valid UTF-8 become U+FFFD.
std::string json_string(std::string_view text);

/// Writes `data` to `path` through a temporary file in the same directory and a rename, so readers
/// never see half a file. Returns "" on success, else a message naming the path and the error.
std::string write_file_atomically(const std::string& path, std::string_view data);

}  // namespace gpuguard::detail
