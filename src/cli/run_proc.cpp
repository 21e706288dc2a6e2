// /proc readers for `gpuguard run`. Plain POSIX reads (no iostreams): the supervisor rescans the
// process table every few milliseconds during a grace period.
#include "run_proc.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <unordered_map>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

namespace gpuguard::cli {

namespace {

// The whole of a small /proc file ("" if it cannot be read).
std::string read_small_file(const std::string& path, std::size_t limit = std::size_t{1} << 20) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) { return {}; }
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) { continue; }
    if (n <= 0) { break; }
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() >= limit) { break; }
  }
  ::close(fd);
  return text;
}

// A decimal pid from a directory entry's name; 0 if the name is not all digits.
pid_t pid_from_name(const char* name) {
  if (*name == '\0') { return 0; }
  long value = 0;
  for (const char* c = name; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9' || value > 100000000) { return 0; }
    value = value * 10 + (*c - '0');
  }
  return static_cast<pid_t>(value);
}

// Whether any thread of `pid` is still running (for a leader that shows 'Z').
bool has_live_thread(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* tasks = ::opendir(dir.c_str());
  if (tasks == nullptr) { return false; }
  bool live = false;
  while (const dirent* entry = ::readdir(tasks)) {
    const pid_t tid = pid_from_name(entry->d_name);
    if (tid <= 0 || tid == pid) { continue; }
    const std::string stat = read_small_file(dir + "/" + entry->d_name + "/stat");
    const std::size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z' && stat[close + 2] != 'X') {
      live = true;
      break;
    }
  }
  ::closedir(tasks);
  return live;
}

}  // namespace

std::optional<proc_entry> read_proc_entry(pid_t pid) {
  const std::string text = read_small_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  // "PID (COMM) STATE PPID PGRP SESSION ...": COMM may hold spaces and parentheses, so the fields
  // start after the last ')'.
  const std::size_t open = text.find('(');
  const std::size_t close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open || close + 2 >= text.size()) {
    return std::nullopt;
  }
  proc_entry entry;
  entry.pid = pid;
  entry.comm = text.substr(open + 1, close - open - 1);
  // Fields 3.. of proc(5), numbered from 1 as the manual does.
  const char* cursor = text.c_str() + close + 2;
  entry.state = *cursor;
  int field = 3;
  while (*cursor != '\0' && field < 22) {
    while (*cursor != '\0' && *cursor != ' ') { ++cursor; }
    while (*cursor == ' ') { ++cursor; }
    ++field;
    char* end = nullptr;
    switch (field) {
      case 4: entry.ppid = static_cast<pid_t>(std::strtol(cursor, &end, 10)); break;
      case 5: entry.pgid = static_cast<pid_t>(std::strtol(cursor, &end, 10)); break;
      case 6: entry.sid = static_cast<pid_t>(std::strtol(cursor, &end, 10)); break;
      case 22: entry.start_time = std::strtoull(cursor, &end, 10); break;
      default: break;
    }
  }
  if (field != 22) { return std::nullopt; }
  if (entry.state == 'Z') { entry.zombie_with_threads = has_live_thread(pid); }
  return entry;
}

std::vector<proc_entry> list_processes() {
  std::vector<proc_entry> table;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) { return table; }
  while (const dirent* entry = ::readdir(proc)) {
    const pid_t pid = pid_from_name(entry->d_name);
    if (pid <= 0) { continue; }
    if (auto e = read_proc_entry(pid)) { table.push_back(std::move(*e)); }
  }
  ::closedir(proc);
  return table;
}

std::vector<proc_entry> descendants_of(pid_t root, const std::vector<proc_entry>& table) {
  std::unordered_multimap<pid_t, const proc_entry*> children;
  children.reserve(table.size());
  for (const proc_entry& e : table) { children.emplace(e.ppid, &e); }
  std::vector<proc_entry> found;
  std::deque<pid_t> queue{root};
  while (!queue.empty()) {
    const pid_t parent = queue.front();
    queue.pop_front();
    const auto [first, last] = children.equal_range(parent);
    for (auto it = first; it != last; ++it) {
      const proc_entry& child = *it->second;
      if (child.pid == root) { continue; }  // cannot happen in a real table; guards against loops
      found.push_back(child);
      queue.push_back(child.pid);
    }
  }
  return found;
}

std::string read_cmdline(pid_t pid) {
  std::string text = read_small_file("/proc/" + std::to_string(pid) + "/cmdline", 4096);
  while (!text.empty() && text.back() == '\0') { text.pop_back(); }
  std::replace(text.begin(), text.end(), '\0', ' ');
  return text;
}

device_files held_device_files(pid_t pid, std::string_view prefix) {
  device_files result;
  if (prefix.empty()) { return result; }
  const std::string base = "/proc/" + std::to_string(pid);
  const std::string fd_dir = base + "/fd";
  if (DIR* fds = ::opendir(fd_dir.c_str())) {
    char target[4096];
    while (const dirent* entry = ::readdir(fds)) {
      if (entry->d_name[0] == '.') { continue; }
      const std::string link = fd_dir + "/" + entry->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
      if (n <= 0) { continue; }
      const std::string_view path(target, static_cast<std::size_t>(n));
      if (path.substr(0, prefix.size()) == prefix) { result.paths.emplace_back(path); }
    }
    ::closedir(fds);
  } else {
    result.error = errno;
  }
  // /proc/PID/maps: "start-end perms offset dev inode   PATH"; the path is the sixth field.
  const std::string maps = read_small_file(base + "/maps", std::size_t{64} << 20);
  std::size_t line_start = 0;
  while (line_start < maps.size()) {
    std::size_t line_end = maps.find('\n', line_start);
    if (line_end == std::string::npos) { line_end = maps.size(); }
    const std::string_view line(maps.data() + line_start, line_end - line_start);
    const std::size_t slash = line.find('/');
    if (slash != std::string_view::npos) {
      std::string_view path = line.substr(slash);
      constexpr std::string_view deleted = " (deleted)";
      if (path.size() > deleted.size() && path.substr(path.size() - deleted.size()) == deleted) {
        path.remove_suffix(deleted.size());
      }
      if (path.substr(0, prefix.size()) == prefix) { result.paths.emplace_back(path); }
    }
    line_start = line_end + 1;
  }
  std::sort(result.paths.begin(), result.paths.end());
  result.paths.erase(std::unique(result.paths.begin(), result.paths.end()), result.paths.end());
  return result;
}

}  // namespace gpuguard::cli
