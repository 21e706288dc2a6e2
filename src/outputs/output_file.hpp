// What every file sink writes through: a buffered file the writer thread owns, and how a sink is
// made and opened. Internal to libgpuguard.
#pragma once

#include "outputs/sinks.hpp"

#include "util/file.hpp"

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include <unistd.h>

namespace gpuguard::detail {

/// A file's buffer is written out once it holds this much.
inline constexpr std::size_t flush_threshold = std::size_t{64} * 1024;

/// A buffered file the writer owns. A failed write turns it off for good, reported once.
class output_file {
 public:
  output_file(std::string label, failure_reporter report) : label_(std::move(label)), report_(report) {}
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;
  output_file(output_file&&) = delete;
  output_file& operator=(output_file&&) = delete;
  ~output_file() {
    flush();
    if (owned_ && fd_ >= 0) { ::close(fd_); }
  }

  /// "stderr" and "stdout" (when allowed) name the streams; anything else is a path, truncated,
  /// opened through open_output_file (no link another user planted is followed).
  bool open(const std::string& where, bool allow_streams, std::string* error) {
    path_ = where;
    if (allow_streams && (where == "stderr" || where == "stdout")) {
      fd_ = where == "stderr" ? STDERR_FILENO : STDOUT_FILENO;
      owned_ = false;
      return true;
    }
    std::string why;
    fd_ = open_output_file(where, existing_file::truncate, &why);
    if (fd_ < 0) {
      *error = label_ + ": " + why;
      return false;
    }
    owned_ = true;
    return true;
  }

  std::string& buffer() noexcept { return buffer_; }
  [[nodiscard]] bool failed() const noexcept { return failed_; }
  [[nodiscard]] int fd() const noexcept { return fd_; }

  /// Call after appending to buffer(): writes out once enough has gathered.
  void maybe_flush() {
    if (buffer_.size() >= flush_threshold) { flush(); }
  }

  void flush() {
    if (failed_ || fd_ < 0) {
      buffer_.clear();
      return;
    }
    if (!write_all(fd_, buffer_.data(), buffer_.size())) {
      failed_ = true;
      report_(label_ + ": cannot write '" + path_ + "': " + (errno != 0 ? std::strerror(errno) : "nothing written") +
              "; this output is off from now on");
    }
    buffer_.clear();
  }

 private:
  std::string label_;
  failure_reporter report_;
  std::string path_;
  std::string buffer_;
  int fd_ = -1;
  bool owned_ = false;
  bool failed_ = false;
};

/// `made`, opened with `args`; nullptr (and `*error` says why) if it could not be.
template <class Sink, class... Args>
std::unique_ptr<sink> opened(std::unique_ptr<Sink> made, std::string* error, const Args&... args) {
  if (!made->open(args..., error)) { return nullptr; }
  return made;
}

}  // namespace gpuguard::detail
