// A seeded mutation fuzzer for the doctor's /proc readers (src/cli/proc.cpp), for ctest. Each input
// is a small process table as text (tests/fuzz/proc_corpus): one "== PID FILE" header before each
// file's text, for the files stat, status, cmdline, cgroup and maps of each process, plus "fd N"
// lines naming the device files a process holds. On each (mutated) input it checks:
//  - the text parsers: parse_proc_stat, parse_proc_status, parse_cgroup_v2 and mapped_paths_under
//    never throw, give the same answer twice and only what the text holds (a command name is the
//    text between the first '(' and the last ')', a cgroup one line, mapped paths under the prefix);
//    stat and status lines written from random fields (any bytes in the command name) read back
//    exactly;
//  - the whole reader on a fake proc root written from the input (in memory, /dev/shm, if it can):
//    scan_processes sees exactly the processes whose stat parses, holders hold only files under
//    the prefix with the descriptor and mapping counts written, and classify gives every holder
//    one class that agrees with its state and the orphan flag, with a reason and a hint;
//  - classify and descendants_of (the process layer's, src/process) on the table, cycles included:
//    bounded, consistent.
// Built with the readers under ASan and UBSan.
//
// usage: proc_fuzz CORPUS_DIR [--seed N] [--iterations N] [--seconds S]
#include "fuzz_driver.hpp"
#include "holders/proc.hpp"
#include "process/proc_stat.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace {

using gpuguard::cli::proc_stat;

const std::vector<std::string> dictionary = {
    "(", ")", ") ", " (", "))", "((", " ", "  ", "\n", "\t", std::string(1, '\0'), "R", "S", "D", "Z", "T", "t",
    "X", "I", "0", "1", "-1", "2147483647", "2147483648", "-2147483649", "18446744073709551615", "18446744073709551616", "4194304",
    "Uid:\t", "SigIgn:\t", "NSpid:\t", "0000000000000001", "ffffffffffffffff", "fffffffffffffffff", "0::/",
    "0::/system.slice/job.scope", "1:name=systemd:/", "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm",
    " (deleted)", "00400000-00500000 rw-s 00000000 00:05 12 ", "python -m multiprocessing.spawn", "spawn_main",
    "== ", "fd ", "\xff", "\xc3\xa4"};

// One process of the input: its files' text and the device files it holds through descriptors.
struct fake_process {
  std::map<std::string, std::string> files;
  std::vector<std::string> fds;  // device names under the prefix, e.g. "0", "ctl"
};

std::map<int, fake_process> parse_input(const std::string& text) {
  std::map<int, fake_process> out;
  fake_process* current = nullptr;
  std::string* file = nullptr;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) { end = text.size(); }
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    int pid = 0;
    char name[16] = {};
    if (line.rfind("== ", 0) == 0 && std::sscanf(line.c_str(), "== %d %15s", &pid, name) == 2 && pid > 0 &&
        pid < 100000 && out.size() < 64) {
      current = &out[pid];
      const std::string n = name;
      file = n == "stat" || n == "status" || n == "cmdline" || n == "cgroup" || n == "maps" ? &current->files[n] : nullptr;
      continue;
    }
    // A descriptor's target is a file name: no '/' beyond the prefix, and no NUL (symlink(2) would
    // cut it there, and the expected count would name a file that does not exist).
    if (current != nullptr && line.rfind("fd ", 0) == 0 && line.size() < 40 && line.find('/') == std::string::npos &&
        line.find('\0') == std::string::npos && current->fds.size() < 16) {
      current->fds.push_back(line.substr(3));
      continue;
    }
    if (file != nullptr) { *file += line + "\n"; }
  }
  return out;
}

std::string check_stat_text(const std::string& text) {
  const std::optional<proc_stat> a = gpuguard::cli::parse_proc_stat(text);
  const std::optional<proc_stat> b = gpuguard::cli::parse_proc_stat(text);
  if (a.has_value() != b.has_value() || (a && (a->pid != b->pid || a->comm != b->comm || a->state != b->state))) {
    return "parse_proc_stat differs on the same text";
  }
  if (!a) { return ""; }
  const std::size_t open = text.find('(');
  const std::size_t close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || a->comm != text.substr(open + 1, close - open - 1)) {
    return "a command name that is not the text between the first '(' and the last ')'";
  }
  if (a->pid < 0) { return "a negative pid"; }
  return "";
}

