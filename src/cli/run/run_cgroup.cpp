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

// The first line of `rest` (without its newline), which it then no longer holds.
std::string_view take_line(std::string_view& rest) {
  const std::size_t newline = rest.find('\n');
  const std::string_view line = rest.substr(0, newline);
  rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
  return line;
}

// A cgroup hierarchy's mount: its mount point and the cgroup path at its root ("/" unless a
// subtree is bind-mounted), from /proc/self/mountinfo: the cgroup2 one (`controller` "") or the
// cgroup v1 one that holds `controller`; nullopt when there is none.
std::optional<std::pair<std::string, std::string>> cgroup_mount(std::string_view controller) {
  const std::optional<std::string> text = detail::read_small_file("/proc/self/mountinfo", std::size_t{1} << 20);
  if (!text) { return std::nullopt; }
  std::string_view rest = *text;
  while (!rest.empty()) {
    const std::string_view line = take_line(rest);
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    const std::size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) { continue; }
    const std::string_view tail = line.substr(dash + 3);
    if (controller.empty()) {
      if (tail.rfind("cgroup2 ", 0) != 0) { continue; }
    } else {
      if (tail.rfind("cgroup ", 0) != 0) { continue; }
      const std::size_t space = tail.rfind(' ');
      const std::string options = "," + std::string(tail.substr(space + 1)) + ",";
      if (options.find("," + std::string(controller) + ",") == std::string::npos) { continue; }
    }
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

// The path of `pid`'s cgroup (0: this process) in the hierarchy of `controller` ("": cgroup v2's
// "0::" line), as /proc/PID/cgroup shows it; nullopt when it does not say.
std::optional<std::string> cgroup_path(pid_t pid, std::string_view controller) {
  const std::string file = pid == 0 ? std::string("/proc/self/cgroup") : "/proc/" + std::to_string(pid) + "/cgroup";
  const std::optional<std::string> text = detail::read_small_file(file, 65536);
  if (!text) { return std::nullopt; }
  std::string_view rest = *text;
  while (!rest.empty()) {
    const std::string_view line = take_line(rest);
    // ID:CONTROLLERS:PATH (v2: 0::PATH)
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) { continue; }
    const std::string controllers = "," + std::string(line.substr(first + 1, second - first - 1)) + ",";
    const bool match = controller.empty() ? line.substr(0, second + 1) == "0::"
                                          : controllers.find("," + std::string(controller) + ",") != std::string::npos;
    if (match) { return std::string(line.substr(second + 1)); }
  }
  return std::nullopt;
}

// The directory of cgroup `path` in the hierarchy mounted at `mount` (point, root); "" when the
// path lies outside that mount.
std::string cgroup_directory(const std::pair<std::string, std::string>& mount, const std::string& path) {
  const auto& [mount_point, mount_root] = mount;
  if (path.empty() || path.front() != '/') { return ""; }
  std::string relative = path;
  if (mount_root != "/") {
    if (relative.rfind(mount_root, 0) != 0 || (relative.size() > mount_root.size() && relative[mount_root.size()] != '/')) {
      return "";
    }
    relative = relative.substr(mount_root.size());
  }
  if (relative == "/") { relative.clear(); }
  return mount_point + relative;
}

bool readable(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

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
  const auto mount = cgroup_mount("");
  if (!mount) {
    g.why_not_ = "no cgroup v2 hierarchy is mounted";
    return g;
  }
  const std::optional<std::string> own = cgroup_path(0, "");
  if (!own || own->empty() || own->front() != '/') {
    g.why_not_ = "this process's cgroup v2 path is unknown (/proc/self/cgroup)";
    return g;
  }
  const std::string parent = cgroup_directory(*mount, *own);
  if (parent.empty()) {
    g.why_not_ = "this process's cgroup " + *own + " is outside the cgroup2 mount at " + mount->first;
    return g;
  }
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

std::string memory_cgroup::text() const {
  return version == 2 ? "cgroup v2 " + name : version == 1 ? "cgroup v1 memory:" + name : std::string("no memory cgroup");
}

memory_cgroup find_memory_cgroup(pid_t pid, const std::string& v2_path) {
  memory_cgroup m;
  std::string why_v2;
  const auto v2_mount = cgroup_mount("");
  const std::optional<std::string> v2_own = v2_path.empty() ? cgroup_path(pid, "") : std::optional<std::string>(v2_path);
  if (v2_mount && v2_own) {
    // The nearest cgroup at or above it with memory.events: below one without the controller, a
    // process is charged to that ancestor.
    std::string name = *v2_own;
    std::string directory = cgroup_directory(*v2_mount, name);
    while (!directory.empty() && !readable(directory + "/memory.events") && name.size() > 1) {
      name = name.substr(0, std::max<std::size_t>(name.rfind('/'), 1));
      directory = cgroup_directory(*v2_mount, name);
    }
    if (!directory.empty() && readable(directory + "/memory.events")) {
      m.version = 2;
      m.name = name;
      m.directory = directory;
      return m;
    }
    why_v2 = "the cgroup v2 hierarchy has no memory controller for " + *v2_own;
  } else {
    why_v2 = v2_mount ? "its cgroup v2 path is unknown" : "no cgroup v2 hierarchy is mounted";
  }
  const auto v1_mount = cgroup_mount("memory");
  const std::optional<std::string> v1_own = cgroup_path(pid, "memory");
  if (!v1_mount || !v1_own) {
    m.why_not = why_v2 + ", and " + (v1_mount ? "its cgroup v1 memory path is unknown" : "no cgroup v1 memory hierarchy is mounted");
    return m;
  }
  const std::string directory = cgroup_directory(*v1_mount, *v1_own);
  if (directory.empty() || !readable(directory + "/memory.oom_control")) {
    m.why_not = why_v2 + ", and the cgroup v1 memory cgroup " + *v1_own + " has no readable memory.oom_control under " + v1_mount->first;
    return m;
  }
  m.version = 1;
  m.name = *v1_own;
  m.directory = directory;
  return m;
}

std::optional<std::uint64_t> read_oom_kills(const memory_cgroup& memory) {
  if (!memory.found()) { return std::nullopt; }
  const std::optional<std::string> text =
      detail::read_small_file(memory.directory + (memory.version == 2 ? "/memory.events" : "/memory.oom_control"), 65536);
  if (!text) { return std::nullopt; }
  const std::size_t at = text->rfind("oom_kill ", 0) == 0 ? 0 : text->find("\noom_kill ");
  if (at == std::string::npos) { return std::nullopt; }
  const std::size_t begin = text->find(' ', at + 1) + 1;
  const std::size_t end = std::min(text->find('\n', begin), text->size());
  const std::string digits = text->substr(begin, end - begin);
  if (digits.empty() || digits.size() > 19 || digits.find_first_not_of("0123456789") != std::string::npos) { return std::nullopt; }
  return std::stoull(digits);
}

}  // namespace gpuguard::cli
