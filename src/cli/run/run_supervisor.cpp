// The supervisor, the anchor and CMD (see run_supervisor.hpp). Signals reach the supervisor and the
// anchor only through signalfd: both block every signal they act on, so no handler ever runs and
// nothing here needs to be async-signal-safe except the child between fork and exec.
#include "run/run_supervisor.hpp"

#include "util/postmortem_region.hpp"

#include "run/run_namespace.hpp"

#include "process/end.hpp"
#include "util/file.hpp"
#include "util/format.hpp"
#include "util/signal_name.hpp"
#include "util/unique_fd.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
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
  throw std::system_error(errno, std::generic_category(), what);  // run_main says "gpuguard run: " once
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
  msg_children = 6,     // value: 1 when the anchor has a live child, 0 when it has none (answers 'q')
  msg_setup_failed = 7, // value: errno of the anchor's own setup (the fork of CMD, becoming a subreaper)
  msg_proc_failed = 8,  // value: errno of mounting the PID namespace's own /proc (before msg_started)
};

// The supervisor's words to the anchor: 'g' (start CMD), 'a' (CMD's start seen: in a PID
// namespace the anchor reaps nothing before it), 'q' (have you a live child?), 'x'
// (everything is ended, exit).
bool tell_anchor(int fd, char word) noexcept {
  ssize_t n = 0;
  do { n = ::write(fd, &word, 1); } while (n < 0 && errno == EINTR);
  return n == 1;
}

bool tell_anchor_to_exit(int fd) noexcept { return tell_anchor(fd, 'x'); }

// Whether this process still has a child that is not a zombie, after `reap` collected those that
// ended: waitid's ECHILD says it has no child at all, and 0 from WNOHANG that one is alive. For a
// subreaper this is the proof that nothing below it is left: every orphan below it comes to it.
bool live_child_remains(const std::function<void()>& reap) {
  for (int tries = 0; tries < 1000; ++tries) {
    reap();
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0) { return errno != ECHILD; }
    if (info.si_pid == 0) { return true; }
    // A child ended since `reap` looked: collect it and ask again.
  }
  return true;
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
  /// The subreaper's proof: false only when the job's subreaper (the anchor) has no live child,
  /// which means no process of the job is left (every orphan of the job is reparented to it).
  std::function<bool()> job_has_processes;
  /// With the PID namespace boundary: SIGKILL to its PID 1 (the anchor), which ends every process
  /// of the namespace; safe from any thread (a pidfd). True when it has been sent, now or before.
  /// Empty: none.
  std::function<bool()> kill_namespace;
  /// ... and whether that SIGKILL has been sent already.
  std::function<bool()> namespace_killed;
  /// With the PID namespace boundary: ends the namespace (SIGKILL to its PID 1, the anchor) and
  /// waits up to the given milliseconds for the anchor to be reaped, which the kernel allows only
  /// once every other process of the namespace is gone. True when it was reaped.
  std::function<bool(std::int64_t)> end_namespace;
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

// The latest cgroup.kill after CMD's end is the grace period plus this.
constexpr std::int64_t hard_kill_slack_ms = 1000;
// After the first round, how long each further round waits after its SIGKILLs.
constexpr std::int64_t round_kill_wait_ms = 100;
// At least this long for the job's PID namespace to end after its anchor's SIGKILL: the kernel
// reports the anchor's end once every process of the namespace has gone, and a process in the
// middle of giving back GPU memory can take a while.
constexpr std::int64_t namespace_end_wait_ms = 5000;
// While the cgroup is populated, an empty scan is read again this many times before it counts:
// a process that forks and exits between the list and its stat (a PID hopper) hides from one.
constexpr int empty_scan_retries = 8;

// What the teardown's rounds share: the leftovers found so far and their command lines.
struct teardown_state {
  teardown_state(const teardown_params& p, const std::function<void()>& r) : params(p), reap(r) {}

  const teardown_params& params;
  const std::function<void()>& reap;
  const steady::time_point start = steady::now();
  std::map<std::pair<int, std::uint64_t>, std::string> cmdlines;  // read when first seen: after the teardown there is none to read
  bool group_member_seen = false;  // the last scan saw a live process in CMD's process group
  // When cgroup.kill was first written, from `start` (-1: not yet). Atomic: the grace timer's
  // thread (boundary_kill_timer) writes it too.
  std::atomic<std::int64_t> boundary_killed_ns{-1};
  teardown_result result;
};

// SIGKILL to every process of the job at once, where a boundary can: cgroup.kill, or the end of
// the job's PID namespace. True when it was done (now, or before for the namespace).
bool kill_boundary(const teardown_params& params) {
  if (params.cgroup != nullptr) { return params.cgroup->kill(); }
  return params.kill_namespace && params.kill_namespace();
}

// The same, true only when this call ended processes (as far as it can tell): the cgroup was
// populated, or the namespace had not had its SIGKILL yet.
bool kill_boundary_ending_processes(const teardown_params& params) {
  if (params.cgroup != nullptr) {
    const bool populated = params.cgroup->populated();
    return params.cgroup->kill() && populated;
  }
  const bool before = params.namespace_killed && params.namespace_killed();
  return params.kill_namespace && params.kill_namespace() && !before;
}

bool has_boundary(const teardown_params& params) { return params.cgroup != nullptr || params.kill_namespace; }

// Kills through the boundary with `kill` and keeps the moment, taken before the kill: a process
// seen gone after it counts as ended by SIGKILL, however late this thread gets to note it.
bool kill_and_note(teardown_state& t, bool (*kill)(const teardown_params&)) {
  const std::int64_t at = elapsed_ns(t.start);
  const bool killed = kill(t.params);
  std::int64_t never = -1;
  if (killed) { t.boundary_killed_ns.compare_exchange_strong(never, at); }
  return killed;
}

// The job's processes as one round of end_processes sees them. Past `kill_from` on the cgroup
// path, every member is killed before anything is read: a fork bomb that keeps the scans slow
// cannot hold the SIGKILL back.
std::vector<proc_stat> scan_job(teardown_state& t, steady::time_point kill_from) {
  const teardown_params& params = t.params;
  if (has_boundary(params) && t.boundary_killed_ns < 0 && steady::now() >= kill_from) { kill_and_note(t, kill_boundary); }
  std::vector<proc_stat> live = job_processes(params);
  for (int i = 0; live.empty() && params.cgroup != nullptr && i < empty_scan_retries && params.cgroup->populated(); ++i) {
    live = job_processes(params);
  }
  t.group_member_seen = false;
  for (const proc_stat& p : live) {
    const auto key = std::make_pair(p.pid, p.start_time);
    if (t.cmdlines.count(key) == 0) { t.cmdlines.emplace(key, detail::read_cmdline("/proc", p.pid)); }
    t.group_member_seen = t.group_member_seen || (params.job_group > 0 && p.pgid == params.job_group);
  }
  return live;
}