std::string check_texts(const fake_process& p, const std::string& prefix) {
  for (const auto& [name, text] : p.files) {
    if (name == "stat") {
      std::string broken = check_stat_text(text);
      if (!broken.empty()) { return broken; }
    } else if (name == "status") {
      const gpuguard::cli::proc_status s = gpuguard::cli::parse_proc_status(text);
      const gpuguard::cli::proc_status again = gpuguard::cli::parse_proc_status(text);
      if (s.uid != again.uid || s.sighup_ignored != again.sighup_ignored || s.ns_pids != again.ns_pids) {
        return "parse_proc_status differs on the same text";
      }
      if (s.ns_pids.size() > text.size()) { return "more NSpid entries than the text holds"; }
    } else if (name == "cgroup") {
      const std::string cgroup = gpuguard::cli::parse_cgroup_v2(text);
      if (cgroup.find('\n') != std::string::npos) { return "a cgroup path across lines"; }
      if (!cgroup.empty() && text.find("0::" + cgroup) == std::string::npos) { return "a cgroup path the text does not hold"; }
    } else if (name == "maps") {
      for (const std::string_view path : gpuguard::cli::mapped_paths_under(text, prefix)) {
        if (!gpuguard::cli::under_prefix(path, prefix) || path.find('\n') != std::string_view::npos) {
          return "a mapped path not under the prefix, or across lines";
        }
      }
    }
  }
  return "";
}

// Stat and status lines written from random fields read back exactly.
std::string check_round_trip(gpuguard_fuzz::random_source& random) {
  proc_stat s;
  s.pid = static_cast<int>(random.below(4194305));
  for (std::size_t n = random.below(20); n-- > 0;) { s.comm += static_cast<char>(random.below(256)); }
  s.state = "RSDZTtXIPKW"[random.below(11)];
  s.ppid = static_cast<int>(random.below(4194305));
  s.pgid = static_cast<int>(random.below(4194305));
  s.sid = static_cast<int>(random.below(4194305));
  s.flags = random.below(1u << 30);
  s.num_threads = static_cast<std::int64_t>(random.below(100000));
  s.start_time = static_cast<std::uint64_t>(random.below(1u << 31)) * 1000003ULL;
  std::string line = std::to_string(s.pid) + " (" + s.comm + ") " + s.state + " " + std::to_string(s.ppid) + " " +
                     std::to_string(s.pgid) + " " + std::to_string(s.sid) + " 34816 " + std::to_string(s.pid) + " " +
                     std::to_string(s.flags) + " 1 2 3 4 5 6 7 8 20 0 " + std::to_string(s.num_threads) + " 0 " +
                     std::to_string(s.start_time) + " 1000 200 18446744073709551615 1 2 3 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
  const std::optional<proc_stat> parsed = gpuguard::cli::parse_proc_stat(line);
  if (!parsed || parsed->pid != s.pid || parsed->comm != s.comm || parsed->state != s.state || parsed->ppid != s.ppid ||
      parsed->pgid != s.pgid || parsed->sid != s.sid || parsed->flags != s.flags ||
      parsed->num_threads != s.num_threads || parsed->start_time != s.start_time) {
    return "a stat line written from fields does not read back: " + gpuguard_fuzz::escaped(line);
  }
  const std::uint32_t uid = static_cast<std::uint32_t>(random.below(1u << 31));
  const std::uint64_t mask = random.below(1u << 31) | (random.one_in(2) ? 1U : 0U);
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(mask));
  const std::string status = "Name:\tx\nUid:\t" + std::to_string(uid) + "\t1\t1\t1\nSigIgn:\t" + hex + "\nNSpid:\t" +
                             std::to_string(s.pid) + "\t" + std::to_string(s.ppid) + "\n";
  const gpuguard::cli::proc_status st = gpuguard::cli::parse_proc_status(status);
  if (st.uid != uid || st.sighup_ignored != ((mask & 1U) != 0) || st.ns_pids != std::vector<int>{s.pid, s.ppid}) {
    return "a status text written from fields does not read back: " + gpuguard_fuzz::escaped(status);
  }
  return "";
}

