// The supervisor, the anchor and CMD (see run_supervisor.hpp). Signals reach the supervisor and the
// anchor only through signalfd: both block every signal they act on, so no handler ever runs and
// nothing here needs to be async-signal-safe except the child between fork and exec.
#include "run/run_supervisor.hpp"

#include "process/end.hpp"
#include "util/file.hpp"
#include "util/signal_name.hpp"
#include "util/unique_fd.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

namespace gpuguard::cli {

namespace {

// Forwarded to CMD's process group. SIGCONT too: a job continued by the shell continues whole.
constexpr int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT};

// During a grace period, these to the supervisor mean "stop waiting".
bool is_termination(int signal) noexcept {
  return signal == SIGINT || signal == SIGTERM || signal == SIGHUP || signal == SIGQUIT;
}

// After the SIGKILLs, how long to wait for processes to go (one in uninterruptible sleep, such as
// a GPU driver call, ends only when that call returns).
constexpr std::int64_t kill_wait_ms = 5000;
// How often the process table is read again while waiting for processes to end.
constexpr int rescan_ms = 10;

using steady = std::chrono::steady_clock;

std::int64_t elapsed_ns(steady::time_point since) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - since).count();
}

std::int64_t unix_now_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

using detail::unique_fd;

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), "gpuguard run: " + what);
}

// A close-on-exec pipe: `read_end`, `write_end`.
void make_pipe(unique_fd& read_end, unique_fd& write_end) {
  int fds[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC) != 0) { throw_errno("pipe"); }
  read_end = unique_fd(fds[0]);
  write_end = unique_fd(fds[1]);
}

// The signals the supervisor acts on: SIGCHLD, and each forwarded one that was not ignored when it
// started. One ignored then (nohup's SIGHUP, the SIGINT and SIGQUIT of a background job in a
// script) stays ignored, by the supervisor and by CMD, which inherits the disposition.
sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (const int s : forwarded_signals) {
    struct sigaction now {};
    if (::sigaction(s, nullptr, &now) == 0 && now.sa_handler != SIG_IGN) { sigaddset(&set, s); }
  }
  sigaddset(&set, SIGCHLD);
  return set;
}

unique_fd make_signal_fd(const sigset_t& set) {
  const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) { throw_errno("signalfd"); }
  return unique_fd(fd);
}

// Reads every pending signal from a signalfd, in order.
template <typename F>
void drain_signals(int fd, F&& on_signal) {
  signalfd_siginfo infos[16];
  for (;;) {
    const ssize_t n = ::read(fd, infos, sizeof infos);
    if (n < 0 && errno == EINTR) { continue; }
    if (n <= 0) { return; }
    for (std::size_t i = 0; i < static_cast<std::size_t>(n) / sizeof infos[0]; ++i) {
      on_signal(static_cast<int>(infos[i].ssi_signo));
    }
  }
}

// Waits until `fd` is readable or `timeout_ms` passed (-1: no limit). True when readable.
bool wait_readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  const int n = ::poll(&p, 1, timeout_ms);
  return n > 0;
}

// The anchor's messages to the supervisor: fixed-size, so each write is atomic (< PIPE_BUF).
struct message {
  std::int32_t kind;
  std::int32_t value;
};
enum message_kind : std::int32_t {
  msg_started = 1,      // value: CMD's pid
  msg_exec_failed = 2,  // value: errno
  msg_cgroup_failed = 5,  // value: errno of CMD's move into the job's cgroup (before msg_started)
  msg_stopped = 3,      // value: the signal that stopped CMD
  msg_ended = 4,        // value: CMD's wait status
};

// The supervisor's one word to the anchor: 'x', "everything is ended, exit".
bool tell_anchor_to_exit(int fd) noexcept {
  ssize_t n = 0;
  do { n = ::write(fd, "x", 1); } while (n < 0 && errno == EINTR);
  return n == 1;
}

void send_message(int fd, std::int32_t kind, std::int32_t value) noexcept {
  const message m{kind, value};
  ssize_t n = 0;
  do { n = ::write(fd, &m, sizeof m); } while (n < 0 && errno == EINTR);
}