// One round of the process layer's way (process/end.hpp): SIGTERM (SIGCONT to a stopped one), the
// grace period with the job read again every few milliseconds (a new process gets SIGTERM too),
// then SIGKILL (cgroup.kill first where there is one) to whatever is left. What it saw joins the
// leftovers; `late`: found by a round after the first.
void end_round(teardown_state& t, std::int64_t grace_ms, std::int64_t kill_wait, bool late) {
  const teardown_params& params = t.params;
  const steady::time_point round_start = steady::now();
  const steady::time_point kill_from = round_start + std::chrono::milliseconds(grace_ms);
  detail::end_plan plan;
  plan.grace_ms = grace_ms;
  plan.kill_wait_ms = kill_wait;
  plan.rescan_ms = rescan_ms;
  plan.reap = t.reap;
  plan.live = [&t, kill_from] { return scan_job(t, kill_from); };
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
  if (has_boundary(params)) {
    // SIGKILL to every member at once: a process being forked right now is not missed.
    plan.kill_all = [&t] { return kill_and_note(t, kill_boundary); };
  } else if (params.job_group > 0) {
    // Without a cgroup, SIGKILL to CMD's process group at once: a process that forks and lets its
    // parent exit (and stays in the group) is hit whatever PID it has now. Sent only when the
    // last scan saw a live member: a member pins the group's id, so it cannot name another group.
    plan.kill_all = [&t] {
      return t.group_member_seen && ::kill(-t.params.job_group, SIGKILL) == 0;
    };
  }
  const detail::end_result ended = detail::end_processes(plan);
  teardown_result& result = t.result;
  if (!late) {
    result.cut_short = ended.cut_short_by != 0;
    result.cut_short_by = ended.cut_short_by;
  }
  const std::int64_t offset = std::chrono::duration_cast<std::chrono::nanoseconds>(round_start - t.start).count();
  for (const detail::ended_process& e : ended.processes) {
    auto it = std::find_if(result.leftovers.begin(), result.leftovers.end(), [&e](const leftover& l) {
      return l.process.pid == e.process.pid && l.process.start_time == e.process.start_time;
    });
    if (it == result.leftovers.end()) {
      leftover l;
      l.process = e.process;
      l.cmdline = t.cmdlines[std::make_pair(e.process.pid, e.process.start_time)];
      l.left_group = params.job_group != 0 && e.process.pgid != params.job_group;
      l.found_late = late;
      result.leftovers.push_back(std::move(l));
      it = std::prev(result.leftovers.end());
    }
    it->sent_sigterm = it->sent_sigterm || e.sent_sigterm;
    it->sent_sigkill = it->sent_sigkill || e.sent_sigkill;
    it->ended = e.ended;
    it->ended_after_ns = e.ended ? offset + e.ended_after_ns : -1;
    // Seen going after cgroup.kill (which a scan may have run first): SIGKILL ended it.
    const std::int64_t killed_ns = t.boundary_killed_ns;
    if (e.ended && killed_ns >= 0 && it->ended_after_ns >= killed_ns) { it->sent_sigkill = true; }
    if (!e.signal_error.empty()) { it->signal_error = e.signal_error; }
  }
}

// The cgroup's last word, however the scans went: its members not seen yet join the leftovers,
// then cgroup.kill, then a wait for `populated 0`. False when the cgroup is still populated.
bool kill_cgroup_and_wait(teardown_state& t, std::int64_t timeout_ms) {
  const job_cgroup& cgroup = *t.params.cgroup;
  const bool populated = cgroup.populated();
  bool seen_all = true;
  for (const proc_stat& m : cgroup.members()) {
    const auto known = std::find_if(t.result.leftovers.begin(), t.result.leftovers.end(), [&m](const leftover& l) {
      return l.process.pid == m.pid && l.process.start_time == m.start_time;
    });
    if (known != t.result.leftovers.end() && !known->ended) { continue; }
    seen_all = false;
    leftover l;
    l.process = m;
    l.cmdline = detail::read_cmdline("/proc", m.pid);
    l.left_group = t.params.job_group != 0 && m.pgid != t.params.job_group;
    l.found_late = true;
    l.sent_sigkill = true;
    t.result.leftovers.push_back(std::move(l));
  }
  const bool survivors_known = std::any_of(t.result.leftovers.begin(), t.result.leftovers.end(),
                                           [](const leftover& l) { return !l.ended; });
  kill_and_note(t, kill_boundary);
  const bool empty = cgroup.wait_empty(static_cast<int>(timeout_ms));
  t.result.unseen_ended_by_cgroup_kill = populated && empty && seen_all && !survivors_known;
  if (empty) {
    for (leftover& l : t.result.leftovers) {
      if (l.ended) { continue; }
      const std::optional<proc_stat> now = read_stat("/proc", l.process.pid);
      if (!now || now->start_time != l.process.start_time || !now->alive()) {
        l.ended = true;
        l.ended_after_ns = elapsed_ns(t.start);
      }
    }
  }
  return empty;
}

