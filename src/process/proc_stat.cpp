// The /proc model (see proc_stat.hpp). Plain POSIX reads (no iostreams): /proc files report size
// 0, and `gpuguard run` reads the process table again every few milliseconds during a grace period.
#include "process/proc_stat.hpp"

#include "util/unique_fd.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <deque>
#include <unordered_map>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

namespace gpuguard::detail {

namespace {

constexpr std::size_t max_stat_bytes = 4096;


}  // namespace

std::vector<std::string_view> split_fields(std::string_view text) {
  std::vector<std::string_view> fields;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n')) { ++i; }
    const std::size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t' && text[i] != '\n') { ++i; }
    if (i > start) { fields.push_back(text.substr(start, i - start)); }
  }
  return fields;
}

std::optional<std::string> read_small_file(const std::string& path, std::size_t max_bytes) {
  const unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) { return std::nullopt; }
  std::string text;
  char buffer[8192];
  bool ok = true;
  while (text.size() < max_bytes) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) { continue; }
      ok = false;
      break;
    }
    if (n == 0) { break; }
    text.append(buffer, std::min(static_cast<std::size_t>(n), max_bytes - text.size()));
  }
  if (!ok) { return std::nullopt; }
  return text;
}

std::optional<std::vector<int>> numeric_entries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) { return std::nullopt; }
  std::vector<int> out;
  while (const dirent* e = ::readdir(d)) {
    int n = 0;
    if (parse_number(std::string_view(e->d_name), n) && n >= 0) { out.push_back(n); }
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<proc_stat> parse_proc_stat(std::string_view text) {
  const std::size_t open = text.find('(');
  const std::size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) { return std::nullopt; }
  proc_stat s;
  std::string_view pid_text = text.substr(0, open);
  while (!pid_text.empty() && pid_text.back() == ' ') { pid_text.remove_suffix(1); }
  if (!parse_number(pid_text, s.pid) || s.pid < 0) { return std::nullopt; }
  s.comm = std::string(text.substr(open + 1, close - open - 1));
  // Fields from (3) on; fields[0] is field (3).
  const std::vector<std::string_view> fields = split_fields(text.substr(close + 1));
  if (fields.size() < 20) { return std::nullopt; }
  if (fields[0].size() != 1) { return std::nullopt; }
  s.state = fields[0][0];
  if (!parse_number(fields[1], s.ppid) || !parse_number(fields[2], s.pgid) || !parse_number(fields[3], s.sid) ||
      !parse_number(fields[6], s.flags) || !parse_number(fields[17], s.num_threads) ||
      !parse_number(fields[19], s.start_time)) {
    return std::nullopt;
  }
  return s;
}

std::optional<proc_stat> read_stat(const std::string& proc_root, int pid) {
  const std::optional<std::string> text = read_small_file(proc_root + "/" + std::to_string(pid) + "/stat", max_stat_bytes);
  if (!text) { return std::nullopt; }
  return parse_proc_stat(*text);
}

process_table read_process_table(const std::string& proc_root) {
  process_table table;
  const std::optional<std::vector<int>> pids = numeric_entries(proc_root);
  if (!pids) { return table; }
  for (const int pid : *pids) {
    if (pid <= 0) { continue; }
    if (std::optional<proc_stat> s = read_stat(proc_root, pid)) { table.emplace(pid, std::move(*s)); }
  }
  return table;
}

std::vector<proc_stat> descendants_of(int root, const process_table& table) {
  std::unordered_multimap<int, const proc_stat*> children;
  children.reserve(table.size());
  for (const auto& [pid, s] : table) { children.emplace(s.ppid, &s); }
  std::vector<proc_stat> found;
  std::deque<int> queue{root};
  while (!queue.empty()) {
    const int parent = queue.front();
    queue.pop_front();
    const auto [first, last] = children.equal_range(parent);
    for (auto it = first; it != last; ++it) {
      const proc_stat& child = *it->second;
      if (child.pid == root || child.pid == parent) { continue; }
      if (found.size() >= table.size()) { return found; }  // a loop of parent links in a racy read
      found.push_back(child);
      queue.push_back(child.pid);
    }
  }
  return found;
}

std::string read_cmdline(const std::string& proc_root, int pid) {
  std::string text =
      read_small_file(proc_root + "/" + std::to_string(pid) + "/cmdline", max_cmdline_bytes).value_or(std::string());
  while (!text.empty() && text.back() == '\0') { text.pop_back(); }
  std::replace(text.begin(), text.end(), '\0', ' ');
  return text;
}

}  // namespace gpuguard::detail
