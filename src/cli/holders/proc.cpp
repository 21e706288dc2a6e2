// /proc readers for `gpuguard run` and `gpuguard doctor`, and the doctor's holder classification
// (see proc.hpp). Plain POSIX reads (no iostreams): /proc files report size 0, and the supervisor
// rescans the process table every few milliseconds during a grace period.
#include "holders/proc.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <iterator>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace gpuguard::cli {

std::string printable_on_one_line(std::string_view text) {
  std::string line(text);
  std::replace_if(line.begin(), line.end(), [](char c) { return (c >= 0 && c < ' ') || c == '\x7f'; }, ' ');
  return line;
}

using detail::numeric_entries;
using detail::max_cmdline_bytes;
using detail::parse_number;
using detail::read_small_file;
using detail::split_fields;

namespace {

// Large enough for the maps of a process with every CUDA library loaded; a bigger file is cut.
constexpr std::size_t max_maps_bytes = std::size_t{64} << 20;

std::optional<std::string> read_link(const std::string& path) {
  std::string target(4096, '\0');
  const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
  if (n < 0) { return std::nullopt; }
  target.resize(static_cast<std::size_t>(n));
  return target;
}

device_use& use_of(std::vector<device_use>& uses, std::string_view path) {
  for (device_use& u : uses) {
    if (u.path == path) { return u; }
  }
  uses.push_back(device_use{std::string(path), 0, 0});
  return uses.back();
}

bool is_dead_state(char state) noexcept { return state == 'Z' || state == 'X' || state == 'x'; }

// Whether `ancestor` is on the parent chain that starts at `pid` (bounded: /proc is read racily).
bool is_ancestor(const process_table& table, int ancestor, int pid) {
  for (int steps = 0; pid > 0 && steps < 4096; ++steps) {
    if (pid == ancestor) { return true; }
    const auto it = table.find(pid);
    if (it == table.end() || it->second.ppid == pid) { return false; }
    pid = it->second.ppid;
  }
  return false;
}

std::string describe(const process_table& table, int pid) {
  const auto it = table.find(pid);
  if (pid == 1) { return "PID 1" + (it != table.end() ? " (" + it->second.comm + ", init)" : std::string(" (init)")); }
  if (pid == 0) { return "a process outside this PID namespace"; }
  return "PID " + std::to_string(pid) + (it != table.end() ? " (" + it->second.comm + ")" : std::string());
}

}  // namespace

const char* state_name(char state) noexcept {
  switch (state) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "disk sleep";
    case 'T': return "stopped";
    case 't': return "tracing stop";
    case 'Z': return "zombie";
    case 'X':
    case 'x': return "dead";
    case 'I': return "idle";
    case 'P': return "parked";
    case 'K': return "wakekill";
    case 'W': return "waking";
    default: return "unknown";
  }
}

bool under_prefix(std::string_view target, std::string_view prefix) noexcept {
  return !prefix.empty() && target.size() >= prefix.size() && target.compare(0, prefix.size(), prefix) == 0;
}

std::vector<std::string_view> mapped_paths_under(std::string_view maps, std::string_view prefix) {
  std::vector<std::string_view> paths;
  while (!maps.empty()) {
    const std::size_t newline = maps.find('\n');
    const std::string_view line = maps.substr(0, newline);
    maps = newline == std::string_view::npos ? std::string_view() : maps.substr(newline + 1);
    // address perms offset dev inode [path]: the path starts after the fifth field.
    std::size_t i = 0;
    for (int field = 0; field < 5 && i < line.size(); ++field) {
      while (i < line.size() && line[i] == ' ') { ++i; }
      while (i < line.size() && line[i] != ' ') { ++i; }
    }
    while (i < line.size() && line[i] == ' ') { ++i; }
    const std::string_view path = line.substr(std::min(i, line.size()));
    if (!path.empty() && under_prefix(path, prefix)) { paths.push_back(path); }
  }
  return paths;
}