// The boundary's SIGKILL (cgroup.kill, or the end of the job's PID namespace) at the end of the
// grace period, from a thread of its own: a fork bomb that keeps every CPU busy makes each read of
// the process table take seconds, and the SIGKILL must not wait for one to finish. The thread
// needs only a moment of CPU to write one file or send one signal. Stopped (and joined) when the
// teardown ends first.
class boundary_kill_timer {
 public:
  /// At `at`, unless destroyed first, calls `fire` on the timer's thread (nothing where `params`
  /// has no boundary): it ends the job through the boundary.
  boundary_kill_timer(const teardown_params& params, steady::time_point at, std::function<void()> fire) {
    if (!has_boundary(params)) { return; }
    thread_ = std::thread([this, at, fire = std::move(fire)] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!wake_.wait_until(lock, at, [this] { return stop_; })) { fire(); }
    });
  }
  boundary_kill_timer(const boundary_kill_timer&) = delete;
  boundary_kill_timer& operator=(const boundary_kill_timer&) = delete;
  ~boundary_kill_timer() {
    if (!thread_.joinable()) { return; }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// Ends every process of the job, and does not stop until the boundary proves it: a round with the
// grace period; then, as long as the job's cgroup is populated or the anchor (the job's
// subreaper) has a live child (a process the scans missed: one that forks and lets its parent
// exit, again and again), more rounds, with what is left of the grace period, up to kill_wait_ms
// after it; then, however the scans went, cgroup.kill and a wait for `populated 0`. `reap`
// collects zombies among the caller's children.
teardown_result end_leftovers(const teardown_params& params, const std::function<void()>& reap) {
  reap();
  teardown_state t(params, reap);
  const steady::time_point grace_end = t.start + std::chrono::milliseconds(params.grace_ms);
  const steady::time_point deadline = grace_end + std::chrono::milliseconds(kill_wait_ms);
  const boundary_kill_timer on_time(params, grace_end, [&t] { kill_and_note(t, kill_boundary_ending_processes); });
  const auto has_processes = [&params] {
    return (params.cgroup != nullptr && params.cgroup->populated()) ||
           (params.job_has_processes ? params.job_has_processes() : true);
  };
  end_round(t, params.grace_ms, kill_wait_ms, false);
  bool left = has_processes();
  while (left && steady::now() < deadline) {
    const auto grace_left = std::chrono::duration_cast<std::chrono::milliseconds>(grace_end - steady::now()).count();
    end_round(t, std::max<std::int64_t>(grace_left, 0), round_kill_wait_ms, true);
    left = has_processes();
  }
  bool cgroup_empty = true;
  if (params.cgroup != nullptr) {
    const auto wait_left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    cgroup_empty = kill_cgroup_and_wait(t, std::max<std::int64_t>(wait_left, round_kill_wait_ms));
  }
  bool below_anchor = params.job_has_processes ? params.job_has_processes() : true;
  teardown_result& result = t.result;
  bool namespace_gone = true;
  if (params.end_namespace) {
    // However the scans went, the namespace ends with its anchor: the kernel's proof.
    const bool survivors_known = std::any_of(result.leftovers.begin(), result.leftovers.end(),
                                             [](const leftover& l) { return !l.ended; });
    const auto wait_left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    namespace_gone = params.end_namespace(std::max<std::int64_t>(wait_left, namespace_end_wait_ms));
    result.unseen_ended_by_namespace_end = namespace_gone && below_anchor && !survivors_known;
    below_anchor = !namespace_gone;
  }
  result.job_empty = cgroup_empty && !below_anchor;
  if (!cgroup_empty) {
    result.not_empty_why = "the job's cgroup " + params.cgroup->name() + " still holds processes";
  } else if (!namespace_gone) {
    result.not_empty_why = "the job's PID namespace has not ended (its anchor was not reaped)";
  } else if (below_anchor) {
    result.not_empty_why = params.job_has_processes ? "the job's subreaper still has live children"
                                                    : "nothing can tell whether the job has processes left";
  }
  if (result.job_empty) {
    for (leftover& l : result.leftovers) {  // none is left: each one that was seen is gone
      if (!l.ended) { l.ended_after_ns = elapsed_ns(t.start); }
      l.ended = true;
    }
  }
  result.duration_ns = elapsed_ns(t.start);
  return result;
}

// --require-clean's gate (see clean_check): looks every 50 ms until the GPU is clean or the grace
// period (at least 1 s: the driver takes a few hundred ms to give back a killed process's memory)
// is over. Without NVML it looks once and says why it cannot tell. `job` finds the job's processes.
clean_check check_clean(const run_config& config, const util::nvml_library& nvml, const std::string& nvml_note,
                        const std::vector<nvml_device>& before, const std::vector<int>& job_pids,
                        const teardown_params& job) {
  clean_check c;
  c.required = true;
  const steady::time_point start = steady::now();
  const steady::time_point deadline = start + std::chrono::milliseconds(std::max<std::int64_t>(config.grace_ms, 1000));
  for (;;) {
    c.holders.clear();
    c.listed.clear();
    c.devices.clear();
    for (const proc_stat& p : job_processes(job)) {
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

// ---- the anchor's steps: anchor_main is their outline -------------------------------------------

// What the anchor's steps share: parent of CMD, child subreaper, the supervisor's dead man's switch.
struct anchor_state {
  anchor_state(const run_config& c, const job_cgroup& g, pid_t s, int m, int k, bool ns)
      : config(c), cgroup(g), supervisor(s), message_fd(m), control_fd(k), in_namespace(ns) {}

  const run_config& config;
  const job_cgroup& cgroup;
  const pid_t supervisor;
  const int message_fd;         // our messages to the supervisor
  const int control_fd;         // its word to us: 'g' (start CMD), 'x' (exit), end of file (gone)
  const pid_t self = ::getpid();
  // PID 1 of the job's PID namespace (fork_into_namespaces): the supervisor is outside it, where
  // getppid() reads 0.
  const bool in_namespace;
  const pid_t parent = in_namespace ? 0 : supervisor;  // what getppid() says while the supervisor lives
  bool own_proc = false;        // in the namespace: /proc is its own (mount_proc), not the host's
  unique_fd signals;            // signalfd of SIGCHLD and SIGTERM (our death signal)
  pid_t command = 0;
  bool in_cgroup = false;       // CMD runs in the job's cgroup
  bool command_done = false;    // CMD has ended (or never started)
  int command_status = 0;       // its wait status
};

// Names the process, makes it a subreaper in a process group of its own, and takes its signals
// through signalfd. Exits when the supervisor is gone already.
void become_anchor(anchor_state& a) {
  static_cast<void>(::prctl(PR_SET_NAME, "gpuguard-anchor"));
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    send_message(a.message_fd, msg_setup_failed, errno);
    ::_exit(1);
  }
  static_cast<void>(::prctl(PR_SET_PDEATHSIG, SIGTERM));  // wakes watch_supervisor; the pipe decides
  if (::getppid() != a.parent) { ::_exit(1); }
  static_cast<void>(::setpgid(0, 0));  // out of the supervisor's group: a kill of that job spares it
  // SIGTERM is our death signal: blocked, so that it is queued even when it was ignored.
  sigset_t wake;
  sigemptyset(&wake);
  sigaddset(&wake, SIGCHLD);
  sigaddset(&wake, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &wake, nullptr);
  a.signals = make_signal_fd(wake);
}

// Waits for the supervisor's `word`; exits when anything else comes, or the supervisor is gone.
void wait_for_word(const anchor_state& a, char word) {
  char got_word = 0;
  ssize_t got = 0;
  do { got = ::read(a.control_fd, &got_word, 1); } while (got < 0 && errno == EINTR);
  if (got != 1 || got_word != word) { ::_exit(1); }
}

// In the job's PID namespace, a /proc of it: CMD's /proc/PID paths then name its own processes.
// Where the kernel refuses (a /proc with parts masked, as in many containers), CMD sees the host's.
void mount_proc(anchor_state& a) {
  if (!a.in_namespace) { return; }
  const int error = mount_own_proc();
  a.own_proc = error == 0;
  if (error != 0) { send_message(a.message_fd, msg_proc_failed, error); }
}

// --require-clean: the supervisor measures the GPU before the job starts, then says go.
void wait_for_go(const anchor_state& a) {
  if (a.config.require_clean) { wait_for_word(a, 'g'); }
}

// Forks CMD and tells the supervisor how its start went: CMD's reports through a close-on-exec
// pipe until exec closes it (a failed move into the cgroup, a failed exec).
void start_command(anchor_state& a, const exec_plan& plan) {
  unique_fd report_read;
  unique_fd report_write;
  make_pipe(report_read, report_write);
  a.command = ::fork();
  if (a.command < 0) {
    send_message(a.message_fd, msg_setup_failed, errno);
    ::_exit(1);
  }
  if (a.command == 0) { exec_command(plan, a.self, report_write.get()); }
  static_cast<void>(::setpgid(a.command, a.command));  // also from here: no window without the group
  report_write.reset();
  exec_report report{0, 0};
  a.in_cgroup = a.cgroup.active();
  for (;;) {
    ssize_t n = 0;
    do { n = ::read(report_read.get(), &report, sizeof report); } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof report) || report.stage != report_cgroup) { break; }
    a.in_cgroup = false;
    send_message(a.message_fd, msg_cgroup_failed, report.error);
    report = exec_report{0, 0};
  }
  if (report.stage == report_exec) {
    while (::waitpid(a.command, nullptr, 0) < 0 && errno == EINTR) {}
    send_message(a.message_fd, msg_exec_failed, report.error);
    a.command_done = true;
  } else {
    send_message(a.message_fd, msg_started, a.command);
    // In a PID namespace the supervisor finds CMD's PID in its own namespace by what we said: CMD
    // stays our child, if only a zombie, until it has. A supervisor that dies meanwhile (end of
    // file) is found gone by watch_supervisor, which then ends the job as after any other death.
    if (a.in_namespace) {
      char word = 0;
      while (::read(a.control_fd, &word, 1) < 0 && errno == EINTR) {}
    }
  }
}

// Collects every child that has ended, and tells the supervisor when CMD stops or ends.
void reap(anchor_state& a) {
  int status = 0;
  pid_t pid = 0;
  while ((pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED)) > 0) {
    if (pid != a.command || a.command_done) { continue; }
    if (WIFSTOPPED(status)) {
      send_message(a.message_fd, msg_stopped, WSTOPSIG(status));
    } else {
      a.command_done = true;
      a.command_status = status;
      send_message(a.message_fd, msg_ended, status);
    }
  }
}