std::string check_table(const gpuguard::cli::process_table& table) {
  for (const auto& [pid, stat] : table) {
    for (const char state : {stat.state, 'R', 'Z', 'D', 'T'}) {
      const gpuguard::cli::classification c = gpuguard::cli::classify(&stat, state, table);
      const gpuguard::cli::classification again = gpuguard::cli::classify(&stat, state, table);
      if (c.cls != again.cls || c.why != again.why || c.orphaned != again.orphaned) { return "classify differs on the same table"; }
      if (c.why.empty() || c.hint.empty()) { return "a class without a reason or a hint"; }
      if (c.orphaned != (c.cls == gpuguard::cli::holder_class::orphaned)) { return "the orphan flag disagrees with the class"; }
      if ((state == 'Z' || state == 'X') && c.cls != gpuguard::cli::holder_class::zombie) { return "a zombie not classed zombie"; }
      if (c.orphaned && (stat.pid == 1 || stat.pgid == stat.pid || stat.sid == stat.pid)) {
        return "PID 1 or a group or session leader called orphaned";
      }
    }
  }
  if (gpuguard::cli::classify(nullptr, 'R', table).cls != gpuguard::cli::holder_class::not_visible) {
    return "a process without a /proc entry not classed not_visible";
  }
  // descendants_of on the table as /proc gives it (each stat line's PID is its directory's; parent
  // links may still form loops in a racy read): each process once, never the root.
  gpuguard::cli::process_table real;
  for (const auto& [pid, stat] : table) {
    if (stat.pid == pid) { real.emplace(pid, stat); }
  }
  for (const auto& entry : real) {
    const int root = entry.first;
    const std::vector<proc_stat> found = gpuguard::detail::descendants_of(root, real);
    std::set<int> seen;
    for (const proc_stat& s : found) {
      if (!seen.insert(s.pid).second) { return "descendants_of lists a process twice"; }
      if (s.pid == root) { return "descendants_of lists its root"; }
    }
  }
  return "";
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

// The whole reader on a fake proc root written from the input.
std::string check_fake_root(const std::map<int, fake_process>& processes) {
  // One temporary directory for the run, removed at exit.
  static const struct temporary {
    std::string path;
    temporary() {  // in memory where there is a tmpfs: thousands of small files are written
      for (const char* where : {"/dev/shm", "/tmp"}) {
        std::string dir = std::string(where) + "/gpuguard-proc-fuzz-XXXXXX";
        if (::mkdtemp(dir.data()) != nullptr) {
          path = dir;
          return;
        }
      }
    }
    temporary(const temporary&) = delete;
    temporary& operator=(const temporary&) = delete;
    temporary(temporary&&) = delete;
    temporary& operator=(temporary&&) = delete;
    ~temporary() {
      std::error_code ignored;
      if (!path.empty()) { std::filesystem::remove_all(path, ignored); }
    }
  } temp;
  const std::string& base = temp.path;
  if (base.empty()) { return "cannot make a temporary directory"; }
  static unsigned long long round = 0;
  const std::string root = base + "/r" + std::to_string(++round);
  const std::string prefix = base + "/dev/nvidia";
  ::mkdir(root.c_str(), 0755);
  ::mkdir((base + "/dev").c_str(), 0755);
  std::map<int, std::map<std::string, int>> expected_fds;
  std::map<int, std::string> maps_written;
  for (const auto& [pid, p] : processes) {
    const std::string dir = root + "/" + std::to_string(pid);
    ::mkdir(dir.c_str(), 0755);
    ::mkdir((dir + "/fd").c_str(), 0755);
    for (const auto& [name, text] : p.files) {
      // The maps name the real device files; the fake ones live under the temporary prefix.
      std::string written = text;
      for (std::size_t at = 0; name == "maps" && (at = written.find("/dev/nvidia", at)) != std::string::npos;
           at += prefix.size()) {
        written.replace(at, 11, prefix);
      }
      if (name == "maps") { maps_written[pid] = written; }
      std::string path = dir;
      path.append("/").append(name);
      write_file(path, written);
    }
    for (std::size_t i = 0; i < p.fds.size(); ++i) {
      const std::string target = prefix + p.fds[i];
      if (::symlink(target.c_str(), (dir + "/fd/" + std::to_string(i + 3)).c_str()) == 0) { ++expected_fds[pid][target]; }
    }
    const int linked = ::symlink("/", (dir + "/cwd").c_str());  // a cwd that fails to appear is not checked
    static_cast<void>(linked);
  }
  const gpuguard::cli::scan_result scan = gpuguard::cli::scan_processes(root, prefix, -1);
  std::string broken;
  std::set<int> parsed;
  for (const auto& [pid, p] : processes) {
    const auto stat = p.files.find("stat");
    if (stat != p.files.end() && gpuguard::cli::parse_proc_stat(stat->second.substr(0, 4096))) { parsed.insert(pid); }
  }
  std::set<int> in_table;
  for (const auto& entry : scan.table) { in_table.insert(entry.first); }
  if (!scan.proc_readable) { broken = "the fake proc root could not be listed"; }
  else if (in_table != parsed) { broken = "the process table is not the processes whose stat parses"; }
  int last = -1;
  for (const gpuguard::cli::process_info& h : scan.holders) {
    if (!broken.empty()) { break; }
    if (h.pid <= last) { broken = "holders not sorted by PID, or listed twice"; break; }
    last = h.pid;
    if (!h.exists || h.devices.empty()) { broken = "a holder that holds nothing"; break; }
    for (const gpuguard::cli::device_use& use : h.devices) {
      if (!gpuguard::cli::under_prefix(use.path, prefix)) { broken = "a held file not under the prefix"; break; }
      const bool main_thread = !h.main_thread_exited;
      if (main_thread && use.fds != expected_fds[h.pid][use.path]) { broken = "descriptor counts differ from the fake fd directory"; break; }
      int mapped = 0;
      for (const std::string_view path : gpuguard::cli::mapped_paths_under(maps_written[h.pid], prefix)) {
        mapped += path == use.path ? 1 : 0;
      }
      if (main_thread && use.mappings != mapped) { broken = "mapping counts differ from the fake maps"; break; }
    }
    if (!broken.empty()) { break; }
    gpuguard::cli::process_facts facts;
    facts.command = h.command;
    facts.sighup_ignored = h.sighup_ignored;
    facts.cwd = h.cwd;
    facts.cgroup = h.cgroup;
    const gpuguard::cli::classification c = gpuguard::cli::classify(&h.stat, h.effective_state, scan.table, &facts);
    if (c.why.empty() || c.hint.empty() || c.orphaned != (c.cls == gpuguard::cli::holder_class::orphaned)) {
      broken = "a holder's classification is incomplete or inconsistent";
    }
  }
  if (broken.empty()) {
    for (const auto& entry : expected_fds) {
      const int pid = entry.first;
      const bool held = std::any_of(scan.holders.begin(), scan.holders.end(), [pid](const auto& h) { return h.pid == pid; });
      if (!held && in_table.count(pid) != 0 && !entry.second.empty()) {
        const char state = scan.table.at(pid).state;
        if (state != 'Z' || scan.table.at(pid).num_threads <= 1) { broken = "a process holding a device file is not a holder"; }
      }
    }
  }
  std::error_code error;
  std::filesystem::remove_all(root, error);
  if (error) { return "cannot remove " + root + ": " + error.message(); }
  return broken;
}

gpuguard_fuzz::random_source round_trips(7);

std::string check(const std::string& text) {
  try {
    const std::map<int, fake_process> processes = parse_input(text);
    gpuguard::cli::process_table table;
    for (const auto& [pid, p] : processes) {
      std::string broken = check_texts(p, "/dev/nvidia");
      if (!broken.empty()) { return broken; }
      const auto stat = p.files.find("stat");
      if (stat == p.files.end()) { continue; }
      if (const std::optional<proc_stat> s = gpuguard::cli::parse_proc_stat(stat->second)) { table.emplace(pid, *s); }
    }
    std::string broken = check_round_trip(round_trips);
    if (broken.empty()) { broken = check_table(table); }
    if (broken.empty()) { broken = check_fake_root(processes); }
    return broken;
  } catch (const std::bad_alloc&) {
    return "";
  } catch (...) {
    return "a reader threw";
  }
}

std::string next_input(gpuguard_fuzz::random_source& random, const std::vector<std::string>& corpus) {
  std::string text = random.pick(corpus);
  const std::size_t steps = 1 + random.below(6);
  for (std::size_t i = 0; i < steps; ++i) {
    switch (random.below(5)) {
      case 0: {  // a process's links changed: parents, groups, sessions (cycles included)
        const std::size_t at = text.find(") ", random.below(text.size() + 1));
        if (at == std::string::npos) { break; }
        const std::size_t from = at + 4;  // past ") S "
        const std::size_t end = text.find(' ', from);
        if (from < text.size() && end != std::string::npos) {
          text.replace(from, end - from, std::to_string(random.below(8) == 0 ? 0 : 1 + random.below(120)));
        }
        break;
      }
      case 1: {  // a process from another table
        const std::string& other = random.pick(corpus);
        const std::size_t from = other.find("== ", random.below(other.size() + 1));
        if (from != std::string::npos) { text += other.substr(from, 1 + random.below(600)); }
        break;
      }
      default: random.mutate_bytes(text, dictionary); break;
    }
  }
  if (text.size() > 32768) { text.resize(32768); }
  return text;
}

}  // namespace

int main(int argc, char** argv) { return gpuguard_fuzz::run("proc_fuzz", argc, argv, check, next_input); }
