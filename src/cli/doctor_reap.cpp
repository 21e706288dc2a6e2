// `gpuguard doctor --reap` through pidfds (see doctor_reap.hpp).
#include "doctor_reap.hpp"

#include "proc.hpp"
#include "format.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

// glibc may predate the wrappers; the numbers are the same on every architecture (new syscalls).
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace gpuguard::cli::doctor {

namespace {

int pidfd_open(int pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0U)); }

int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0U));
}

// Owns a pidfd.
class pidfd {
 public:
  pidfd() = default;
  explicit pidfd(int fd) noexcept : fd_(fd) {}
  pidfd(pidfd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  pidfd& operator=(pidfd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  pidfd(const pidfd&) = delete;
  pidfd& operator=(const pidfd&) = delete;
  ~pidfd() {
    if (fd_ >= 0) { ::close(fd_); }
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

struct pending {
  pidfd fd;
  bool waiting = false;  // signalled, not yet seen to exit
};

std::string seconds_text(double s) { return detail::format_duration(static_cast<std::int64_t>(s * 1e9)); }

// Waits until every waiting entry's pidfd is readable (its process exited) or `seconds` pass;
// marks in `exited` the entries seen to exit.
void wait_exits(std::vector<pending>& items, double seconds, std::vector<bool>& exited) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (items[i].waiting) {
        fds.push_back(pollfd{items[i].fd.get(), POLLIN, 0});
        which.push_back(i);
      }
    }
    if (fds.empty()) { return; }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    const int rc = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), left > 0 ? static_cast<int>(left) : 0);
    if (rc < 0 && errno != EINTR) { return; }
    for (std::size_t k = 0; rc > 0 && k < fds.size(); ++k) {
      if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        items[which[k]].waiting = false;
        exited[which[k]] = true;
      }
    }
    if (left <= 0) { return; }
  }
}

}  // namespace

std::string pidfd_unavailable_reason() {
  const int fd = pidfd_open(static_cast<int>(::getpid()));
  if (fd < 0) {
    const int e = errno;
    return std::string("pidfd_open failed: ") + std::strerror(e) +
           (e == ENOSYS ? " (pidfds need Linux 5.3 or later)" : e == EPERM ? " (blocked by a seccomp filter?)" : "");
  }
  const pidfd owner(fd);
  if (pidfd_send_signal(owner.get(), 0) != 0) {
    const int e = errno;
    return std::string("pidfd_send_signal failed: ") + std::strerror(e) +
           (e == ENOSYS ? " (pidfds need Linux 5.1 or later)" : "");
  }
  return "";
}

std::vector<reap_outcome> reap(const std::vector<reap_target>& targets, const std::string& proc_root, double grace_s,
                               double kill_wait_s) {
  std::vector<reap_outcome> outcomes(targets.size());
  std::vector<pending> items(targets.size());
  std::vector<bool> exited(targets.size(), false);
  const auto start = std::chrono::steady_clock::now();

  for (std::size_t i = 0; i < targets.size(); ++i) {
    const reap_target& t = targets[i];
    reap_outcome& out = outcomes[i];
    const std::string who = "PID " + std::to_string(t.pid);
    // The pidfd first, then the identity check: while the pidfd is open and the process alive,
    // the PID cannot name anybody else, so a start time read now is the pidfd's process's.
    const int fd = pidfd_open(t.pid);
    if (fd < 0) {
      const int e = errno;
      out.action = e == ESRCH ? "gone" : "failed";
      out.detail = e == ESRCH ? who + " had exited before it was signalled"
                              : "pidfd_open(" + who + ") failed: " + std::strerror(e) + "; not signalled";
      continue;
    }
    items[i].fd = pidfd(fd);
    const std::optional<proc_stat> now = read_stat(proc_root, t.pid);
    if (!now) {
      const bool gone = pidfd_send_signal(fd, 0) != 0 && errno == ESRCH;
      out.action = gone ? "gone" : "refused";
      out.detail = gone ? who + " had exited before it was signalled"
                        : "cannot re-read " + proc_root + "/" + std::to_string(t.pid) + "/stat to verify it; not signalled";
      continue;
    }
    if (now->start_time != t.start_time) {
      out.action = "refused";
      out.detail = who + " now names another process (start time " + std::to_string(now->start_time) +
                   ", expected " + std::to_string(t.start_time) + "): the PID was reused; not signalled";
      continue;
    }
    if (pidfd_send_signal(fd, 0) != 0) {
      const int e = errno;
      out.action = e == ESRCH ? "gone" : "failed";
      out.detail = e == ESRCH ? who + " had exited before it was signalled"
                              : "cannot signal " + who + ": " + std::strerror(e);
      continue;
    }
    if (now->state == 'Z' || now->state == 'X') {
      out.action = "gone";
      out.detail = who + " had exited (a zombie) before it was signalled";
      continue;
    }
    if (pidfd_send_signal(fd, SIGTERM) != 0) {
      const int e = errno;
      out.action = e == ESRCH ? "gone" : "failed";
      out.detail = e == ESRCH ? who + " had exited before it was signalled"
                              : "SIGTERM to " + who + " failed: " + std::strerror(e);
      continue;
    }
    out.signals.emplace_back("SIGTERM");
    if (now->state == 'T' || now->state == 't') {
      // A stopped process keeps SIGTERM pending until it runs again.
      if (pidfd_send_signal(fd, SIGCONT) == 0) { out.signals.emplace_back("SIGCONT"); }
    }
    items[i].waiting = true;
  }

  wait_exits(items, grace_s, exited);
  const double after_term = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (exited[i]) {
      outcomes[i].action = "terminated";
      outcomes[i].detail = "ended after SIGTERM (within " + seconds_text(after_term) + ")";
      continue;
    }
    if (!items[i].waiting) { continue; }
    if (pidfd_send_signal(items[i].fd.get(), SIGKILL) != 0) {
      const int e = errno;
      items[i].waiting = false;
      if (e == ESRCH) {
        outcomes[i].action = "terminated";
        outcomes[i].detail = "ended after SIGTERM";
      } else {
        outcomes[i].action = "failed";
        outcomes[i].detail = std::string("SIGKILL failed: ") + std::strerror(e);
      }
      continue;
    }
    outcomes[i].signals.emplace_back("SIGKILL");
  }
  std::vector<bool> killed(targets.size(), false);
  wait_exits(items, kill_wait_s, killed);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (killed[i]) {
      outcomes[i].action = "killed";
      outcomes[i].detail = "still alive " + seconds_text(grace_s) + " after SIGTERM; ended after SIGKILL (within " +
                           seconds_text(total) + ")";
    } else if (items[i].waiting) {
      outcomes[i].action = "survived";
      outcomes[i].detail = "still alive " + seconds_text(kill_wait_s) +
                           " after SIGKILL: stuck in the kernel (D state, likely the driver; check dmesg for Xid "
                           "errors); it ends when the call returns";
    }
  }
  return outcomes;
}

}  // namespace gpuguard::cli::doctor