// Reaps until the supervisor says everything is ended (then exits 0), or is gone: returns then.
void watch_supervisor(anchor_state& a) {
  for (;;) {
    pollfd fds[2] = {{a.signals.get(), POLLIN, 0}, {a.control_fd, POLLIN, 0}};
    if (::poll(fds, 2, 1000) < 0 && errno != EINTR) { return; }
    if ((fds[0].revents & POLLIN) != 0) {
      drain_signals(a.signals.get(), [](int) {});
      reap(a);
    }
    if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char byte = 0;
      const ssize_t got = ::read(a.control_fd, &byte, 1);
      if (got == 1 && byte == 'x') {  // the supervisor has ended everything: done
        reap(a);
        ::_exit(0);
      }
      if (got == 1 && byte == 'q') {  // is anything of the job left below us?
        send_message(a.message_fd, msg_children, live_child_remains([&a] { reap(a); }) ? 1 : 0);
        continue;
      }
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) { return; }
    }
    if (::getppid() != a.parent) { return; }
  }
}

// In the job's PID namespace without a /proc of its own (the host's shows PID 1 as the host's
// init, whose descendants are every process): SIGTERM to every process of the namespace at once
// (kill(-1) from its PID 1 reaches those alone), the grace period while any is left, then our
// exit, at which the kernel SIGKILLs the rest. Exits with CMD's status.
[[noreturn]] void end_namespace_from_inside(anchor_state& a, const std::string& short_name) {
  static_cast<void>(::kill(-1, SIGTERM));
  const steady::time_point deadline = steady::now() + std::chrono::milliseconds(a.config.grace_ms);
  bool left = live_child_remains([&a] { reap(a); });
  while (left && steady::now() < deadline) {
    if (wait_readable(a.signals.get(), 20)) { drain_signals(a.signals.get(), [](int) {}); }
    left = live_child_remains([&a] { reap(a); });
  }
  write_stderr("[gpuguard run] ended the processes of " + short_name + " with its PID namespace (" +
               (left ? "SIGKILL after the grace period" : "all gone after SIGTERM") + ")\n");
  ::_exit(a.command_done ? shell_status(a.command_status) : 1);
}

// The supervisor is gone (killed, even by SIGKILL): ends everything below us the supervisor's way,
// says so on stderr, and exits with CMD's status.
[[noreturn]] void end_orphaned_job(anchor_state& a) {
  const std::string& name = a.config.command.front();
  const std::string short_name = printable_on_one_line(name.substr(name.find_last_of('/') + 1));  // npos + 1 == 0
  write_stderr("[gpuguard run] the supervisor (pid " + std::to_string(a.supervisor) +
               ") is gone: ending the processes of " + short_name + "\n");
  if (a.in_namespace && !a.own_proc) { end_namespace_from_inside(a, short_name); }
  teardown_params params;
  params.root = a.self;
  params.job_group = a.command;
  params.grace_ms = a.config.grace_ms;
  params.signal_fd = a.signals.get();
  params.signals_cut_short = false;  // our own death signal must not skip the grace period
  params.cgroup = a.in_cgroup ? &a.cgroup : nullptr;
  params.job_has_processes = [&a] { return live_child_remains([&a] { reap(a); }); };
  const teardown_result result = end_leftovers(params, [&a] { reap(a); });
  static_cast<void>(a.cgroup.remove(1000));
  std::size_t killed = 0;
  std::size_t survived = 0;
  for (const leftover& l : result.leftovers) {
    killed += l.sent_sigkill ? 1 : 0;
    survived += l.ended ? 0 : 1;
  }
  write_stderr("[gpuguard run] ended " + std::to_string(result.leftovers.size()) + " processes of " +
               short_name + " (" + std::to_string(killed) + " needed SIGKILL" +
               (survived > 0 ? ", " + std::to_string(survived) + " could not be ended" : std::string()) + ")" +
               (result.job_empty ? std::string() : "; THE JOB MAY STILL HAVE PROCESSES: " + result.not_empty_why) + "\n");
  if (!result.job_empty || survived > 0) { ::_exit(exit_not_ended); }
  ::_exit(a.command_done ? shell_status(a.command_status) : 1);
}

