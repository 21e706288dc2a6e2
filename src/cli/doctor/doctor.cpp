// `gpuguard doctor`: who holds GPU memory, and why. Scans /proc for processes with a device file
// (under /dev/nvidia by default) open or mapped, asks NVML (loaded with dlopen) what each process
// uses, classifies every holder (running, stopped, zombie, uninterruptible, orphaned, not visible
// in this PID namespace), shows the residue no visible process accounts for, optionally watches it
// over time, and with --reap ends orphaned holders through pidfds. See docs/doctor.md.
#include "command_line.hpp"
#include "docs_path.hpp"
#include "commands.hpp"
#include "doctor/doctor_reap.hpp"
#include "doctor/doctor_report.hpp"
#include "holders/nvml.hpp"
#include "holders/proc.hpp"
#include "process/end.hpp"
#include "util/file.hpp"
#include "util/format.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

namespace gpuguard::cli {

namespace {

using namespace doctor;

constexpr command_help help_text{
    "usage: gpuguard doctor [--json] [--watch SECONDS [--count N]] [--reap [--grace SECONDS]]\n"
    "                       [--pid PID[:START_TIME]]... [--device-prefix PATH] [--no-nvml]\n"
    "                       [--prometheus FILE]",
    // what it does
    "Finds the processes that hold GPU memory, and says why they still do. Memory that 'stays after\n"
    "the job died' is held by a process that is still alive: a worker reparented to PID 1, a stopped\n"
    "job, a process stuck in the driver, or one in another PID namespace.\n"
    "\n"
    "It lists every process with a device file (PREFIX*, default /dev/nvidia*) open or mapped, and\n"
    "the processes NVML (libnvidia-ml.so.1, loaded at run time) lists with the memory each uses.\n"
    "Each is classified:\n"
    "  running          alive, with a live parent or leading its own group (a service, a job)\n"
    "  stopped          stopped by SIGSTOP/SIGTSTP or a tracer: keeps its memory\n"
    "  zombie           exited, not yet collected by its parent (seen through NVML or --pid)\n"
    "  uninterruptible  in D state: blocked in the kernel, often in the driver (exit stuck there)\n"
    "  orphaned         alive, reparented (to PID 1 or a subreaper), leads no group or session,\n"
    "                   has no children, its group's live leader (if any) is not its ancestor,\n"
    "                   and not detached on purpose (nohup, a daemon): its job is gone\n"
    "  not_visible      NVML lists the PID but it has no process here: a host PID seen from a\n"
    "                   container (or a PID that here names a process holding no device file)\n"
    "Per device it shows used memory, what processes account for, and the residue: used memory no\n"
    "process visible here accounts for.",
    // after the options
    "--reap ends the holders classified orphaned (or, with --pid, the named ones that hold a\n"
    "device): SIGTERM (and SIGCONT if stopped), then SIGKILL after the grace period. Signals go\n"
    "through pidfds after the start time is checked again, so a reused PID is never hit. It never\n"
    "resets a GPU. With --watch, it reaps after the first sample only.\n"
    "--pid PID[:START_TIME] reports only these processes, whether or not they hold a device; with\n"
    "--reap, ends them whatever their class. START_TIME (field 22 of /proc/PID/stat, 'start_time' in\n"
    "the JSON) pins the identity: a PID now naming another process is not signalled.\n"
    "--prometheus writes through a temporary file in FILE's directory and a rename (node_exporter's\n"
    "textfile collector: FILE ends in .prom).\n"
    "\n"
    "environment:\n"
    "  GPUGUARD_DEVICE_PREFIX  default for --device-prefix\n"
    "  GPUGUARD_NVML_LIBRARY   the NVML library to load (default libnvidia-ml.so.1)\n"
    "\n"
    "Without NVML (no driver, no library) the report says 'NVML not available: per-process\n"
    "memory unknown' and still lists the device-file holders; that is not an error.\n"
    "\n"
    "exit status (of the last sample with --watch):\n"
    "  0  no process holds a GPU device (after --reap: every holder it targeted has ended)\n"
    "  1  at least one listed process holds a GPU device (device file or NVML memory)\n"
    "  2  usage error\n"
    "  3  the doctor could not do its job: /proc unreadable, or --reap could not end a target\n"
    "     (a signal failed, a process survived SIGKILL)\n",
    {"doctor", true, true},
    "doctor.md"};

struct named_pid {
  int pid = 0;
  std::optional<std::uint64_t> start_time;
};

struct options {
  bool json = false;
  std::optional<double> watch_s;
  std::optional<int> count;
  bool reap = false;
  double grace_s = 5.0;
  std::vector<named_pid> pids;
  std::string prefix;
  bool no_nvml = false;
  std::string prometheus;  ///< --prometheus FILE; "" when not asked
};

bool parse_seconds(const std::string& text, double& out, double min, double max) {
  if (text.empty() || text.size() > 32) { return false; }
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(v) || v < min || v > max) { return false; }
  // Only plain decimals: no hex floats, "inf", leading spaces.
  for (const char c : text) {
    if ((c < '0' || c > '9') && c != '.') { return false; }
  }
  out = v;
  return true;
}

// Digits only (the process layer's number reader: no sign, no blanks, no overflow), at most `max`.
template <typename T>
bool parse_unsigned(const std::string& text, T& out, T max) {
  std::uint64_t v = 0;
  if (!gpuguard::detail::parse_number(text, v) || v > static_cast<std::uint64_t>(max)) { return false; }
  out = static_cast<T>(v);
  return true;
}

// Parses argv into `o`; returns -1 to go on, or the exit status to return now.
int parse_args(int argc, char** argv, options& o) {
  CLI::App app;
  describe_command(app, help_text);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  std::string watch;
  std::string count;
  std::string grace;
  std::vector<std::string> pids;
  std::string prefix;
  app.add_flag("--json", o.json, "one JSON document per sample, on one line (schema gpuguard.doctor, version 1: "
                                 "doctor.md)")->disable_flag_override();
  const CLI::Option* watch_given = app.add_option("--watch", watch, "sample again every SECONDS (decimals allowed) and say "
                                                  "whether the residue shrinks, grows or stays; until interrupted, or --count")
                                       ->type_name("SECONDS");
  const CLI::Option* count_given = app.add_option("--count", count, "with --watch: stop after N samples")->type_name("N");
  app.add_flag("--reap", o.reap, "end the holders classified orphaned (see below)")->disable_flag_override();
  const CLI::Option* grace_given = app.add_option("--grace", grace, "how long --reap waits after SIGTERM before SIGKILL "
                                                  "(default 5; decimals allowed; 0 to 86400)")->type_name("SECONDS");
  app.add_option("--pid", pids, "report only these processes (repeatable; see below)")
      ->type_name("PID[:START_TIME]")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  const CLI::Option* prefix_given = app.add_option("--device-prefix", prefix, "the device path prefix (default: "
                                                   "$GPUGUARD_DEVICE_PREFIX, else /dev/nvidia)")->type_name("PATH");
  app.add_flag("--no-nvml", o.no_nvml, "do not load NVML")->disable_flag_override();
  const CLI::Option* prometheus_given = app.add_option("--prometheus", o.prometheus, "also write each sample as Prometheus "
                                                       "gauges (gpuguard_doctor_*) to FILE")->type_name("FILE");
  if (const std::optional<int> rc = parse_command_line(app, help_text.words, argc, argv)) { return *rc; }

  if (watch_given->count() > 0) {
    double v = 0;
    if (!parse_seconds(watch, v, 0.01, 86400.0)) {
      return usage_error(help_text.words, "option '--watch' needs seconds between 0.01 and 86400, got '" + watch + "'");
    }
    o.watch_s = v;
  }
  if (count_given->count() > 0) {
    int v = 0;
    if (!parse_unsigned(count, v, 1000000000) || v < 1) {
      return usage_error(help_text.words, "option '--count' needs a whole number of samples >= 1, got '" + count + "'");
    }
    o.count = v;
  }
  const bool have_grace = grace_given->count() > 0;
  if (have_grace) {
    const std::optional<std::int64_t> ms = gpuguard::detail::parse_grace_ms(grace);
    if (!ms) {
      return usage_error(help_text.words, "option '--grace' needs seconds, e.g. 5 or 0.5, from 0 to 86400, got '" + grace + "'");
    }
    o.grace_s = static_cast<double>(*ms) / 1000.0;
  }
  for (const std::string& value : pids) {
    named_pid p;
    const std::size_t colon = value.find(':');
    const std::string pid_text = value.substr(0, colon);
    if (!parse_unsigned(pid_text, p.pid, 0x3fffffff) || p.pid < 1) {
      return usage_error(help_text.words, "option '--pid' needs a process ID >= 1 (optionally PID:START_TIME), got '" + value + "'");
    }
    if (colon != std::string::npos) {
      std::uint64_t start = 0;
      if (!parse_unsigned(value.substr(colon + 1), start, UINT64_MAX)) {
        return usage_error(help_text.words, "option '--pid': START_TIME in '" + value +
                           "' must be a whole number (field 22 of /proc/PID/stat)");
      }
      p.start_time = start;
    }
    const bool duplicate =
        std::any_of(o.pids.begin(), o.pids.end(), [&p](const named_pid& q) { return q.pid == p.pid; });
    if (duplicate) { return usage_error(help_text.words, "option '--pid': PID " + std::to_string(p.pid) + " named twice"); }
    o.pids.push_back(p);
  }
  if (prometheus_given->count() > 0 && (o.prometheus.empty() || o.prometheus.back() == '/')) {
    return usage_error(help_text.words, "option '--prometheus' needs a file name, got '" + o.prometheus + "'");
  }
  const bool have_prefix = prefix_given->count() > 0;
  if (have_prefix) {
    if (prefix.empty() || prefix[0] != '/') {
      return usage_error(help_text.words, "option '--device-prefix' needs an absolute path prefix, got '" + prefix + "'");
    }
    o.prefix = prefix;
  }
  if (o.count && !o.watch_s) { return usage_error(help_text.words, "option '--count' needs --watch"); }
  if (have_grace && !o.reap) { return usage_error(help_text.words, "option '--grace' needs --reap"); }
  if (!have_prefix) {
    const char* env = std::getenv("GPUGUARD_DEVICE_PREFIX");
    if (env != nullptr && *env != '\0') {
      if (env[0] != '/') {
        return usage_error(help_text.words, std::string("GPUGUARD_DEVICE_PREFIX must be an absolute path prefix, got '") + env + "'");
      }
      o.prefix = env;
    } else {
      o.prefix = "/dev/nvidia";
    }
  }
  return -1;
}

constexpr const char* proc_root = "/proc";

std::string now_iso8601() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  std::tm tm{};
  ::gmtime_r(&ts.tv_sec, &tm);
  char buffer[64];
  const std::size_t n = std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buffer + n, sizeof buffer - n, ".%03ldZ", ts.tv_nsec / 1000000);
  return buffer;
}