device_scan scan_device_files(const std::string& dir, std::string_view prefix) {
  device_scan scan;
  const std::string fd_dir = dir + "/fd";
  if (const std::optional<std::vector<int>> fds = numeric_entries(fd_dir)) {
    scan.fds_readable = true;
    for (const int fd : *fds) {
      const std::optional<std::string> target = read_link(fd_dir + "/" + std::to_string(fd));
      if (target && under_prefix(*target, prefix)) { ++use_of(scan.uses, *target).fds; }
    }
  } else {
    scan.error = errno;
  }
  if (const std::optional<std::string> text = read_small_file(dir + "/maps", max_maps_bytes)) {
    for (const std::string_view path : mapped_paths_under(*text, prefix)) { ++use_of(scan.uses, path).mappings; }
  }
  std::sort(scan.uses.begin(), scan.uses.end(),
            [](const device_use& a, const device_use& b) { return a.path < b.path; });
  return scan;
}

process_info read_process(const std::string& proc_root, int pid, const std::string& prefix) {
  process_info info;
  info.pid = pid;
  const std::string dir = proc_root + "/" + std::to_string(pid);
  std::optional<proc_stat> stat = read_stat(proc_root, pid);
  if (!stat) { return info; }
  info.exists = true;
  info.stat = std::move(*stat);
  info.effective_state = info.stat.state;

  // A thread group whose main thread exited (pthread_exit in main) shows the main thread's Z state,
  // and its fd directory is empty, while the other threads run and hold the device: look at them.
  std::string task_dir = dir;
  if (info.stat.state == 'Z' && info.stat.num_threads > 1) {
    if (const std::optional<std::vector<int>> tids = numeric_entries(dir + "/task")) {
      for (const int tid : *tids) {
        if (tid == pid) { continue; }
        const std::string task = dir + "/task/" + std::to_string(tid);
        const std::optional<std::string> text = read_small_file(task + "/stat", 4096);
        const std::optional<proc_stat> ts = text ? parse_proc_stat(*text) : std::nullopt;
        if (ts && !is_dead_state(ts->state)) {
          info.main_thread_exited = true;
          info.effective_state = ts->state;
          info.stat.flags = ts->flags;  // the leader's say PF_EXITING; the process is not exiting
          task_dir = task;
          break;
        }
      }
    }
  }

  if (const std::optional<std::string> cmdline = read_small_file(task_dir + "/cmdline", max_cmdline_bytes)) {
    std::string command = *cmdline;
    std::replace(command.begin(), command.end(), '\0', ' ');
    while (!command.empty() && command.back() == ' ') { command.pop_back(); }
    info.command = std::move(command);
  }
  if (info.command.empty()) { info.command = "[" + info.stat.comm + "]"; }

  if (const std::optional<std::string> status = read_small_file(dir + "/status", 65536)) {
    proc_status parsed = parse_proc_status(*status);
    info.uid = parsed.uid;
    info.sighup_ignored = parsed.sighup_ignored;
    info.ns_pids = std::move(parsed.ns_pids);
  }
  if (info.ns_pids.empty()) { info.ns_pids.push_back(pid); }

  info.cwd = read_link(dir + "/cwd").value_or(std::string());
  info.cgroup = read_cgroup(proc_root, pid);

  device_scan scan = scan_device_files(task_dir, prefix);
  info.fds_readable = scan.fds_readable;
  info.fds_error = scan.fds_readable ? 0 : scan.error;
  if (info.fds_readable) { info.devices = std::move(scan.uses); }
  return info;
}