[[noreturn]] void anchor_main(const run_config& config, const exec_plan& plan, const job_cgroup& cgroup,
                              pid_t supervisor, int message_fd, int control_fd, bool in_namespace) noexcept {
  try {
    anchor_state a(config, cgroup, supervisor, message_fd, control_fd, in_namespace);
    become_anchor(a);
    mount_proc(a);
    wait_for_go(a);
    start_command(a, plan);
    watch_supervisor(a);  // returns only when the supervisor is gone
    end_orphaned_job(a);
  } catch (...) {
    ::_exit(1);
  }
}

// ---- the supervisor's steps: supervise(), at the end, is their outline -------------------------

// What the supervisor's steps share, from the spawn to the outcome. Built once in supervise() and
// never moved: plan.argv and plan.envp point into `argv` and `envp`.
struct supervisor_state {
  supervisor_state(const run_config& c, run_outcome& o) : config(c), out(o) {}

  const run_config& config;
  run_outcome& out;
  const steady::time_point start = steady::now();
  bool tty = false;                  // stdin is a terminal
  exec_plan plan;                    // CMD's side, prepared before any fork
  std::vector<std::string> argv;     // the strings plan.argv and plan.envp point into
  std::vector<std::string> envp;
  job_cgroup cgroup;                 // the boundary, where cgroup v2 is writable
  bool joined_cgroup = false;        // CMD runs in `cgroup`
  job_namespace space;               // else the boundary: the anchor is PID 1 of a PID namespace
  unique_fd anchor_pidfd;            // with `space`: the anchor, to end the namespace from any thread
  std::atomic<bool> namespace_killed{false};  // ... and whether that was done
  unique_fd signals;                 // signalfd of handled_signals()
  unique_fd messages;                // the anchor's messages (read end)
  unique_fd control;                 // our word to the anchor (write end)
  pid_t anchor = 0;
  bool anchor_alive = false;
  int anchor_status = 0;             // its wait status, once reaped
  pid_t command = 0;                 // CMD, once started
  bool status_known = false;         // command_status holds CMD's wait status
  int command_status = 0;
  util::nvml_library nvml;           // --require-clean: one session for the whole run
  std::string nvml_note;
  std::vector<nvml_device> before;   // --require-clean: the devices before CMD started
  unique_fd region;                  // the post-mortem region, inherited by the job
  memory_cgroup memory;              // where the job's OOM kills are counted
  std::optional<std::uint64_t> oom_before;  // its count before CMD (nullopt: unreadable)
  std::optional<std::uint64_t> oom_after;   // ... and after the teardown
};

// Signals reach the supervisor only through signalfd: what it acts on is blocked before anything
// can arrive. SIGTTOU is blocked too (not read): it lets us and CMD's side move the terminal's
// foreground group. A closed stderr or report pipe must not kill the supervisor; an inherited
// SIG_IGN for SIGCHLD would make the kernel reap our children before we learn their status. CMD
// gets the mask and both dispositions back (exec_command). Orphans of the job come back to us.
void become_subreaper(supervisor_state& s) {
  const sigset_t handled = handled_signals();
  sigset_t blocked = handled;
  sigaddset(&blocked, SIGTTOU);
  if (::sigprocmask(SIG_BLOCK, &blocked, &s.plan.original_mask) != 0) { throw_errno("sigprocmask"); }
  s.signals = make_signal_fd(handled);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &s.plan.original_sigpipe);
  struct sigaction by_default {};
  by_default.sa_handler = SIG_DFL;
  sigemptyset(&by_default.sa_mask);
  ::sigaction(SIGCHLD, &by_default, &s.plan.original_sigchld);
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) { throw_errno("prctl(PR_SET_CHILD_SUBREAPER)"); }
}

// The job's post-mortem region (util/postmortem_region.hpp): made before anything of the job
// starts, inherited by it (its descriptor named in CMD's environment). Without one, the run goes
// on without post-mortems and says why.
void make_postmortem_region(supervisor_state& s) {
  std::string error;
  s.region = unique_fd(detail::postmortem::create_region(&error));
  if (!s.region.valid() || !detail::postmortem::set_inherited(s.region.get(), true)) {
    s.out.postmortem_note = "no post-mortem region: " + (error.empty() ? std::string(std::strerror(errno)) : error);
    s.region.reset();
  }
}

// Whether the job's OOM kills are counted in the job's own cgroup (or one below it), not in one
// it shares with gpuguard run.
bool own_memory_cgroup(const supervisor_state& s) {
  const std::string& job = s.cgroup.name();
  return s.memory.version == 2 && !job.empty() && s.memory.name.rfind(job, 0) == 0;
}

// The memory cgroup CMD is charged to, and its OOM-kill count, before CMD starts: the job's own
// cgroup where it has the memory controller (CMD joins it before exec), else the nearest one above
// it that has, else the cgroup v1 memory cgroup CMD inherits from gpuguard run.
void count_oom_kills_before(supervisor_state& s) {
  s.memory = find_memory_cgroup(0, s.cgroup.active() ? s.cgroup.name() : std::string());
  s.oom_before = read_oom_kills(s.memory);
}

// As soon as CMD exists: where it is charged elsewhere than foreseen (it could not join the job's
// cgroup, or it is charged to another), the count starts now.
void confirm_oom_counter(supervisor_state& s) {
  memory_cgroup now;
  if (own_memory_cgroup(s) && !s.joined_cgroup) {
    now = find_memory_cgroup(0, "");
  } else if (s.command > 0) {
    now = find_memory_cgroup(s.command, "");  // not found when CMD is gone already: the foreseen one stays
  }
  if (now.found() && now.directory != s.memory.directory) {
    s.memory = std::move(now);
    s.oom_before = read_oom_kills(s.memory);
  }
}

