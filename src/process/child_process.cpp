// Children that die with their parent. The child side of fork() runs only async-signal-safe calls
// until exec; an exec failure travels back to the parent through a close-on-exec pipe.
#include <gpuguard/core/child_process.hpp>

#include "process/child_groups.hpp"
#include "process/end.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuguard {

namespace {

// Process groups the exit paths end. A fixed table of atomics, so the crash handler can read it.
constexpr std::size_t max_groups = 256;
std::array<std::atomic<pid_t>, max_groups> groups{};

// In a child made by fork() the groups are the parent's children, not the child's: its exit paths
// (a crash above all, which SIGKILLs them) must leave them alone.
void forget_parent_groups_in_forked_child() noexcept {
  for (auto& slot : groups) { slot.store(0, std::memory_order_relaxed); }
}

void add_group(pid_t group) noexcept {
  static const bool fork_handler = ::pthread_atfork(nullptr, nullptr, forget_parent_groups_in_forked_child) == 0;
  static_cast<void>(fork_handler);
  for (auto& slot : groups) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, group)) { return; }
  }
}

void remove_group(pid_t group) noexcept {
  for (auto& slot : groups) {
    pid_t expected = group;
    if (slot.compare_exchange_strong(expected, 0)) { return; }
  }
}

int reap(pid_t pid, bool block) noexcept {
  int status = 0;
  for (;;) {
    const pid_t got = ::waitpid(pid, &status, block ? 0 : WNOHANG);
    if (got == pid) { return status; }
    if (got == 0) { return -2; }  // still running
    if (errno != EINTR) { return -1; }
  }
}

}  // namespace

child_process::~child_process() {
  // A copy made by fork() (a worker's static or stack objects) is not the child's owner.
  if (pid_ > 0 && ::getpid() == parent_) { static_cast<void>(terminate()); }
}

int child_process::wait() noexcept {
  if (pid_ <= 0) { return -1; }
  const int status = reap(pid_, true);
  if (own_group_) { remove_group(pid_); }
  pid_ = -1;
  return status;
}

int child_process::terminate(int grace_ms) noexcept {
  if (pid_ <= 0) { return -1; }
  const pid_t child = pid_;
  const bool group = own_group_;
  int status = -2;
  const auto collect = [&status, child] {
    if (status == -2) { status = reap(child, false); }
  };
  try {
    // The one way processes are ended (process/end.hpp): the child, and with its own group every
    // member of it, each through an identity-checked signal; the group's SIGKILL at once at the end.
    detail::end_plan plan;
    plan.grace_ms = grace_ms;
    plan.reap = collect;
    plan.live = [child, group] {
      std::vector<detail::proc_stat> members;
      for (auto& [pid, s] : detail::read_process_table()) {
        if (s.alive() && (pid == child || (group && s.pgid == child))) { members.push_back(std::move(s)); }
      }
      return members;
    };
    plan.kill_all = [child, group, &status] {
      return (group || status == -2) && ::kill(group ? -child : child, SIGKILL) == 0;
    };
    static_cast<void>(detail::end_processes(plan));
  } catch (...) {  // out of memory: the old way, the group's SIGKILL
    static_cast<void>(::kill(group ? -child : child, SIGKILL));
  }
  if (status == -2) {
    static_cast<void>(::kill(child, SIGKILL));  // still there after the kill wait: it must go
    status = reap(child, true);
  }
  if (own_group_) { remove_group(child); }
  pid_ = -1;
  return status;
}

pid_t child_process::release() noexcept {
  if (own_group_ && pid_ > 0) { remove_group(pid_); }
  return std::exchange(pid_, -1);
}

child_process spawn(const std::vector<std::string>& argv, const spawn_options& opts) {
  if (argv.empty()) { throw std::invalid_argument("gpuguard::spawn: empty argv"); }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) { args.push_back(const_cast<char*>(a.c_str())); }  // NOLINT: execvp's signature
  args.push_back(nullptr);

  std::array<int, 2> report{};
  if (::pipe2(report.data(), O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "gpuguard::spawn: pipe");
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(report[0]);
    ::close(report[1]);
    throw std::system_error(error, std::generic_category(), "gpuguard::spawn: fork for '" + argv[0] + "'");
  }
  if (pid == 0) {
    // The child: async-signal-safe calls only until exec.
    ::close(report[0]);
    int error = 0;
    if (opts.own_group && ::setpgid(0, 0) != 0) { error = errno; }
    if (error == 0 && opts.death_signal != 0 && ::prctl(PR_SET_PDEATHSIG, opts.death_signal) != 0) { error = errno; }
    // The parent may have died before the death signal was set: then nobody would send it.
    if (error == 0 && ::getppid() != parent) { ::_exit(127); }
    if (error == 0) {
      ::execvp(args[0], args.data());
      error = errno;
    }
    ssize_t ignored = ::write(report[1], &error, sizeof error);
    static_cast<void>(ignored);
    ::_exit(127);
  }
  ::close(report[1]);
  if (opts.own_group) {
    static_cast<void>(::setpgid(pid, pid));  // also from this side: no window where kill(-pid) misses
    add_group(pid);
  }
  int error = 0;
  ssize_t n = 0;
  do { n = ::read(report[0], &error, sizeof error); } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof error)) {  // exec failed
    static_cast<void>(reap(pid, true));
    if (opts.own_group) { remove_group(pid); }
    throw std::system_error(error, std::generic_category(), "gpuguard::spawn: cannot start '" + argv[0] + "'");
  }
  return child_process(pid, opts.own_group);
}

void detail::kill_child_groups() noexcept {
  for (auto& slot : groups) {
    const pid_t group = slot.load(std::memory_order_relaxed);
    if (group > 0) { static_cast<void>(::kill(-group, SIGKILL)); }
  }
}

void detail::end_child_groups(int grace_ms) noexcept {
  std::vector<pid_t> live_groups;
  for (auto& slot : groups) {
    const pid_t group = slot.load(std::memory_order_relaxed);
    if (group > 0) { live_groups.push_back(group); }
  }
  if (live_groups.empty()) { return; }
  try {
    end_plan plan;
    plan.grace_ms = grace_ms;
    plan.reap = [&live_groups] {
      for (const pid_t group : live_groups) {
        while (::waitpid(-group, nullptr, WNOHANG) > 0) {}  // our own children of the group: no zombies
      }
    };
    plan.live = [&live_groups] {
      std::vector<proc_stat> members;
      for (auto& [pid, s] : read_process_table()) {
        if (s.alive() && std::find(live_groups.begin(), live_groups.end(), s.pgid) != live_groups.end()) {
          members.push_back(std::move(s));
        }
      }
      return members;
    };
    plan.kill_all = [] {
      kill_child_groups();
      return true;
    };
    static_cast<void>(end_processes(plan));
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: the SIGKILL below ends them
  }
  kill_child_groups();
}

}  // namespace gpuguard
