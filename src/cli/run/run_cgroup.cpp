// The job's cgroup (see run_cgroup.hpp).
#include "run/run_cgroup.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuguard::cli {

namespace {

constexpr const char* prefix = "gpuguard-run.";

// The cgroup2 mount: its mount point and the cgroup path at its root ("/" unless a subtree is
// bind-mounted), from /proc/self/mountinfo; nullopt when there is none.
std::optional<std::pair<std::string, std::string>> cgroup2_mount() {
  const std::optional<std::string> text = detail::read_small_file("/proc/self/mountinfo", std::size_t{1} << 20);
  if (!text) { return std::nullopt; }
  std::string_view rest = *text;
  while (!rest.empty()) {
    const std::size_t newline = rest.find('\n');
    const std::string_view line = rest.substr(0, newline);
    rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    const std::size_t dash = line.find(" - ");
    if (dash == std::string_view::npos || line.substr(dash + 3).rfind("cgroup2 ", 0) != 0) { continue; }
    std::vector<std::string_view> fields;
    std::size_t i = 0;
    while (i < dash && fields.size() < 5) {
      const std::size_t space = line.find(' ', i);
      const std::size_t end = space == std::string_view::npos || space > dash ? dash : space;
      fields.push_back(line.substr(i, end - i));
      i = end + 1;
    }
    if (fields.size() == 5 && fields[4].find('\\') == std::string_view::npos) {  // no escaped characters
      return std::make_pair(std::string(fields[4]), std::string(fields[3]));
    }
  }
  return std::nullopt;
}

bool write_text(const std::string& path, std::string_view text) noexcept {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) { return false; }
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// The directories below `dir`, deepest first.
void subdirectories(const std::string& dir, std::vector<std::string>& out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) { return; }
  std::vector<std::string> here;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      here.push_back(dir + "/" + e->d_name);
    }
  }
  ::closedir(d);
  for (const std::string& sub : here) {
    subdirectories(sub, out);
    out.push_back(sub);
  }
}

// The inode of this process's PID namespace ("pid:[4026531836]"): with the PID, a name no other
// gpuguard sharing the parent cgroup can have (in containers each supervisor may be PID 1).
std::string pid_namespace_id() {
  char link[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  const std::string text(link, n > 0 ? static_cast<std::size_t>(n) : 0);
  const std::size_t open = text.find('[');
  const std::size_t close = text.find(']');
  return open != std::string::npos && close > open ? text.substr(open + 1, close - open - 1) : "0";
}

// Empty job cgroups whose supervisor is gone, next to the one about to be made: only those of
// this PID namespace (`ns`), whose PIDs mean something here.
void remove_stale_siblings(const std::string& parent, const std::string& ns) {
  DIR* d = ::opendir(parent.c_str());
  if (d == nullptr) { return; }
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    if (e->d_type != DT_DIR || name.rfind(prefix, 0) != 0) { continue; }
    const std::string tail(name.substr(std::strlen(prefix)));  // PID.NAMESPACE
    const std::size_t dot = tail.find('.');
    if (dot == std::string::npos || tail.substr(dot + 1) != ns) { continue; }
    const std::string digits = tail.substr(0, dot);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) { continue; }
    if (::kill(static_cast<pid_t>(std::stol(digits)), 0) != 0 && errno == ESRCH) {
      stale.push_back(parent + "/" + std::string(name));
    }
  }
  ::closedir(d);
  for (const std::string& dir : stale) { static_cast<void>(::rmdir(dir.c_str())); }  // fails while populated
}

}  // namespace