// After the job: a post-mortem for each tracked process that died without its exit path, with the
// cause the supervisor can establish; each is also ended in the process's JSONL log.
void collect_postmortems(supervisor_state& s) {
  if (!s.region.valid()) { return; }
  static_cast<void>(detail::postmortem::set_inherited(s.region.get(), false));  // addr2line gets none
  postmortem_context c;
  c.command = s.command;
  if (s.status_known && WIFSIGNALED(s.command_status)) { c.command_signal = WTERMSIG(s.command_status); }
  for (const leftover& l : s.out.teardown.leftovers) {
    if (l.sent_sigterm || l.sent_sigkill) { c.torn_down.insert(l.process.pid); }
  }
  if (s.oom_before && s.oom_after) {
    c.oom_kills = *s.oom_after > *s.oom_before ? *s.oom_after - *s.oom_before : 0;
    c.oom_counter = own_memory_cgroup(s) ? "the job's " + s.memory.text()
                                         : "CMD's memory cgroup (" + s.memory.text() + ", shared with gpuguard run and any other process in it)";
  } else {
    c.oom_note = s.memory.found() ? "the OOM-kill count of " + s.memory.text() + " could not be read" +
                                        (s.memory.version == 1 ? " (memory.oom_control has it from Linux 4.13)" : "")
                                  : s.memory.why_not;
  }
  c.pids_comparable = !s.space.pid;
  c.job_empty = s.out.teardown.job_empty;
  s.out.postmortems = read_postmortems(s.region.get(), c, &s.out.postmortem_note);
  for (process_postmortem& p : s.out.postmortems) { write_postmortem_end_line(p); }
}

// CMD's argv and environment, and whether it gets the terminal's foreground.
void prepare_command(supervisor_state& s) {
  s.tty = ::isatty(STDIN_FILENO) == 1;
  s.plan.hand_tty = s.tty && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  s.argv = s.config.command;
  s.envp.clear();
  const std::string region_variable = std::string(detail::postmortem::environment_variable) + "=";
  for (const std::string& e : s.config.environment) {
    if (e.rfind(region_variable, 0) != 0) { s.envp.push_back(e); }  // a nested run's region is its own
  }
  if (s.region.valid()) { s.envp.push_back(region_variable + std::to_string(s.region.get())); }
  for (std::string& a : s.argv) { s.plan.argv.push_back(a.data()); }
  s.plan.argv.push_back(nullptr);
  for (std::string& e : s.envp) { s.plan.envp.push_back(e.data()); }
  s.plan.envp.push_back(nullptr);
}

// The boundary: the job's own cgroup where cgroup v2 is writable; else (spawn_anchor) its own PID
// namespace; else the subreaper path alone.
void isolate(supervisor_state& s) {
  if (s.config.use_cgroup) {
    s.cgroup = job_cgroup::create(s.out.supervisor_pid);
    s.out.boundary_note = s.cgroup.why_not();
  } else {
    s.out.boundary_note = "--no-cgroup was given";
  }
  s.plan.cgroup_procs_fd = s.cgroup.procs_fd();
}

// Forks the anchor, which starts CMD (anchor_main never returns).
void spawn_anchor(supervisor_state& s) {
  unique_fd message_write;
  unique_fd control_read;
  make_pipe(s.messages, message_write);
  make_pipe(control_read, s.control);
  // The supervisor has one thread (NVML, which may start threads, is loaded only after this), so
  // the anchor may use the heap and stdio after fork like any process.
  std::fflush(nullptr);
  pid_t anchor = -1;
  if (!s.cgroup.active() && s.config.use_namespace) {
    anchor = fork_into_namespaces(&s.space);
    s.out.pid_namespace = s.space.pid;
    s.out.user_namespace = s.space.user;
    s.out.namespace_note = s.space.why_not;
  } else if (!s.cgroup.active()) {
    s.out.namespace_note = "--no-namespace was given";
  }
  if (anchor < 0) { anchor = ::fork(); }
  if (anchor < 0) { throw_errno("fork"); }
  if (anchor == 0) {
    s.messages.reset();
    s.control.reset();
    s.signals.reset();
    anchor_main(s.config, s.plan, s.cgroup, s.out.supervisor_pid, message_write.get(), control_read.get(), s.space.pid);
  }
  s.anchor = anchor;
  s.anchor_alive = true;
  s.out.anchor_pid = anchor;
  if (s.space.pid) { s.anchor_pidfd = unique_fd(static_cast<int>(::syscall(SYS_pidfd_open, anchor, 0))); }
}

// --require-clean: the GPU's memory before CMD starts (NVML is loaded only now, after the fork: it
// may start threads), then the anchor may start CMD. The session stays open to the end.
void measure_gpu_before(supervisor_state& s) {
  if (!s.config.require_clean) { return; }
  s.nvml = open_nvml_for_run(&s.nvml_note);
  if (s.nvml.available()) { s.before = sample_for_run(s.nvml, &s.nvml_note); }
  ssize_t sent = 0;
  do { sent = ::write(s.control.get(), "g", 1); } while (sent < 0 && errno == EINTR);
}

// Collects every child that has ended: the anchor, and CMD when it was reparented to us (the
// anchor died); other orphans of the job only need reaping.
void reap(supervisor_state& s) {
  int status = 0;
  pid_t pid = 0;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    if (pid == s.anchor) {
      s.anchor_alive = false;
      s.anchor_status = status;
    } else if (pid == s.command && s.command > 0 && !s.status_known) {
      s.status_known = true;
      s.command_status = status;
    }
  }
}

// Waits for the anchor to end.
void reap_anchor(supervisor_state& s) {
  int status = 0;
  while (s.anchor_alive) {
    const pid_t got = ::waitpid(s.anchor, &status, 0);
    if (got == s.anchor) {
      s.anchor_alive = false;
      s.anchor_status = status;
    } else if (errno != EINTR) {
      s.anchor_alive = false;
    }
  }
}

// One whole message of the anchor; false when it is gone (end of file) or the read failed.
bool read_message(int fd, message& m) {
  ssize_t n = 0;
  do { n = ::read(fd, &m, sizeof m); } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof m);
}

// How the job started, by the anchor's first word.
enum class job_start { started, not_started, anchor_gone };