std::vector<proc_stat> live_descendants(pid_t root, pid_t spare) {
  std::vector<proc_stat> found = detail::descendants_of(root, detail::read_process_table());
  found.erase(std::remove_if(found.begin(), found.end(),
                             [&](const proc_stat& p) { return !p.alive() || p.pid == spare; }),
              found.end());
  return found;
}

// `shared`: NVML opened already (--require-clean keeps one session for the whole run), or null.
residue_check check_devices(const std::vector<proc_stat>& processes, const std::string& prefix,
                            const util::nvml_library* shared) {
  residue_check check;
  check.done = true;
  for (const proc_stat& p : processes) {
    process_info info = read_process("/proc", p.pid, prefix);
    if (!info.exists) { continue; }  // gone since
    if (!info.devices.empty()) {
      check.holders.push_back(gpu_holder{std::move(info), {}});
    } else if (!info.fds_readable && info.fds_error != ENOENT && info.fds_error != ESRCH && info.stat.alive()) {
      check.not_inspected.emplace_back(p.pid, info.fds_error);
    }
  }
  if (!check.holders.empty()) {
    util::nvml_library own;
    if (shared == nullptr) { own = open_nvml_for_run(&check.nvml_note); }
    const util::nvml_library& nvml = shared != nullptr ? *shared : own;
    check.nvml_queried = true;
    check.nvml_available = nvml.available();
    if (nvml.available()) { attach_memory(check.holders, sample_for_run(nvml, &check.nvml_note)); }
  }
  return check;
}

struct teardown_params {
  pid_t root = 0;                 // whose descendants are ended
  pid_t spare = 0;                // one of them left alone (the anchor), not what is below it
  pid_t job_group = 0;            // CMD's process group, to tell who left it
  std::int64_t grace_ms = 0;
  int signal_fd = -1;             // SIGCHLD wakes the wait; see `signals_cut_short`
  bool signals_cut_short = true;  // SIGINT/TERM/HUP/QUIT on signal_fd end the grace period at once
  const job_cgroup* cgroup = nullptr;  // the job's cgroup when CMD joined it: its members too, cgroup.kill
};

// The live processes of the job: the descendants (the subreaper path) and, with the cgroup
// boundary, every member of the job's cgroup, each once.
std::vector<proc_stat> job_processes(const teardown_params& params) {
  std::vector<proc_stat> live = live_descendants(params.root, params.spare);
  if (params.cgroup != nullptr) {
    for (proc_stat& m : params.cgroup->members()) {
      const bool known = std::any_of(live.begin(), live.end(), [&m](const proc_stat& p) { return p.pid == m.pid; });
      if (!known && m.pid != params.spare) { live.push_back(std::move(m)); }
    }
  }
  return live;
}

// Ends every live descendant the process layer's way (process/end.hpp): SIGTERM (SIGCONT to a
// stopped one), the grace period with the process table read again every few milliseconds (a new
// descendant gets SIGTERM too), then SIGKILL to whatever is left. `reap` collects zombies among
// the caller's children; `first_look` sees the leftovers before any signal (the residue check).
teardown_result end_leftovers(const teardown_params& params, const std::function<void()>& reap,
                              const std::function<void(const std::vector<proc_stat>&)>& first_look) {
  reap();
  if (first_look) { first_look(job_processes(params)); }
  // Command lines are read when a process is first seen: after the teardown there is none to read.
  std::map<std::pair<int, std::uint64_t>, std::string> cmdlines;
  detail::end_plan plan;
  plan.grace_ms = params.grace_ms;
  plan.kill_wait_ms = kill_wait_ms;
  plan.rescan_ms = rescan_ms;
  plan.reap = reap;
  plan.live = [&] {
    std::vector<proc_stat> live = job_processes(params);
    for (const proc_stat& p : live) {
      const auto key = std::make_pair(p.pid, p.start_time);
      if (cmdlines.count(key) == 0) { cmdlines.emplace(key, detail::read_cmdline("/proc", p.pid)); }
    }
    return live;
  };
  plan.wait = [&params](int timeout_ms) {
    int cut = 0;
    if (params.signal_fd < 0) {
      ::poll(nullptr, 0, timeout_ms);
    } else if (wait_readable(params.signal_fd, timeout_ms)) {
      drain_signals(params.signal_fd, [&](int signal) {
        if (params.signals_cut_short && is_termination(signal) && cut == 0) { cut = signal; }
      });
    }
    return cut;
  };
  if (params.cgroup != nullptr) {
    // SIGKILL to every member at once: a process being forked right now is not missed.
    plan.kill_all = [&params] { return params.cgroup->kill(); };
  }
  const detail::end_result ended = detail::end_processes(plan);
  teardown_result result;
  result.cut_short = ended.cut_short_by != 0;
  result.cut_short_by = ended.cut_short_by;
  result.duration_ns = ended.duration_ns;
  for (const detail::ended_process& e : ended.processes) {
    leftover l;
    l.process = e.process;
    l.cmdline = cmdlines[std::make_pair(e.process.pid, e.process.start_time)];
    l.left_group = params.job_group != 0 && e.process.pgid != params.job_group;
    l.sent_sigterm = e.sent_sigterm;
    l.sent_sigkill = e.sent_sigkill;
    l.ended = e.ended;
    l.ended_after_ns = e.ended_after_ns;
    l.signal_error = e.signal_error;
    result.leftovers.push_back(std::move(l));
  }
  return result;
}