double uptime_s() {
  std::FILE* f = std::fopen("/proc/uptime", "r");
  if (f == nullptr) { return -1; }
  double up = -1;
  if (std::fscanf(f, "%lf", &up) != 1) { up = -1; }
  std::fclose(f);
  return up;
}

std::string pid_namespace() {
  char buffer[128];
  const ssize_t n = ::readlink("/proc/self/ns/pid", buffer, sizeof buffer - 1);
  if (n <= 0) { return ""; }
  return std::string(buffer, static_cast<std::size_t>(n));
}

// Whether this process may signal `p` (kill(2): root, or the same real or effective UID as the
// target's real UID). Unknown UIDs are not assumed to be signallable.
bool may_signal(const process_info& p) {
  if (::geteuid() == 0) { return true; }
  return p.uid && (*p.uid == ::getuid() || *p.uid == ::geteuid());
}

holder make_holder(process_info info) {
  holder h;
  h.info = std::move(info);
  return h;
}

// One sample: scan, NVML, merge, classify, summarise.
sample take_sample(const options& o, const util::nvml_library& nvml, const std::string& nvml_library) {
  sample s;
  s.time = now_iso8601();
  s.pid_namespace = pid_namespace();
  s.device_prefix = o.prefix;
  s.nvml_library = o.no_nvml ? "" : nvml_library;
  s.nvml_available = nvml.available();
  s.nvml_driver_version = nvml.driver_version();
  if (o.no_nvml) {
    s.nvml_note = "NVML not used (--no-nvml): per-process memory unknown";
  } else if (!nvml.available()) {
    s.nvml_note = "NVML not available: per-process memory unknown (" + nvml.error() + ")";
  }

  scan_result scan = scan_processes(proc_root, o.prefix, static_cast<int>(::getpid()));
  if (!scan.proc_readable) {
    s.scan_failed = true;
    s.notes.push_back(scan.proc_error);
  }
  s.unreadable_processes = scan.unreadable;

  std::map<int, holder> by_pid;
  for (process_info& info : scan.holders) {
    const int pid = info.pid;
    by_pid.emplace(pid, make_holder(std::move(info)));
  }

  std::vector<nvml_device> devices;
  if (nvml.available()) { devices = sample_devices(nvml, &s.nvml_error); }
  for (const nvml_device& d : devices) {
    for (const nvml_process& p : d.processes) {
      if (p.pid == 0) { continue; }  // not a process
      const int pid = static_cast<int>(std::min<unsigned>(p.pid, 0x7fffffffU));
      auto it = by_pid.find(pid);
      if (it == by_pid.end()) {
        process_info info = read_process(proc_root, pid, o.prefix);
        holder h = make_holder(std::move(info));
        // A live local process with readable fds and no device file is not the process NVML
        // means: NVML's PIDs are the host's.
        const char st = h.info.effective_state;
        h.pid_names_other = h.info.exists && h.info.fds_readable && h.info.devices.empty() && st != 'Z' && st != 'X';
        it = by_pid.emplace(pid, std::move(h)).first;
      }
      it->second.memory.push_back(gpu_memory_use{d.index, p.bytes});
    }
  }

  // Which of NVML's PIDs are processes of this namespace: decided before --pid cuts the list, so
  // that the residue does not depend on which processes were named.
  std::map<int, bool> visible;
  for (const auto& [pid, h] : by_pid) { visible[pid] = h.info.exists && !h.pid_names_other; }

  // With --pid, only the named processes are listed.
  if (!o.pids.empty()) {
    std::map<int, holder> named;
    for (const named_pid& n : o.pids) {
      auto it = by_pid.find(n.pid);
      holder h = it != by_pid.end() ? std::move(it->second) : make_holder(read_process(proc_root, n.pid, o.prefix));
      h.named = true;
      h.named_start_time = n.start_time;
      named.emplace(n.pid, std::move(h));
    }
    by_pid = std::move(named);
  }

  const double up = uptime_s();
  const long ticks = ::sysconf(_SC_CLK_TCK);
  for (auto& [pid, h] : by_pid) {
    const bool here = h.info.exists && !h.pid_names_other;
    h.holds = !h.info.devices.empty() || !h.memory.empty();
    process_facts facts;
    if (here) {
      facts.command = h.info.command;
      facts.sighup_ignored = h.info.sighup_ignored;
      facts.cwd = h.info.cwd;
      facts.cgroup = h.info.cgroup;
      if (h.info.stat.pgid != pid) { facts.leader_cgroup = read_cgroup(proc_root, h.info.stat.pgid); }
    }
    h.verdict = classify(here ? &h.info.stat : nullptr, h.info.effective_state, scan.table, here ? &facts : nullptr);
    if (here && h.info.uid && !may_signal(h.info)) {
      h.verdict.why += "; it belongs to UID " + std::to_string(*h.info.uid) + ", which this user may not signal";
    }
    if (h.pid_names_other) {
      h.verdict.why = "PID " + std::to_string(pid) + " here is " + h.info.stat.comm + ", which holds no file under " +
                      o.prefix + ": NVML's PID is from another PID namespace (the host's), so the process it means "
                      "is not visible here";
    } else if (!h.info.exists && h.named && h.memory.empty()) {
      h.verdict.why = "no process with this PID in this PID namespace, and NVML does not list it";
      h.verdict.hint = "nothing to do";
    } else if (!h.holds) {
      h.verdict.hint = "it holds no GPU device: nothing to do here";
    }
    if (here && h.info.main_thread_exited) {
      h.verdict.why += "; its main thread has exited while other threads run and hold the device";
    }
    if (here && h.named_start_time && *h.named_start_time != h.info.stat.start_time) {
      h.verdict.why = "PID " + std::to_string(pid) + " now names another process (start time " +
                      std::to_string(h.info.stat.start_time) + ", named " + std::to_string(*h.named_start_time) +
                      "): the named process is gone; " + h.verdict.why;
    }
    if (here && up >= 0 && ticks > 0) {
      h.age_s = std::max(0.0, up - static_cast<double>(h.info.stat.start_time) / static_cast<double>(ticks));
    }
  }

  for (auto& [pid, h] : by_pid) { s.holders.push_back(std::move(h)); }
  for (const holder& h : s.holders) {
    if (h.holds) { ++s.holder_count; }
    for (const device_use& d : h.info.devices) {
      auto f = std::find_if(s.device_files.begin(), s.device_files.end(),
                            [&d](const device_file_summary& x) { return x.path == d.path; });
      if (f == s.device_files.end()) {
        s.device_files.push_back(device_file_summary{d.path, 0});
        f = s.device_files.end() - 1;
      }
      ++f->holders;
    }
  }
  std::sort(s.device_files.begin(), s.device_files.end(),
            [](const device_file_summary& a, const device_file_summary& b) { return a.path < b.path; });

  // Devices and residue: NVML's process lists cover every namespace, so the visible part is what
  // processes that exist here account for.
  for (nvml_device& d : devices) {
    device_summary ds;
    for (const nvml_process& p : d.processes) {
      if (!p.bytes || p.pid == 0) { continue; }
      ds.process_bytes += *p.bytes;
      const auto v = visible.find(static_cast<int>(std::min<unsigned>(p.pid, 0x7fffffffU)));
      if (v != visible.end() && v->second) { ds.visible_process_bytes += *p.bytes; }
    }
    if (d.used) {
      ds.residue_bytes = *d.used > ds.visible_process_bytes ? *d.used - ds.visible_process_bytes : 0;
      s.residue_bytes = s.residue_bytes.value_or(0) + *ds.residue_bytes;
    }
    ds.nvml = std::move(d);
    s.devices.push_back(std::move(ds));
  }
  return s;
}

