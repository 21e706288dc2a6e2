// Writing files the way every part of gpuguard needs: all of a buffer, or a whole file that readers
// never see half of. Internal to gpuguard.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpuguard::detail {

/// Writes all `size` bytes of `data` to `fd`, again after an interrupted or short write.
/// Async-signal-safe (the crash record uses it). False when the descriptor takes no more: errno
/// says why (0 when write returned 0).
bool write_all(int fd, const void* data, std::size_t size) noexcept;

/// Writes `data` to `path` through a temporary file in the same directory and a rename, so readers
/// never see half a file. False, with `*error` naming the file and the reason, when it could not.
bool write_file_atomically(const std::string& path, std::string_view data, std::string* error);

}  // namespace gpuguard::detail