// --require-clean's gate (see clean_check): looks every 50 ms until the GPU is clean or the grace
// period (at least 1 s: the driver takes a few hundred ms to give back a killed process's memory)
// is over. Without NVML it looks once and says why it cannot tell.
clean_check check_clean(const run_config& config, const util::nvml_library& nvml, const std::string& nvml_note,
                        const std::vector<nvml_device>& before, const std::vector<int>& job_pids,
                        const std::function<std::vector<proc_stat>()>& job_live) {
  clean_check c;
  c.required = true;
  const steady::time_point start = steady::now();
  const steady::time_point deadline = start + std::chrono::milliseconds(std::max<std::int64_t>(config.grace_ms, 1000));
  for (;;) {
    c.holders.clear();
    c.listed.clear();
    c.devices.clear();
    for (const proc_stat& p : job_live()) {
      const process_info info = read_process("/proc", p.pid, config.device_prefix);
      if (info.exists && !info.devices.empty()) { c.holders.push_back(p.pid); }
    }
    bool memory_back = false;
    if (!nvml.available()) {
      c.note = (nvml_note.empty() ? std::string("NVML not available") : nvml_note) +
               ": device memory cannot be checked, so the GPU is not called clean";
    } else {
      const std::vector<nvml_device> now = sample_for_run(nvml, &c.note);
      memory_back = !now.empty() || before.empty();
      for (const nvml_device& d : now) {
        clean_check::device cd;
        cd.index = d.index;
        cd.after = d.used;
        for (const nvml_device& b : before) {
          if (b.index == d.index) { cd.before = b.used; }
        }
        if (!cd.before || !cd.after || *cd.after > *cd.before + clean_tolerance_bytes) { memory_back = false; }
        for (const nvml_process& p : d.processes) {
          const int pid = static_cast<int>(p.pid);
          if (std::find(job_pids.begin(), job_pids.end(), pid) != job_pids.end() &&
              std::find(c.listed.begin(), c.listed.end(), pid) == c.listed.end()) {
            c.listed.push_back(pid);
          }
        }
        c.devices.push_back(cd);
      }
    }
    c.clean = memory_back && c.holders.empty() && c.listed.empty();
    c.waited_ns = elapsed_ns(start);
    if (c.clean || !nvml.available() || steady::now() >= deadline) { return c; }
    ::poll(nullptr, 0, 50);
  }
}

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) { return WEXITSTATUS(wait_status); }
  if (WIFSIGNALED(wait_status)) { return 128 + WTERMSIG(wait_status); }
  return 1;
}