proc_status parse_proc_status(std::string_view text) {
  proc_status out;
  while (!text.empty()) {
    const std::size_t newline = text.find('\n');
    const std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) { continue; }
    const std::string_view key = line.substr(0, colon);
    const std::vector<std::string_view> values = split_fields(line.substr(colon + 1));
    if (key == "Uid" && !values.empty()) {
      std::uint32_t uid = 0;
      if (parse_number(values[0], uid)) { out.uid = uid; }
    } else if (key == "SigIgn" && values.size() == 1) {
      // A hexadecimal mask: bit N-1 is signal N; SIGHUP is 1.
      std::uint64_t mask = 0;
      const auto [end, ec] = std::from_chars(values[0].data(), values[0].data() + values[0].size(), mask, 16);
      if (ec == std::errc() && end == values[0].data() + values[0].size()) { out.sighup_ignored = (mask & 1U) != 0; }
    } else if (key == "NSpid") {
      for (const std::string_view v : values) {
        int n = 0;
        if (parse_number(v, n)) { out.ns_pids.push_back(n); }
      }
    }
  }
  return out;
}

std::string parse_cgroup_v2(std::string_view text) {
  while (!text.empty()) {
    const std::size_t newline = text.find('\n');
    const std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    // cgroup v2's line is "0::PATH" (on a hybrid mount, beside the v1 hierarchies' lines).
    if (line.size() > 3 && line.substr(0, 3) == "0::") { return std::string(line.substr(3)); }
  }
  return {};
}

std::string read_cgroup(const std::string& proc_root, int pid) {
  const std::optional<std::string> text = read_small_file(proc_root + "/" + std::to_string(pid) + "/cgroup", 65536);
  return text ? parse_cgroup_v2(*text) : std::string();
}

bool is_multiprocessing_child(std::string_view command) noexcept {
  constexpr std::string_view markers[] = {"spawn_main", "--multiprocessing-fork", "multiprocessing.forkserver",
                                          "multiprocessing.resource_tracker", "multiprocessing.spawn"};
  return std::any_of(std::begin(markers), std::end(markers),
                     [command](std::string_view m) { return command.find(m) != std::string_view::npos; });
}

scan_result scan_processes(const std::string& proc_root, const std::string& prefix, int self) {
  scan_result result;
  const std::optional<std::vector<int>> pids = numeric_entries(proc_root);
  if (!pids) {
    result.proc_readable = false;
    result.proc_error = "cannot list " + proc_root + ": " + std::strerror(errno);
    return result;
  }
  for (const int pid : *pids) {
    if (std::optional<proc_stat> s = read_stat(proc_root, pid)) { result.table.emplace(pid, std::move(*s)); }
  }
  for (const auto& [pid, stat] : result.table) {
    if (pid == self) { continue; }
    process_info info = read_process(proc_root, pid, prefix);
    if (!info.exists) { continue; }  // gone since the table was read
    if (!info.fds_readable) {
      // A zombie has no fd table to read; that is not a permission problem.
      if (!is_dead_state(info.effective_state)) { ++result.unreadable; }
      continue;
    }
    if (!info.devices.empty()) { result.holders.push_back(std::move(info)); }
  }
  return result;
}

const char* class_name(holder_class c) noexcept {
  switch (c) {
    case holder_class::running: return "running";
    case holder_class::stopped: return "stopped";
    case holder_class::zombie: return "zombie";
    case holder_class::uninterruptible: return "uninterruptible";
    case holder_class::orphaned: return "orphaned";
    case holder_class::not_visible: return "not_visible";
  }
  return "running";
}

