// The job's PID namespace (see run_namespace.hpp).
#include "run/run_namespace.hpp"

#include "holders/proc.hpp"
#include "util/file.hpp"
#include "util/unique_fd.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuguard::cli {
namespace {

using detail::unique_fd;

// fork(2) with namespace flags: the raw system call, since glibc's clone() wants a stack and a
// function. The child runs on a copy of this stack, as after fork. glibc keeps no PID cache, and
// raise() asks the kernel for the thread's id, so the child may use the library as after fork
// (the caller has one thread: no lock can be held by another).
pid_t clone_like_fork(int flags) noexcept {
  return static_cast<pid_t>(::syscall(SYS_clone, static_cast<unsigned long>(flags) | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
}

// Writes `text` to /proc/PID/NAME; "" or why not.
std::string write_proc_file(pid_t pid, const char* name, const std::string& text) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  const unique_fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid() || !detail::write_all(fd.get(), text.data(), text.size())) {
    return "cannot write " + path + ": " + std::strerror(errno);
  }
  return {};
}

// The child's user namespace maps our user and group to themselves. Without CAP_SETGID over the
// parent namespace the kernel takes a gid_map only after setgroups(2) is denied in the child's.
std::string map_own_ids(pid_t child) {
  const std::string uid = std::to_string(::geteuid());
  const std::string gid = std::to_string(::getegid());
  std::string why;
  if (::geteuid() != 0) { why = write_proc_file(child, "setgroups", "deny"); }
  if (why.empty()) { why = write_proc_file(child, "uid_map", uid + " " + uid + " 1\n"); }
  if (why.empty()) { why = write_proc_file(child, "gid_map", gid + " " + gid + " 1\n"); }
  return why;
}

}  // namespace

pid_t fork_into_namespaces(job_namespace* made) {
  // The child waits on this pipe until its ids are mapped: before that it would exec CMD as the
  // overflow user.
  int ends[2] = {-1, -1};
  if (::pipe2(ends, O_CLOEXEC) != 0) {
    made->why_not = std::string("pipe: ") + std::strerror(errno);
    return -1;
  }
  unique_fd ready_read(ends[0]);
  unique_fd ready_write(ends[1]);
  const int base = CLONE_NEWPID | CLONE_NEWNS;
  made->user = ::geteuid() != 0;
  pid_t child = clone_like_fork(base | (made->user ? CLONE_NEWUSER : 0));
  if (child < 0 && !made->user && errno == EPERM) {  // root without CAP_SYS_ADMIN (a container)
    made->user = true;
    child = clone_like_fork(base | CLONE_NEWUSER);
  }
  if (child < 0) {
    made->why_not = std::string(made->user ? "cannot make a user and PID namespace: " : "cannot make a PID namespace: ") +
                    std::strerror(errno);
    made->user = false;
    return -1;
  }
  if (child == 0) {
    ready_write.reset();
    char go = 0;
    ssize_t got = 0;
    do { got = ::read(ready_read.get(), &go, 1); } while (got < 0 && errno == EINTR);
    if (got != 1) { ::_exit(1); }  // the parent could not map our ids: it reaps us
    made->pid = true;
    return 0;
  }
  ready_read.reset();
  if (made->user) {
    made->why_not = map_own_ids(child);
    if (!made->why_not.empty()) {
      made->why_not = "cannot map ids in the new user namespace: " + made->why_not;
      made->user = false;
      ready_write.reset();
      static_cast<void>(::kill(child, SIGKILL));
      while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {}
      return -1;
    }
  }
  made->pid = true;
  static_cast<void>(detail::write_all(ready_write.get(), "g", 1));
  return child;
}

int mount_own_proc() noexcept {
  // Private first: the new /proc must not propagate to the mount namespace we were copied from.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) { return errno; }
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) { return errno; }
  return 0;
}

pid_t outer_pid_of_child(pid_t parent, pid_t inner) {
  for (const auto& [pid, stat] : detail::read_process_table()) {
    if (stat.ppid != parent) { continue; }
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const proc_status status = parse_proc_status(text);
    if (!status.ns_pids.empty() && status.ns_pids.back() == inner) { return pid; }
  }
  return 0;
}

}  // namespace gpuguard::cli