// Whether stopping our own process group is what a job-control stop means here, as for a shell's
// job: the terminal on stdin is our session's controlling terminal, and our process group is not
// orphaned (some member has a parent in another group of this session: a shell that can continue
// the job). The kernel discards SIGTSTP/SIGTTIN/SIGTTOU for an orphaned group for the same reason.
bool job_control_stop_works() {
  const pid_t session = ::getsid(0);
  if (::tcgetsid(STDIN_FILENO) != session) { return false; }
  const pid_t group = ::getpgrp();
  const process_table table = detail::read_process_table();
  for (const auto& [pid, p] : table) {
    if (p.pgid != group) { continue; }
    const auto parent = table.find(p.ppid);
    if (parent != table.end() && parent->second.pgid != group && parent->second.sid == session) { return true; }
  }
  return false;
}

// What CMD's side needs, prepared before any fork so that the child only calls what is safe
// between fork and exec.
struct exec_plan {
  std::vector<char*> argv;
  std::vector<char*> envp;
  sigset_t original_mask{};
  struct sigaction original_sigpipe {};
  struct sigaction original_sigchld {};
  bool hand_tty = false;  // make CMD's group the terminal's foreground group
  int cgroup_procs_fd = -1;  // the job's cgroup.procs: CMD moves itself there (-1: no cgroup)
};

// What CMD's side reports through its close-on-exec pipe before exec (nothing when exec works).
struct exec_report {
  std::int32_t stage;  // report_cgroup (CMD goes on) or report_exec (CMD could not be started)
  std::int32_t error;
};
constexpr std::int32_t report_cgroup = 1;
constexpr std::int32_t report_exec = 2;

// CMD's process, between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_command(const exec_plan& plan, pid_t anchor, int report_fd) noexcept {
  int error = 0;
  if (::setpgid(0, 0) != 0) { error = errno; }
  if (error == 0 && ::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) { error = errno; }
  // The anchor may have died before the death signal was set: then nobody would send it.
  if (error == 0 && ::getppid() != anchor) { ::_exit(127); }
  // Into the job's cgroup ("0": the writing process), before anything of the job can fork. If the
  // kernel refuses (a cgroup that may not hold processes, a move across a delegation boundary),
  // CMD runs anyway and the supervisor falls back to the subreaper path alone.
  if (error == 0 && plan.cgroup_procs_fd >= 0 && ::write(plan.cgroup_procs_fd, "0", 1) != 1) {
    const exec_report moved{report_cgroup, errno};
    ssize_t ignored = ::write(report_fd, &moved, sizeof moved);
    static_cast<void>(ignored);
  }
  if (error == 0) {
    // SIGTTOU is blocked here, so a background group may take the terminal.
    if (plan.hand_tty) { static_cast<void>(::tcsetpgrp(STDIN_FILENO, ::getpid())); }
    ::sigaction(SIGPIPE, &plan.original_sigpipe, nullptr);
    ::sigaction(SIGCHLD, &plan.original_sigchld, nullptr);
    ::sigprocmask(SIG_SETMASK, &plan.original_mask, nullptr);
    ::execvpe(plan.argv[0], plan.argv.data(), plan.envp.data());
    error = errno;
  }
  const exec_report failed{report_exec, error};
  ssize_t ignored = ::write(report_fd, &failed, sizeof failed);
  static_cast<void>(ignored);
  ::_exit(127);
}

void write_stderr(const std::string& line) noexcept {
  static_cast<void>(gpuguard::detail::write_all(STDERR_FILENO, line.data(), line.size()));
}