// --reap on a sample: chooses the targets, ends them, records what happened.
void reap_sample(sample& s, const options& o) {
  s.reap = reap_summary{o.grace_s, pidfd_unavailable_reason()};
  std::vector<std::size_t> chosen;
  for (std::size_t i = 0; i < s.holders.size(); ++i) {
    holder& h = s.holders[i];
    const bool target = h.named ? true : h.verdict.orphaned;
    if (!target) { continue; }
    if (!h.holds) {
      h.reap = reap_outcome{"skipped", {}, "holds no GPU device: left alone"};
    } else if (!h.info.exists || h.pid_names_other) {
      h.reap = reap_outcome{"skipped", {}, "not a process of this PID namespace: cannot be signalled from here"};
    } else if (h.verdict.cls == holder_class::zombie) {
      h.reap = reap_outcome{"skipped", {}, "a zombie cannot be signalled: its parent must collect it"};
    } else if (!may_signal(h.info)) {
      h.reap = reap_outcome{"skipped", {},
                            "another user's process" +
                                (h.info.uid ? " (UID " + std::to_string(*h.info.uid) + ")" : std::string()) +
                                ": this user has no permission to signal it, so it was not signalled (run as root "
                                "or as its owner)"};
    } else {
      chosen.push_back(i);
    }
  }
  if (chosen.empty()) { return; }
  std::vector<reap_target> targets;
  for (const std::size_t i : chosen) {
    const holder& h = s.holders[i];
    targets.push_back(reap_target{h.info.pid, h.named_start_time.value_or(h.info.stat.start_time)});
  }
  const std::vector<reap_outcome> outcomes = reap(targets, proc_root, o.grace_s, 5.0);
  for (std::size_t k = 0; k < chosen.size(); ++k) { s.holders[chosen[k]].reap = outcomes[k]; }
}