classification classify(const proc_stat* p, char state, const process_table& table, const process_facts* facts) {
  classification c;
  if (p == nullptr) {
    c.cls = holder_class::not_visible;
    c.why = "no process with this PID in this PID namespace: NVML reports host PIDs, so it runs in another "
            "container or on the host (or it has just exited)";
    c.hint = "look from the host or from the container it runs in (nvidia-smi, gpuguard doctor there); "
             "nothing here can signal it";
    return c;
  }
  const std::string parent = describe(table, p->ppid);
  if (is_dead_state(state)) {
    c.cls = holder_class::zombie;
    c.why = "it has exited and holds no files, but its parent, " + parent +
            ", has not collected its exit status; GPU memory NVML still lists for it is the driver finishing the "
            "teardown of its context";
    c.hint = "no signal can end a zombie: it goes when its parent waits for it or exits; if NVML keeps listing "
             "memory for it, the driver is stuck (check dmesg for Xid errors)";
    return c;
  }
  const bool exiting = (p->flags & pf_exiting) != 0;

  // The orphan rule (see the header and docs/doctor.md): each test below names the evidence, and
  // the first that keeps the process from being called orphaned is what its "why" says.
  const bool leads_group = p->pgid == p->pid;
  const bool leads_session = p->sid == p->pid;
  const auto leader = table.find(p->pgid);
  const bool leader_alive = leader != table.end() && leader->second.pgid == p->pgid && leader->second.alive();
  const auto parent_it = table.find(p->ppid);
  const bool parent_in_group = parent_it != table.end() && parent_it->second.pgid == p->pgid;
  // A job-control shell starts each member of a pipeline itself, in the job's group but outside
  // it: a live parent that leads the process's own session is its starter, not an adopter.
  const bool parent_is_session_shell = p->ppid > 1 && parent_it != table.end() && !parent_in_group &&
                                       parent_it->second.pid == p->sid && parent_it->second.sid == p->sid &&
                                       parent_it->second.alive();
  int live_child = 0;
  for (const auto& [pid, e] : table) {
    if (e.ppid == p->pid && pid != p->pid && e.alive()) {
      live_child = pid;
      break;
    }
  }
  const bool leader_is_ancestor = leader_alive && is_ancestor(table, p->pgid, p->ppid);
  const bool cgroup_differs = facts != nullptr && leader_alive && !facts->cgroup.empty() &&
                              !facts->leader_cgroup.empty() && facts->cgroup != facts->leader_cgroup;
  const bool worker_hint = facts != nullptr && is_multiprocessing_child(facts->command);
  const bool nohup = facts != nullptr && facts->sighup_ignored.value_or(false);
  // A double-forked daemon: the session its first fork created has lost its leader, and it lives
  // there alone (its own children are counted above), in "/" where daemon(3) leaves it.
  const auto session_leader = table.find(p->sid);
  const bool session_leader_alive = session_leader != table.end() && session_leader->second.sid == p->sid &&
                                    session_leader->second.alive();
  bool alone_in_session = true;
  for (const auto& [pid, e] : table) {
    if (pid != p->pid && e.sid == p->sid && e.alive()) {
      alone_in_session = false;
      break;
    }
  }
  const bool daemon_shape = facts != nullptr && !session_leader_alive && alone_in_session && facts->cwd == "/";

  const bool candidate = p->pid != 1 && !exiting && !leads_group && !leads_session && !parent_in_group &&
                         !parent_is_session_shell && live_child == 0 && !leader_is_ancestor && !cgroup_differs;
  const bool orphan = candidate && (worker_hint || (!nohup && !daemon_shape));

  const std::string group = "process group " + std::to_string(p->pgid);
  const std::string leader_text = leader_alive ? describe(table, p->pgid) : std::string();
  std::string lineage;
  if (orphan) {
    lineage = "its parent is " + parent + (p->ppid == 1 || p->ppid == 0 ? "" : ", which adopted it (a subreaper or an ancestor)") +
              ", outside its " + group +
              (leader_alive ? ", whose live leader, " + leader_text +
                                  ", is not its ancestor (the launcher outlived the job)"
                            : ", and that group has no live leader") +
              "; it has no children of its own" +
              (facts != nullptr && !facts->cgroup.empty() ? "; cgroup " + facts->cgroup : std::string()) +
              (worker_hint ? "; its command line is a Python multiprocessing child's" : "") +
              (nohup ? " (it ignores SIGHUP, inherited from a nohup'd parent)" : "") +
              ": the job that started it is gone";
  } else if (p->pid == 1) {
    lineage = "it is PID 1 (init) of this PID namespace";
  } else if (leads_group || leads_session) {
    lineage = std::string("it leads its own process ") + (leads_session ? "session" : "group") +
              " (a service or a job's main process), with parent " + parent;
  } else if (parent_in_group) {
    lineage = "its parent, " + parent + ", is alive in its " + group;
  } else if (parent_is_session_shell) {
    lineage = "its parent, " + parent + ", leads its session and started it (a job-control shell running a pipeline)";
  } else if (live_child != 0) {
    lineage = "its parent is " + parent + ", but it has live children of its own (" + describe(table, live_child) +
              "): a job's main process, not a leftover worker";
  } else if (leader_is_ancestor) {
    lineage = "its parent is " + parent + ", but its " + group + " is led by its live ancestor " + leader_text +
              ", so it is not called orphaned";
  } else if (cgroup_differs) {
    lineage = "its parent is " + parent + ", but its " + group + "'s live leader, " + leader_text +
              ", is in another cgroup (" + facts->leader_cgroup + ", it is in " + facts->cgroup +
              "): something moved it, so it is not called orphaned";
  } else if (nohup) {
    lineage = "its parent is " + parent + ", but it ignores SIGHUP (nohup): detached on purpose, its job may be alive, "
              "so it is not called orphaned";
  } else if (daemon_shape) {
    lineage = "its parent is " + parent + ", but it is alone in a session whose leader is gone, in \"/\": a "
              "double-forked daemon, so it is not called orphaned";
  } else {  // exiting: the branches below say so
    lineage = "its parent is " + parent + ", outside its " + group;
  }

  c.orphaned = orphan;
  if (orphan) {
    c.cls = holder_class::orphaned;
    c.why = lineage;
    c.hint = "gpuguard doctor --reap ends it (SIGTERM, then SIGKILL after the grace period)";
    if (state == 'D') { c.why += "; it is in an uninterruptible kernel call (D state) right now"; }
    if (state == 'T' || state == 't') { c.why += "; it is stopped"; }
  } else if (state == 'D') {
    c.cls = holder_class::uninterruptible;
    if (exiting) {
      c.why = "it is exiting and blocked in the kernel (D state), most likely in the driver releasing its GPU "
              "memory; " + lineage;
      c.hint = "wait: signals cannot hurry it; if it stays across --watch samples, the driver is stuck (check "
               "dmesg for Xid errors)";
    } else {
      c.why = "it is blocked in an uninterruptible kernel call (D state); " + lineage;
      c.hint = "usually brief; if it stays across --watch samples, check dmesg for Xid errors";
    }
  } else if (state == 'T' || state == 't') {
    c.cls = holder_class::stopped;
    c.why = std::string("it is ") + (state == 't' ? "stopped by a debugger or tracer" : "stopped (SIGSTOP or SIGTSTP)") +
            " and keeps its GPU memory while stopped; " + lineage;
    c.hint = "resume it (kill -CONT " + std::to_string(p->pid) + ") or end it; --reap --pid " +
             std::to_string(p->pid) + " ends it";
  } else if (p->pid == 1) {
    c.cls = holder_class::running;
    c.why = lineage;
    c.hint = "it is init: ending it ends this PID namespace (the container); end the processes under it instead";
  } else {
    c.cls = holder_class::running;
    c.why = std::string(exiting ? "it is exiting; " : "it is alive; ") + lineage;
    c.hint = "a live process using the GPU: end it the usual way if it should not run (--reap --pid " +
             std::to_string(p->pid) + " does)";
  }
  return c;
}

// ---- `gpuguard run` ----

std::vector<std::string> held_paths(const process_info& info, std::string_view prefix) {
  std::vector<std::string> paths;
  constexpr std::string_view deleted = " (deleted)";
  for (const device_use& use : info.devices) {
    if (use.fds > 0) { paths.push_back(use.path); }
    if (use.mappings == 0 || use.path.empty() || use.path.front() != '/') { continue; }
    // A mapping of a file removed since keeps it; the file is named without the kernel's suffix.
    std::string_view path = use.path;
    if (path.size() > deleted.size() && path.substr(path.size() - deleted.size()) == deleted) {
      path.remove_suffix(deleted.size());
    }
    if (under_prefix(path, prefix)) { paths.emplace_back(path); }
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

}  // namespace gpuguard::cli