// The anchor: parent of CMD, child subreaper, the supervisor's dead man's switch.
[[noreturn]] void anchor_main(const run_config& config, const exec_plan& plan, const job_cgroup& cgroup,
                              pid_t supervisor, int message_fd, int control_fd) noexcept {
  try {
    static_cast<void>(::prctl(PR_SET_NAME, "gpuguard-anchor"));
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) { send_message(message_fd, msg_exec_failed, errno); ::_exit(1); }
    static_cast<void>(::prctl(PR_SET_PDEATHSIG, SIGTERM));  // wakes the loop below; the pipe decides
    if (::getppid() != supervisor) { ::_exit(1); }            // the supervisor is gone already
    static_cast<void>(::setpgid(0, 0));  // out of the supervisor's group: a kill of that job spares it
    // SIGTERM is our death signal: blocked, so that it is queued even when it was ignored.
    sigset_t wake;
    sigemptyset(&wake);
    sigaddset(&wake, SIGCHLD);
    sigaddset(&wake, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &wake, nullptr);
    const unique_fd signals = make_signal_fd(wake);
    unique_fd report_read;
    unique_fd report_write;
    make_pipe(report_read, report_write);
    if (config.require_clean) {
      // The supervisor measures the GPU before the job starts (--require-clean), then says go.
      char go = 0;
      ssize_t got = 0;
      do { got = ::read(control_fd, &go, 1); } while (got < 0 && errno == EINTR);
      if (got != 1 || go != 'g') { ::_exit(1); }
    }
    const pid_t anchor = ::getpid();
    const pid_t command = ::fork();
    if (command < 0) {
      send_message(message_fd, msg_exec_failed, errno);
      ::_exit(1);
    }
    if (command == 0) { exec_command(plan, anchor, report_write.get()); }
    static_cast<void>(::setpgid(command, command));  // also from here: no window without the group
    report_write.reset();
    // CMD's reports until exec closes the pipe: a failed move into the cgroup, a failed exec.
    exec_report report{0, 0};
    bool in_cgroup = cgroup.active();
    for (;;) {
      ssize_t n = 0;
      do { n = ::read(report_read.get(), &report, sizeof report); } while (n < 0 && errno == EINTR);
      if (n != static_cast<ssize_t>(sizeof report) || report.stage != report_cgroup) { break; }
      in_cgroup = false;
      send_message(message_fd, msg_cgroup_failed, report.error);
      report = exec_report{0, 0};
    }
    bool command_done = false;
    int command_status = 0;
    if (report.stage == report_exec) {
      while (::waitpid(command, nullptr, 0) < 0 && errno == EINTR) {}
      send_message(message_fd, msg_exec_failed, report.error);
      command_done = true;
    } else {
      send_message(message_fd, msg_started, command);
    }
    const auto reap = [&] {
      int status = 0;
      pid_t pid = 0;
      while ((pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED)) > 0) {
        if (pid != command || command_done) { continue; }
        if (WIFSTOPPED(status)) {
          send_message(message_fd, msg_stopped, WSTOPSIG(status));
        } else {
          command_done = true;
          command_status = status;
          send_message(message_fd, msg_ended, status);
        }
      }
    };
    bool orphaned = false;
    while (!orphaned) {
      pollfd fds[2] = {{signals.get(), POLLIN, 0}, {control_fd, POLLIN, 0}};
      if (::poll(fds, 2, 1000) < 0 && errno != EINTR) { break; }
      if ((fds[0].revents & POLLIN) != 0) {
        drain_signals(signals.get(), [](int) {});
        reap();
      }
      if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        char byte = 0;
        const ssize_t got = ::read(control_fd, &byte, 1);
        if (got == 1 && byte == 'x') {  // the supervisor has ended everything: done
          reap();
          ::_exit(0);
        }
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) { orphaned = true; }
      }
      if (::getppid() != supervisor) { orphaned = true; }
    }
    // The supervisor is gone (killed, even by SIGKILL): end everything below us ourselves.
    const std::string& name = config.command.front();
    const std::string short_name = name.substr(name.find_last_of('/') + 1);  // npos + 1 == 0
    write_stderr("[gpuguard run] the supervisor (pid " + std::to_string(supervisor) +
                 ") is gone: ending the processes of " + short_name + "\n");
    teardown_params params;
    params.root = anchor;
    params.job_group = command;
    params.grace_ms = config.grace_ms;
    params.signal_fd = signals.get();
    params.signals_cut_short = false;  // our own death signal must not skip the grace period
    params.cgroup = in_cgroup ? &cgroup : nullptr;
    const teardown_result result = end_leftovers(params, reap, {});
    static_cast<void>(cgroup.remove(1000));
    std::size_t killed = 0;
    std::size_t survived = 0;
    for (const leftover& l : result.leftovers) {
      killed += l.sent_sigkill ? 1 : 0;
      survived += l.ended ? 0 : 1;
    }
    write_stderr("[gpuguard run] ended " + std::to_string(result.leftovers.size()) + " processes of " +
                 short_name + " (" + std::to_string(killed) + " needed SIGKILL" +
                 (survived > 0 ? ", " + std::to_string(survived) + " could not be ended" : std::string()) + ")\n");
    ::_exit(command_done ? shell_status(command_status) : 1);
  } catch (...) {
    ::_exit(1);
  }
}

}  // namespace