// The anchor's first word: CMD started, or could not be (after a failed move into the cgroup, if
// any). When CMD could not be started, the outcome is complete on return.
job_start await_start(supervisor_state& s) {
  message first{0, 0};
  bool got = false;
  s.joined_cgroup = s.cgroup.active();
  while ((got = read_message(s.messages.get(), first)) && (first.kind == msg_cgroup_failed || first.kind == msg_proc_failed)) {
    if (first.kind == msg_proc_failed) {
      s.out.notes.push_back(std::string("CMD sees the host's /proc: its PID namespace's own could not be mounted: ") +
                            std::strerror(first.value));
      continue;
    }
    s.joined_cgroup = false;
    s.out.boundary_note = "CMD could not join " + s.cgroup.name() + ": " + std::strerror(first.value);
    s.out.namespace_note = "the anchor had started outside one, for the cgroup";
  }
  if (s.joined_cgroup) {
    s.out.cgroup = s.cgroup.name();
  } else if (s.cgroup.active()) {
    static_cast<void>(s.cgroup.remove(0));
  }
  if (got && (first.kind == msg_exec_failed || first.kind == msg_setup_failed)) {
    s.out.how = run_outcome::end::not_started;
    s.out.exec_error = first.value;
    if (first.kind == msg_setup_failed) {  // ours, not CMD's: the status of gpuguard's own failures
      s.out.setup_failed = true;
      s.out.exit_status = 1;
    } else {
      s.out.exit_status = (first.value == ENOENT || first.value == ENOTDIR) ? 127 : 126;
    }
    static_cast<void>(tell_anchor_to_exit(s.control.get()));
    s.control.reset();
    reap_anchor(s);
    if (s.joined_cgroup) { static_cast<void>(s.cgroup.remove(1000)); }
    s.out.duration_ns = elapsed_ns(s.start);
    return job_start::not_started;
  }
  if (got && first.kind == msg_started) {
    s.command = first.value;
    if (s.space.pid) {  // the anchor spoke of its namespace's PID: ours is that of its child
      s.command = outer_pid_of_child(s.anchor, first.value);
      static_cast<void>(tell_anchor(s.control.get(), 'a'));
      if (s.command <= 0) { s.out.notes.push_back("CMD's PID outside its namespace could not be found in /proc"); }
    }
    s.out.command_pid = s.command;
    return job_start::started;
  }
  reap_anchor(s);
  s.out.notes.push_back("the anchor process ended before CMD started (status " + std::to_string(s.anchor_status) + ")");
  return job_start::anchor_gone;
}

// A signal to the supervisor goes on to CMD's process group (to CMD alone if the group is gone).
void forward(supervisor_state& s, int signal) {
  ++s.out.forwarded[static_cast<std::size_t>(signal)];
  if (s.command <= 0) { return; }  // never kill(0) or kill(-1)
  if (signal == SIGCONT && s.tty && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp()) {
    // We were brought back to the foreground: so is the job.
    static_cast<void>(::tcsetpgrp(STDIN_FILENO, s.command));
  }
  if (::kill(-s.command, signal) != 0 && errno == ESRCH) { static_cast<void>(::kill(s.command, signal)); }
}

// CMD's group was stopped by a job-control signal (Ctrl-Z, reading the terminal in the background,
// or its own kill -TSTP). Where that means something (job_control_stop_works), stop our job too,
// as a shell's job would stop: the shell sees it stopped and takes the terminal back, and when it
// continues us the SIGCONT goes on to CMD (forward). Anywhere else (a script, a CI step: no
// terminal, or nobody who could continue the job) stopping our process group would stop our
// caller's processes, and CMD would wait for ever: CMD is continued instead, as the kernel discards
// these signals for such a job.
void relay_stop(const supervisor_state& s, int signal) {
  if ((signal != SIGTSTP && signal != SIGTTIN && signal != SIGTTOU) || s.command <= 0) { return; }
  if (s.tty && job_control_stop_works()) {
    if (::tcgetpgrp(STDIN_FILENO) == s.command) { static_cast<void>(::tcsetpgrp(STDIN_FILENO, ::getpgrp())); }
    static_cast<void>(::kill(0, signal));
    return;
  }
  write_stderr(std::string("[gpuguard run] CMD was stopped by ") + detail::signal_text(signal) +
               ", but no terminal job control can resume it: continuing it\n");
  if (::kill(-s.command, SIGCONT) != 0 && errno == ESRCH) { static_cast<void>(::kill(s.command, SIGCONT)); }
}

// One message of the anchor while CMD runs. True when CMD has ended, or the anchor is gone (CMD
// died with it: its death signal, or is dying).
bool take_message(supervisor_state& s) {
  message m{0, 0};
  if (!read_message(s.messages.get(), m)) {
    reap_anchor(s);
    s.out.notes.push_back("the anchor process (pid " + std::to_string(s.anchor) + ") was ended by " +
                          (WIFSIGNALED(s.anchor_status) ? detail::signal_text(WTERMSIG(s.anchor_status))
                                                        : "exit status " + std::to_string(shell_status(s.anchor_status))) +
                          " while CMD ran; CMD got its death signal (SIGKILL)");
    return true;
  }
  if (m.kind == msg_ended) {
    s.status_known = true;
    s.command_status = m.value;
    return true;
  }
  if (m.kind == msg_stopped) { relay_stop(s, m.value); }
  return false;
}

// While CMD runs: forward signals to its group, reap, and relay stops, until it ends. Then takes
// the terminal back, so that a second Ctrl-C during the grace period reaches us.
void forward_until_command_ends(supervisor_state& s) {
  for (bool ended = false; !ended;) {
    pollfd fds[2] = {{s.signals.get(), POLLIN, 0}, {s.messages.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) { continue; }
      throw_errno("poll");
    }
    if ((fds[0].revents & POLLIN) != 0) {
      drain_signals(s.signals.get(), [&s](int signal) {
        if (signal != SIGCHLD) { forward(s, signal); }
      });
      reap(s);
    }
    if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) { ended = take_message(s); }
  }
}

// Where CMD ended: its duration, and the terminal back from its group.
void note_command_end(supervisor_state& s) {
  s.out.duration_ns = elapsed_ns(s.start);
  if (s.tty && s.command > 0 && ::tcgetpgrp(STDIN_FILENO) == s.command) {
    static_cast<void>(::tcsetpgrp(STDIN_FILENO, ::getpgrp()));
  }
}

// The subreaper's proof (teardown_params::job_has_processes): asks the anchor whether it has a
// live child; once the anchor is gone, the orphans come to us, and we look at our own children.
// True (something may be left) when the anchor does not answer within a second.
bool job_has_processes(supervisor_state& s) {
  reap(s);
  if (s.anchor_alive && tell_anchor(s.control.get(), 'q')) {
    const steady::time_point deadline = steady::now() + std::chrono::seconds(1);
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
      if (left <= 0 || !wait_readable(s.messages.get(), static_cast<int>(left))) { return true; }
      message m{0, 0};
      if (!read_message(s.messages.get(), m)) { break; }  // the anchor is gone
      if (m.kind == msg_children) { return m.value != 0; }
    }
    reap_anchor(s);
  }
  return live_child_remains([&s] { reap(s); });
}

// The job's PID namespace ends with its PID 1, the anchor: SIGKILL to it, then a wait for it to
// be reaped (teardown_params::end_namespace).
bool end_namespace(supervisor_state& s, std::int64_t timeout_ms) {
  reap(s);
  if (s.anchor_alive) { static_cast<void>(::kill(s.anchor, SIGKILL)); }  // not reaped: its PID is still ours
  const steady::time_point deadline = steady::now() + std::chrono::milliseconds(timeout_ms);
  while (s.anchor_alive && steady::now() < deadline) {
    if (wait_readable(s.signals.get(), 20)) { drain_signals(s.signals.get(), [](int) {}); }
    reap(s);
  }
  return !s.anchor_alive;
}

