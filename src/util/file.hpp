// Writing files the way every part of gpuguard needs: all of a buffer; a whole file that readers
// never see half of; a file opened for writing that never follows a link another user planted.
// Every output file of the library and of the commands is opened or published here. Internal to
// gpuguard.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <sys/types.h>

namespace gpuguard::detail {

/// The mode every output file gets: 0644 less the process's umask (docs/formats.md, "File modes").
inline constexpr mode_t output_file_mode = 0644;

/// Writes all `size` bytes of `data` to `fd`, again after an interrupted or short write.
/// Async-signal-safe (the crash record uses it). False when the descriptor takes no more: errno
/// says why (0 when write returned 0).
bool write_all(int fd, const void* data, std::size_t size) noexcept;

/// Publishes `data` as the whole file `path`: a temporary file with an unpredictable name, created
/// exclusively (mode 0600) in `path`'s directory, is written, given output_file_mode less the
/// umask, and renamed over `path`. Readers never see half a file, and a symbolic link at `path` is
/// replaced, never written through. False, with `*error` (if not null) naming the file and the
/// reason, when it could not; the temporary file is then removed.
bool write_file_atomically(const std::string& path, std::string_view data, std::string* error);

/// Whether write_file_atomically could publish `path` now: `path` is not a directory and a
/// temporary file can be created (then removed) in its directory. "" when it could, else the reason.
std::string publish_problem(const std::string& path);

/// How open_output_file treats a file that already exists.
enum class existing_file { truncate, append };

/// Opens `path` for writing as the kernel's fs.protected_symlinks=1 would, whatever the sysctl
/// says: a symbolic link at the last component is refused when it sits in a sticky, world-writable
/// directory (like /tmp) and neither this process's effective user nor the directory's owner owns
/// it. An existing regular file there is refused too when another user owns it (as
/// fs.protected_regular=1 would) or it has more than one hard link (it may be another file's). A
/// new file is created exclusively with output_file_mode less the umask;
/// an existing one is opened without following a link and then truncated or appended to.
/// Returns the descriptor (close-on-exec), or -1 with `*error` (if not null) one line naming
/// `path` and the reason. Not async-signal-safe: open crash files in advance.
int open_output_file(const std::string& path, existing_file existing, std::string* error);

}  // namespace gpuguard::detail