run_outcome supervise(const run_config& config) {
  run_outcome out;
  out.supervisor_pid = ::getpid();
  out.start_unix_ns = unix_now_ns();
  const steady::time_point start = steady::now();

  // Block what we act on before anything can arrive; signalfd delivers it to the loop. SIGTTOU is
  // blocked too (not read): it lets us and CMD's side move the terminal's foreground group.
  exec_plan plan;
  const sigset_t handled = handled_signals();
  sigset_t blocked = handled;
  sigaddset(&blocked, SIGTTOU);
  if (::sigprocmask(SIG_BLOCK, &blocked, &plan.original_mask) != 0) { throw_errno("sigprocmask"); }
  unique_fd signals = make_signal_fd(handled);
  // A closed stderr or report pipe must not kill the supervisor; an inherited SIG_IGN for SIGCHLD
  // would make the kernel reap our children before we learn their status. CMD gets both back.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &plan.original_sigpipe);
  struct sigaction by_default {};
  by_default.sa_handler = SIG_DFL;
  sigemptyset(&by_default.sa_mask);
  ::sigaction(SIGCHLD, &by_default, &plan.original_sigchld);
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) { throw_errno("prctl(PR_SET_CHILD_SUBREAPER)"); }

  const bool tty = ::isatty(STDIN_FILENO) == 1;
  plan.hand_tty = tty && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  std::vector<std::string> argv_storage = config.command;
  std::vector<std::string> env_storage = config.environment;
  for (std::string& a : argv_storage) { plan.argv.push_back(a.data()); }
  plan.argv.push_back(nullptr);
  for (std::string& e : env_storage) { plan.envp.push_back(e.data()); }
  plan.envp.push_back(nullptr);

  // The boundary: the job's own cgroup where cgroup v2 is writable, else the subreaper path alone.
  job_cgroup cgroup;
  if (config.use_cgroup) {
    cgroup = job_cgroup::create(out.supervisor_pid);
    out.boundary_note = cgroup.why_not();
  } else {
    out.boundary_note = "--no-cgroup was given";
  }
  plan.cgroup_procs_fd = cgroup.procs_fd();

  unique_fd message_read;
  unique_fd message_write;
  unique_fd control_read;
  unique_fd control_write;
  make_pipe(message_read, message_write);
  make_pipe(control_read, control_write);
  // The supervisor has one thread (NVML, which may start threads, is loaded only after this), so
  // the anchor may use the heap and stdio after fork like any process.
  std::fflush(nullptr);
  const pid_t anchor = ::fork();
  if (anchor < 0) { throw_errno("fork"); }
  if (anchor == 0) {
    message_read.reset();
    control_write.reset();
    signals.reset();
    anchor_main(config, plan, cgroup, out.supervisor_pid, message_write.get(), control_read.get());
  }
  out.anchor_pid = anchor;
  message_write.reset();
  control_read.reset();

  // --require-clean: the GPU's memory before CMD starts (NVML is loaded only now, after the fork:
  // it may start threads), then the anchor may start CMD. The session stays open to the end.
  util::nvml_library nvml;
  std::string nvml_note;
  std::vector<nvml_device> before;
  if (config.require_clean) {
    nvml = open_nvml_for_run(&nvml_note);
    if (nvml.available()) { before = sample_for_run(nvml, &nvml_note); }
    ssize_t sent = 0;
    do { sent = ::write(control_write.get(), "g", 1); } while (sent < 0 && errno == EINTR);
  }

  bool anchor_alive = true;
  int anchor_status = 0;
  pid_t command = 0;
  bool status_known = false;
  int command_status = 0;
  const auto reap = [&] {
    int status = 0;
    pid_t pid = 0;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      if (pid == anchor) {
        anchor_alive = false;
        anchor_status = status;
      } else if (pid == command && command > 0 && !status_known) {  // reparented to us: the anchor died
        status_known = true;
        command_status = status;
      }
    }
  };
  const auto reap_anchor_blocking = [&] {
    int status = 0;
    while (anchor_alive) {
      const pid_t got = ::waitpid(anchor, &status, 0);
      if (got == anchor) {
        anchor_alive = false;
        anchor_status = status;
      } else if (errno != EINTR) {
        anchor_alive = false;
      }
    }
  };

  // The first message: CMD started, or could not be (after a failed move into the cgroup, if any).
  message first{0, 0};
  ssize_t n = 0;
  bool joined_cgroup = cgroup.active();
  for (;;) {
    do { n = ::read(message_read.get(), &first, sizeof first); } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof first) || first.kind != msg_cgroup_failed) { break; }
    joined_cgroup = false;
    out.boundary_note = "CMD could not join " + cgroup.name() + ": " + std::strerror(first.value);
  }
  if (joined_cgroup) {
    out.cgroup = cgroup.name();
  } else if (cgroup.active()) {
    static_cast<void>(cgroup.remove(0));
  }
  if (n == static_cast<ssize_t>(sizeof first) && first.kind == msg_exec_failed) {
    out.how = run_outcome::end::not_started;
    out.exec_error = first.value;
    out.exit_status = (first.value == ENOENT || first.value == ENOTDIR) ? 127 : 126;
    static_cast<void>(tell_anchor_to_exit(control_write.get()));
    control_write.reset();
    reap_anchor_blocking();
    if (joined_cgroup) { static_cast<void>(cgroup.remove(1000)); }
    out.duration_ns = elapsed_ns(start);
    return out;
  }
  bool ended = false;
  if (n == static_cast<ssize_t>(sizeof first) && first.kind == msg_started) {
    command = first.value;
    out.command_pid = command;
  } else {
    reap_anchor_blocking();
    out.notes.push_back("the anchor process ended before CMD started (status " + std::to_string(anchor_status) + ")");
    ended = true;
  }

  const auto forward = [&](int signal) {
    if (signal == SIGCONT && tty && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp()) {
      // We were brought back to the foreground: so is the job.
      static_cast<void>(::tcsetpgrp(STDIN_FILENO, command));
    }
    if (::kill(-command, signal) != 0 && errno == ESRCH) { static_cast<void>(::kill(command, signal)); }
    ++out.forwarded[static_cast<std::size_t>(signal)];
  };
  const auto relay_stop = [&](int signal) {
    // CMD's group was stopped by a job-control signal (Ctrl-Z, reading the terminal in the
    // background, or its own kill -TSTP). Where that means something (job_control_stop_works),
    // stop our job too, as a shell's job would stop: the shell sees it stopped and takes the
    // terminal back, and when it continues us the SIGCONT goes on to CMD (forward, above).
    // Anywhere else (a script, a CI step: no terminal, or nobody who could continue the job)
    // stopping our process group would stop our caller's processes, and CMD would wait for ever:
    // CMD is continued instead, as the kernel discards these signals for such a job.
    if (signal != SIGTSTP && signal != SIGTTIN && signal != SIGTTOU) { return; }
    if (tty && job_control_stop_works()) {
      if (::tcgetpgrp(STDIN_FILENO) == command) { static_cast<void>(::tcsetpgrp(STDIN_FILENO, ::getpgrp())); }
      static_cast<void>(::kill(0, signal));
      return;
    }
    write_stderr(std::string("[gpuguard run] CMD was stopped by ") + detail::signal_text(signal) +
                 ", but no terminal job control can resume it: continuing it\n");
    if (::kill(-command, SIGCONT) != 0 && errno == ESRCH) { static_cast<void>(::kill(command, SIGCONT)); }
  };

  while (!ended) {
    pollfd fds[2] = {{signals.get(), POLLIN, 0}, {message_read.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) { continue; }
      throw_errno("poll");
    }
    if ((fds[0].revents & POLLIN) != 0) {
      drain_signals(signals.get(), [&](int signal) {
        if (signal != SIGCHLD) { forward(signal); }
      });
      reap();
    }
    if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      message m{0, 0};
      do { n = ::read(message_read.get(), &m, sizeof m); } while (n < 0 && errno == EINTR);
      if (n == static_cast<ssize_t>(sizeof m)) {
        if (m.kind == msg_ended) {
          status_known = true;
          command_status = m.value;
          ended = true;
        } else if (m.kind == msg_stopped) {
          relay_stop(m.value);
        }
      } else {  // the anchor is gone: CMD died with it (its death signal), or is dying
        reap_anchor_blocking();
        out.notes.push_back("the anchor process (pid " + std::to_string(anchor) + ") was ended by " +
                            (WIFSIGNALED(anchor_status) ? detail::signal_text(WTERMSIG(anchor_status))
                                                        : "exit status " + std::to_string(shell_status(anchor_status))) +
                            " while CMD ran; CMD got its death signal (SIGKILL)");
        ended = true;
      }
    }
  }
  out.duration_ns = elapsed_ns(start);
  if (tty && command > 0 && ::tcgetpgrp(STDIN_FILENO) == command) {
    // Take the terminal back: a second Ctrl-C during the grace period then reaches us.
    static_cast<void>(::tcsetpgrp(STDIN_FILENO, ::getpgrp()));
  }

  // End what CMD left behind, looking first at who holds a device.
  teardown_params params;
  params.root = out.supervisor_pid;
  params.spare = anchor_alive ? anchor : 0;
  params.job_group = command;
  params.grace_ms = config.grace_ms;
  params.signal_fd = signals.get();
  params.cgroup = joined_cgroup ? &cgroup : nullptr;
  out.teardown = end_leftovers(params, reap, [&](const std::vector<proc_stat>& left) {
    out.at_end = check_devices(left, config.device_prefix, config.require_clean ? &nvml : nullptr);
  });
  std::vector<proc_stat> survivors;
  for (const leftover& l : out.teardown.leftovers) {
    if (l.ended) { continue; }
    if (auto now = read_stat("/proc", l.process.pid); now && now->start_time == l.process.start_time) {
      survivors.push_back(*now);
    }
  }
  if (!survivors.empty()) {
    out.after_teardown = check_devices(survivors, config.device_prefix, config.require_clean ? &nvml : nullptr);
  }
  if (config.require_clean && out.how != run_outcome::end::not_started) {
    std::vector<int> job_pids;
    if (command > 0) { job_pids.push_back(command); }
    for (const leftover& l : out.teardown.leftovers) { job_pids.push_back(l.process.pid); }
    out.clean = check_clean(config, nvml, nvml_note, before, job_pids, [&params] { return job_processes(params); });
  }

  // Let the anchor go, and collect it.
  if (anchor_alive) {
    static_cast<void>(tell_anchor_to_exit(control_write.get()));
    control_write.reset();
    const steady::time_point deadline = steady::now() + std::chrono::seconds(2);
    while (anchor_alive && steady::now() < deadline) {
      if (wait_readable(signals.get(), 20)) { drain_signals(signals.get(), [](int) {}); }
      reap();
    }
    if (anchor_alive) {
      static_cast<void>(::kill(anchor, SIGKILL));
      reap_anchor_blocking();
    }
  }
  reap();
  if (joined_cgroup && !cgroup.remove(1000)) {
    out.notes.push_back("the job's cgroup " + cgroup.name() + " could not be removed: " + std::strerror(errno));
  }

  if (status_known) {
    if (WIFEXITED(command_status)) {
      out.how = run_outcome::end::exited;
      out.code = WEXITSTATUS(command_status);
    } else if (WIFSIGNALED(command_status)) {
      out.how = run_outcome::end::signaled;
      out.code = WTERMSIG(command_status);
    }
    out.exit_status = shell_status(command_status);
  } else {
    out.how = run_outcome::end::unknown;
    out.exit_status = 1;
  }
  if (out.clean.required && !out.clean.clean) { out.exit_status = exit_not_clean; }
  return out;
}

}  // namespace gpuguard::cli