// Ends what CMD left behind, looking first at who holds a device; then looks again at any process
// that could not be ended, and, with --require-clean, waits for the GPU to be clean.
void end_job(supervisor_state& s) {
  teardown_params params;
  params.root = s.out.supervisor_pid;
  params.spare = s.anchor_alive ? s.anchor : 0;
  params.job_group = s.command;
  params.grace_ms = s.config.grace_ms;
  params.signal_fd = s.signals.get();
  params.cgroup = s.joined_cgroup ? &s.cgroup : nullptr;
  params.job_has_processes = [&s] { return job_has_processes(s); };
  if (s.space.pid) {
    params.end_namespace = [&s](std::int64_t timeout_ms) { return end_namespace(s, timeout_ms); };
    if (s.anchor_pidfd.valid()) {
      // Sent once: the anchor stays a zombie until reaped, and a signal to a zombie succeeds.
      params.kill_namespace = [&s] {
        bool sent = false;
        if (s.namespace_killed.compare_exchange_strong(sent, true) &&
            ::syscall(SYS_pidfd_send_signal, s.anchor_pidfd.get(), SIGKILL, nullptr, 0) != 0) {
          s.namespace_killed = false;
          return false;
        }
        return true;
      };
      params.namespace_killed = [&s] { return s.namespace_killed.load(); };
    }
  }
  const util::nvml_library* nvml = s.config.require_clean ? &s.nvml : nullptr;
  reap(s);
  // However slow the residue check and the scans are (a job that keeps every CPU busy), cgroup.kill
  // comes at the latest this long after CMD's end.
  std::atomic<bool> hard_killed{false};
  const boundary_kill_timer at_the_latest(params,
                                          steady::now() + std::chrono::milliseconds(s.config.grace_ms + hard_kill_slack_ms),
                                          [&params, &hard_killed] { hard_killed = kill_boundary_ending_processes(params); });
  s.out.at_end = check_devices(job_processes(params), s.config.device_prefix, nvml);
  s.out.teardown = end_leftovers(params, [&s] { reap(s); });
  if (hard_killed) {
    // It ended processes of the job before any scan could name them: the job did outlive CMD.
    (params.cgroup != nullptr ? s.out.teardown.unseen_ended_by_cgroup_kill : s.out.teardown.unseen_ended_by_namespace_end) = true;
    s.out.notes.push_back(std::string(params.cgroup != nullptr ? "cgroup.kill" : "the end of the job's PID namespace") + " came " +
                          detail::format_duration((s.config.grace_ms + hard_kill_slack_ms) * 1000000) +
                          " after CMD's end, before the scans were done (a job that keeps every CPU busy slows them)");
  }
  std::vector<proc_stat> survivors;
  for (const leftover& l : s.out.teardown.leftovers) {
    if (l.ended) { continue; }
    if (auto now = read_stat("/proc", l.process.pid); now && now->start_time == l.process.start_time) {
      survivors.push_back(*now);
    }
  }
  if (!survivors.empty()) { s.out.after_teardown = check_devices(survivors, s.config.device_prefix, nvml); }
  if (s.config.require_clean) {
    std::vector<int> job_pids;
    if (s.command > 0) { job_pids.push_back(s.command); }
    for (const leftover& l : s.out.teardown.leftovers) { job_pids.push_back(l.process.pid); }
    s.out.clean = check_clean(s.config, s.nvml, s.nvml_note, s.before, job_pids, params);
  }
}

// Lets the anchor go (SIGKILL after 2 s), collects it and every other child, removes the cgroup.
void release_anchor(supervisor_state& s) {
  if (s.anchor_alive) {
    static_cast<void>(tell_anchor_to_exit(s.control.get()));
    s.control.reset();
    const steady::time_point deadline = steady::now() + std::chrono::seconds(2);
    while (s.anchor_alive && steady::now() < deadline) {
      if (wait_readable(s.signals.get(), 20)) { drain_signals(s.signals.get(), [](int) {}); }
      reap(s);
    }
    if (s.anchor_alive) {
      static_cast<void>(::kill(s.anchor, SIGKILL));
      reap_anchor(s);
    }
  }
  reap(s);
  if (s.joined_cgroup && !s.cgroup.remove(1000)) {
    s.out.notes.push_back("the job's cgroup " + s.cgroup.name() + " could not be removed: " + std::strerror(errno));
  }
}

// How CMD ended, and what `gpuguard run` exits with.
void record_status(supervisor_state& s) {
  run_outcome& out = s.out;
  if (s.status_known) {
    if (WIFEXITED(s.command_status)) {
      out.how = run_outcome::end::exited;
      out.code = WEXITSTATUS(s.command_status);
    } else if (WIFSIGNALED(s.command_status)) {
      out.how = run_outcome::end::signaled;
      out.code = WTERMSIG(s.command_status);
    }
    out.exit_status = shell_status(s.command_status);
  } else {
    out.how = run_outcome::end::unknown;
    out.exit_status = 1;
  }
  if (out.clean.required && !out.clean.clean) { out.exit_status = exit_not_clean; }
  const bool survivor = std::any_of(out.teardown.leftovers.begin(), out.teardown.leftovers.end(),
                                    [](const leftover& l) { return !l.ended; });
  if (!out.teardown.job_empty || survivor) { out.exit_status = exit_not_ended; }
}

}  // namespace

run_outcome supervise(const run_config& config) {
  run_outcome out;
  out.supervisor_pid = ::getpid();
  out.start_unix_ns = unix_now_ns();
  supervisor_state s(config, out);
  become_subreaper(s);  // signals through signalfd; orphans of the job come back to us
  make_postmortem_region(s);
  prepare_command(s);
  isolate(s);
  count_oom_kills_before(s);
  try {
    spawn_anchor(s);  // the anchor starts CMD
  } catch (...) {
    static_cast<void>(s.cgroup.remove(0));  // nothing joined it
    throw;
  }
  measure_gpu_before(s);
  const job_start started = await_start(s);
  if (started == job_start::not_started) { return out; }
  if (started == job_start::started) {
    confirm_oom_counter(s);
    forward_until_command_ends(s);
  }
  note_command_end(s);
  end_job(s);
  if (s.memory.found()) { s.oom_after = read_oom_kills(s.memory); }  // before the job's cgroup is removed
  release_anchor(s);
  record_status(s);
  collect_postmortems(s);
  return out;
}

}  // namespace gpuguard::cli