volatile std::sig_atomic_t interrupted = 0;

void on_interrupt(int /*sig*/) { interrupted = 1; }

// Sleeps `seconds`, or until SIGINT/SIGTERM.
void interruptible_sleep(double seconds) {
  const double step = 0.05;
  double left = seconds;
  while (left > 0 && interrupted == 0) {
    const double d = std::min(step, left);
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(d);
    ts.tv_nsec = static_cast<long>((d - static_cast<double>(ts.tv_sec)) * 1e9);
    ::nanosleep(&ts, nullptr);
    left -= d;
  }
}

double unix_time_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

bool emit(const std::string& text) {
  return std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0;
}

}  // namespace

int doctor_main(int argc, char** argv) {
  options o;
  if (const int rc = parse_args(argc, argv, o); rc >= 0) { return rc; }

  if (!o.prometheus.empty()) {
    if (const std::string why = gpuguard::detail::publish_problem(o.prometheus); !why.empty()) {
      std::fprintf(stderr, "gpuguard doctor: --prometheus: %s; nothing was sampled or signalled\n", why.c_str());
      return exit_error;
    }
  }

  const std::string library = util::nvml_library_name();
  util::nvml_library nvml;
  if (!o.no_nvml) { nvml = util::nvml_library::open(library.c_str()); }

  if (o.watch_s) {
    struct sigaction sa{};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
  }

  const auto start = std::chrono::steady_clock::now();
  std::optional<sample> first;
  std::optional<sample> previous;
  watch_summary w;
  int status = exit_no_holders;
  for (int n = 1;; ++n) {
    sample s = take_sample(o, nvml, library);
    if (o.reap && n == 1) { reap_sample(s, o); }
    if (o.watch_s) {
      w.interval_s = *o.watch_s;
      w.sample = n;
      w.count = o.count;
      w.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s.residue_bytes) {
        if (!w.residue_first_bytes) { w.residue_first_bytes = s.residue_bytes; }
        w.residue_last_bytes = s.residue_bytes;
        w.residue_min_bytes = std::min(w.residue_min_bytes.value_or(*s.residue_bytes), *s.residue_bytes);
        w.residue_max_bytes = std::max(w.residue_max_bytes.value_or(0), *s.residue_bytes);
      }
      if (n == 1) { w.holders_first = s.holder_count; }
      w.holders_last = s.holder_count;
      w.residue_trend = n >= 2 ? residue_trend(w.residue_first_bytes, w.residue_last_bytes) : "unknown";
      s.watch = w;
    }
    s.exit_status = exit_status_of(s);
    status = s.exit_status;
    std::string text;
    if (o.json) {
      text = render_json(s);
    } else if (n == 1) {
      text = render_text(s);
    } else {
      text = render_watch_line(s, *first, *previous);
    }
    if (!emit(text)) {
      std::fprintf(stderr, "gpuguard doctor: cannot write to standard output: %s\n", std::strerror(errno));
      return exit_error;
    }
    if (!o.prometheus.empty()) {
      if (std::string why; !gpuguard::detail::write_file_atomically(o.prometheus, render_prometheus(s, unix_time_s()), &why)) {
        std::fprintf(stderr, "gpuguard doctor: --prometheus: %s\n", why.c_str());
        return exit_error;
      }
    }
    if (!first) { first = s; }
    previous = std::move(s);
    if (!o.watch_s || (o.count && n >= *o.count)) { break; }
    interruptible_sleep(*o.watch_s);
    if (interrupted != 0) { break; }
  }
  if (o.watch_s && !o.json && previous) {
    if (!emit("\n" + render_watch_summary(*previous))) { return exit_error; }
  }
  return status;
}

}  // namespace gpuguard::cli
