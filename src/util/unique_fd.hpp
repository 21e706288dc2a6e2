// An owned file descriptor: closed once, on every path out of the scope that owns it. Internal to
// gpuguard. Not for the code a signal handler or a forked child runs: it closes in its destructor,
// which _exit and exec skip.
#pragma once

#include <utility>

#include <unistd.h>

namespace gpuguard::detail {

class unique_fd {
 public:
  unique_fd() noexcept = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) { reset(std::exchange(other.fd_, -1)); }
    return *this;
  }
  ~unique_fd() { reset(); }

  /// The descriptor, still owned; -1 when there is none.
  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  /// Closes the owned descriptor, if any, and owns `fd` instead.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) { static_cast<void>(::close(fd_)); }
    fd_ = fd;
  }
  /// Closes it now and says whether close succeeded (a write's last error can surface there).
  bool close() noexcept {
    const int fd = std::exchange(fd_, -1);
    return fd < 0 || ::close(fd) == 0;
  }

 private:
  int fd_ = -1;
};

}  // namespace gpuguard::detail