job_cgroup job_cgroup::create(pid_t supervisor) {
  job_cgroup g;
  const auto mount = cgroup2_mount();
  if (!mount) {
    g.why_not_ = "no cgroup v2 hierarchy is mounted";
    return g;
  }
  const std::optional<std::string> own = [] () -> std::optional<std::string> {
    const std::optional<std::string> text = detail::read_small_file("/proc/self/cgroup", 65536);
    if (!text) { return std::nullopt; }
    const std::size_t at = text->rfind("0::", 0) == 0 ? 0 : text->find("\n0::");
    if (at == std::string::npos) { return std::nullopt; }
    const std::size_t begin = at == 0 ? 3 : at + 4;
    return text->substr(begin, text->find('\n', begin) - begin);
  }();
  const auto& [mount_point, mount_root] = *mount;
  if (!own || own->empty() || own->front() != '/') {
    g.why_not_ = "this process's cgroup v2 path is unknown (/proc/self/cgroup)";
    return g;
  }
  std::string relative = *own;
  if (mount_root != "/") {
    if (relative.rfind(mount_root, 0) != 0) {
      g.why_not_ = "this process's cgroup " + *own + " is outside the cgroup2 mount at " + mount_point;
      return g;
    }
    relative = relative.substr(mount_root.size());
  }
  if (relative == "/") { relative.clear(); }
  const std::string parent = mount_point + relative;
  const std::string ns = pid_namespace_id();
  const std::string leaf = prefix + std::to_string(supervisor) + "." + ns;
  remove_stale_siblings(parent, ns);
  g.directory_ = parent + "/" + leaf;
  g.name_ = (*own == "/" ? std::string() : *own) + "/" + leaf;
  // One with this very name is left by an earlier supervisor with this PID in a PID namespace that
  // is gone (namespace inodes are reused; such a supervisor was PID 1, killed with its namespace):
  // no live supervisor can have it, so it is removed if empty.
  if (::mkdir(g.directory_.c_str(), 0755) != 0 && !(errno == EEXIST && ::rmdir(g.directory_.c_str()) == 0 &&
                                                    ::mkdir(g.directory_.c_str(), 0755) == 0)) {
    g.why_not_ = "cannot create " + g.directory_ + ": " + std::strerror(errno);
    g.directory_.clear();  // not ours: never removed
    return g;
  }
  if (::access((g.directory_ + "/cgroup.kill").c_str(), W_OK) != 0) {
    g.why_not_ = g.directory_ + "/cgroup.kill: " + std::strerror(errno) + " (cgroup.kill needs Linux 5.14)";
    static_cast<void>(::rmdir(g.directory_.c_str()));
    g.directory_.clear();
    return g;
  }
  const int fd = ::open((g.directory_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    g.why_not_ = "cannot open " + g.directory_ + "/cgroup.procs: " + std::strerror(errno);
    static_cast<void>(::rmdir(g.directory_.c_str()));
    g.directory_.clear();
    return g;
  }
  g.procs_fd_.reset(fd);
  return g;
}

std::vector<detail::proc_stat> job_cgroup::members() const {
  std::vector<detail::proc_stat> found;
  if (!active()) { return found; }
  std::vector<std::string> dirs;
  subdirectories(directory_, dirs);
  dirs.push_back(directory_);
  for (const std::string& dir : dirs) {
    const std::optional<std::string> text = detail::read_small_file(dir + "/cgroup.procs", std::size_t{16} << 20);
    if (!text) { continue; }
    std::size_t i = 0;
    while (i < text->size()) {
      const std::size_t end = std::min(text->find('\n', i), text->size());
      const std::string line = text->substr(i, end - i);
      i = end + 1;
      if (line.empty() || line.find_first_not_of("0123456789") != std::string::npos || line.size() > 9) { continue; }
      if (std::optional<detail::proc_stat> s = detail::read_stat("/proc", std::stoi(line)); s && s->alive()) {
        found.push_back(std::move(*s));
      }
    }
  }
  return found;
}

bool job_cgroup::kill() const noexcept { return active() && write_text(directory_ + "/cgroup.kill", "1"); }

namespace {

// `populated` of an open cgroup.events (read from the start); true when it cannot be read.
bool events_say_populated(int fd) noexcept {
  char text[256];
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) { return true; }
  text[n] = '\0';
  const char* line = std::strstr(text, "populated ");
  return line == nullptr || line[std::strlen("populated ")] != '0';
}

}  // namespace

bool job_cgroup::populated() const noexcept {
  if (directory_.empty()) { return false; }
  const int fd = ::open((directory_ + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) { return true; }
  const bool result = events_say_populated(fd);
  ::close(fd);
  return result;
}

bool job_cgroup::wait_empty(int timeout_ms) const noexcept {
  if (directory_.empty()) { return true; }
  const int fd = ::open((directory_ + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) { return false; }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool empty = !events_say_populated(fd);
  while (!empty) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) { break; }
    pollfd p{fd, POLLPRI, 0};  // kernfs wakes POLLPRI|POLLERR when the file changes
    static_cast<void>(::poll(&p, 1, static_cast<int>(std::min<long long>(left, 5))));
    empty = !events_say_populated(fd);
  }
  ::close(fd);
  return empty;
}

bool job_cgroup::remove(int timeout_ms) const {
  if (directory_.empty()) { return true; }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    std::vector<std::string> dirs;
    subdirectories(directory_, dirs);
    for (const std::string& dir : dirs) { static_cast<void>(::rmdir(dir.c_str())); }
    if (::rmdir(directory_.c_str()) == 0 || errno == ENOENT) { return true; }
    if (errno != EBUSY || std::chrono::steady_clock::now() >= deadline) { return false; }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // killed members are still leaving
  }
}

}  // namespace gpuguard::cli
