// Identity-checked signals through pidfds (see signal.hpp).
#include "process/signal.hpp"

#include "util/unique_fd.hpp"

#include <cerrno>
#include <cstring>
#include <string>

#include <csignal>
#include <sys/syscall.h>
#include <unistd.h>

// glibc may predate the wrappers and even the numbers; these are the same on every architecture
// (syscalls added after the tables were unified), so pidfds are never compiled out.
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace gpuguard::detail {

namespace {

int pidfd_open(int pid) noexcept { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0U)); }

int pidfd_send_signal(int pidfd, int signal) noexcept {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0U));
}

std::string probe_pidfds() {
  const int fd = pidfd_open(static_cast<int>(::getpid()));
  if (fd < 0) {
    const int e = errno;
    return std::string("pidfd_open failed: ") + std::strerror(e) +
           (e == ENOSYS ? " (pidfds need Linux 5.3 or later)" : e == EPERM ? " (blocked by a seccomp filter?)" : "");
  }
  const unique_fd owner(fd);
  if (pidfd_send_signal(fd, 0) != 0) {
    const int e = errno;
    return std::string("pidfd_send_signal failed: ") + std::strerror(e) +
           (e == ENOSYS ? " (pidfds need Linux 5.1 or later)" : "");
  }
  return "";
}

// The process's identity, read now: `sent` when it is the one meant and alive.
signal_result check_identity(const std::string& proc_root, int pid, std::uint64_t start_time) {
  const std::optional<proc_stat> now = read_stat(proc_root, pid);
  if (!now) { return signal_result::gone; }
  if (now->start_time != start_time) { return signal_result::reused; }
  if (!now->alive()) { return signal_result::gone; }
  return signal_result::sent;
}

}  // namespace

const std::string& pidfd_unavailable_reason() {
  static const std::string reason = probe_pidfds();
  return reason;
}

signal_result send_checked_signal(int pid, std::uint64_t start_time, int signal, std::string* error,
                                  const std::string& proc_root) {
  if (pid <= 0) {
    if (error != nullptr) { *error = "no such process ID: " + std::to_string(pid); }
    return signal_result::failed;
  }
  const int fd = pidfd_open(pid);
  if (fd < 0 && errno == ESRCH) { return signal_result::gone; }
  const unique_fd owner(fd);
  if (const signal_result identity = check_identity(proc_root, pid, start_time); identity != signal_result::sent) {
    return identity;
  }
  // With a pidfd, the PID cannot have been reused since it was opened; without one (the policy in
  // signal.hpp), kill(2) follows the check at once.
  const int rc = fd >= 0 ? pidfd_send_signal(fd, signal) : ::kill(pid, signal);
  if (rc == 0) { return signal_result::sent; }
  const int err = errno;
  if (err == ESRCH) { return signal_result::gone; }
  if (error != nullptr) { *error = std::strerror(err); }
  return signal_result::failed;
}

}  // namespace gpuguard::detail
