// The exit paths: std::terminate, termination signals (a pipe and a watcher thread), and fatal
// signals (an async-signal-safe crash record on an alternate stack). docs/hooks.md says what each
// does; the rules here are the ones signal handlers must keep:
//  - a termination-signal handler only writes one byte to a pipe (or, on a second signal,
//    restores the default action and raises the signal again; or, while exit() runs the end of
//    the run, hands the signal to it through an atomic and says so with write(2));
//  - the crash handler calls only async-signal-safe functions: no malloc, no locks it could wait
//    on, no stdio, no CUDA. It formats into a buffer on its stack and writes with write(2);
//  - in a process whose state is a copy of another's (util/process_identity.hpp) the pipe, the
//    crash file and the event log are the parent's: both handlers write nothing there and end
//    the process by the signal's default action.
#include <gpuguard/core/hooks.hpp>

#include <gpuguard/core/cleanup.hpp>
#include <gpuguard/core/ledger.hpp>

#include "exit/exit_paths.hpp"
#include "process/child_groups.hpp"
#include "util/kept_for_process.hpp"
#include "util/process_identity.hpp"
#include "ledger/ledger_internal.hpp"
#include "ledger/stacks.hpp"
#include "util/file.hpp"
#include "util/format.hpp"
#include "util/quiet_thread.hpp"
#include "util/signal_name.hpp"

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cxxabi.h>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

/// The OS id of the thread inside the crash handler while it writes its record (0 otherwise): a
/// test build traps malloc on that thread while it is set.
extern "C" GPUGUARD_API volatile std::sig_atomic_t gpuguard_crash_handler_active;
volatile std::sig_atomic_t gpuguard_crash_handler_active = 0;

namespace gpuguard {

namespace {

constexpr int termination_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int signal_slots = 65;
constexpr unsigned watchdog_seconds = 3;

// What the handlers read. Each entry is written only while no handler of ours is installed for
// that signal (sigaction itself orders the write before the handler can run).
std::array<struct sigaction, signal_slots> previous_actions{};
std::array<std::atomic<bool>, signal_slots> installed_for{};

std::atomic<int> pipe_write_fd{-1};
std::atomic<bool> termination_started{false};
std::atomic<pid_t> crash_thread{0};
std::atomic<int> crash_signal{0};
std::atomic<int> crash_fd{-1};
// The crash file's path as the handler prints it (points into hook_state::crash_path, set once).
std::atomic<const char*> crash_path_text{nullptr};
// The JSONL event log's descriptor: the handler appends one `crash` line to it.
std::atomic<int> event_log_fd{-1};
// The thread that calls abort() at the end of the terminate path (0: none): its SIGABRT is that
// path's own end, already reported, not a crash.
std::atomic<pid_t> terminate_thread{0};

struct hook_state {
  std::mutex mutex;
  bool installed = false;
  std::terminate_handler previous_terminate = nullptr;
  int pipe_read_fd = -1;
  std::thread* watcher = nullptr;
  std::string crash_path;
};

hook_state& hooks() {
  static auto* s = new hook_state();  // exit paths use it after ordinary statics are gone
  return *s;
}

// ---- async-signal-safe helpers -----------------------------------------------------------------

void restore_previous(int sig) noexcept {
  static_cast<void>(::sigaction(sig, &previous_actions[static_cast<std::size_t>(sig)], nullptr));
}

void set_default(int sig) noexcept {
  struct sigaction action{};
  action.sa_handler = SIG_DFL;
  ::sigemptyset(&action.sa_mask);
  static_cast<void>(::sigaction(sig, &action, nullptr));
}

// Closes the crash file and removes it if nothing was written: fstat, close and unlink are
// async-signal-safe, and the path was set once before any handler was installed.
void discard_crash_file_if_empty() noexcept {
  if (detail::in_copied_process()) { return; }  // the parent's file
  const int fd = crash_fd.exchange(-1);
  if (fd < 0) { return; }
  struct stat info{};
  const bool empty = ::fstat(fd, &info) == 0 && info.st_size == 0;
  ::close(fd);
  const char* path = crash_path_text.load(std::memory_order_relaxed);
  if (empty && path != nullptr) { ::unlink(path); }
}

// Ends the process by `sig` now, from any context: default action, unblocked, raised.
[[noreturn]] void die_by(int sig) noexcept {
  set_default(sig);
  sigset_t set;
  ::sigemptyset(&set);
  ::sigaddset(&set, sig);
  static_cast<void>(::sigprocmask(SIG_UNBLOCK, &set, nullptr));
  static_cast<void>(::raise(sig));
  ::_exit(128 + sig);  // only if the signal did not end the process
}

/// Formats into a buffer (its own, on the stack, or the caller's) and writes to one file descriptor
/// with write(2).
class signal_writer {
 public:
  explicit signal_writer(int fd) noexcept : signal_writer(fd, own_, sizeof own_) {}
  /// Gathers what is put in `buffer` (`capacity` bytes) and writes it when full or at the end: a
  /// record that fits goes out in one write().
  signal_writer(int fd, char* buffer, std::size_t capacity) noexcept : fd_(fd), buffer_(buffer), capacity_(capacity) {}
  signal_writer(const signal_writer&) = delete;
  signal_writer& operator=(const signal_writer&) = delete;
  signal_writer(signal_writer&&) = delete;
  signal_writer& operator=(signal_writer&&) = delete;
  ~signal_writer() { flush(); }

  signal_writer& put(const char* text) noexcept { return put(text, std::strlen(text)); }
  signal_writer& put(const char* text, std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      if (used_ == capacity_) { flush(); }
      buffer_[used_++] = text[i];
    }
    return *this;
  }
  signal_writer& dec(std::uint64_t value) noexcept {
    char digits[24];
    std::size_t n = 0;
    do {
      digits[n++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value != 0);
    while (n > 0) { put(&digits[--n], 1); }
    return *this;
  }
  signal_writer& sdec(std::int64_t value) noexcept {
    if (value < 0) {
      put("-");
      return dec(static_cast<std::uint64_t>(-(value + 1)) + 1);
    }
    return dec(static_cast<std::uint64_t>(value));
  }
  signal_writer& hex(std::uint64_t value) noexcept {
    static constexpr char digits[] = "0123456789abcdef";
    char text[18];
    std::size_t n = 0;
    do {
      text[n++] = digits[value & 0xF];
      value >>= 4;
    } while (value != 0);
    put("0x");
    while (n > 0) { put(&text[--n], 1); }
    return *this;
  }
  /// A JSON string body: quotes, backslashes and control bytes escaped.
  signal_writer& json_text(const char* text, std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c == '"' || c == '\\') {
        const char escaped[2] = {'\\', static_cast<char>(c)};
        put(escaped, 2);
      } else if (c < 0x20) {
        put(" ");
      } else {
        put(&text[i], 1);
      }
    }
    return *this;
  }
  void flush() noexcept {
    if (fd_ >= 0) { static_cast<void>(detail::write_all(fd_, buffer_, used_)); }
    used_ = 0;
  }

 private:
  int fd_;
  char own_[512];
  char* buffer_;
  std::size_t capacity_;
  std::size_t used_ = 0;
};

struct crash_facts {
  int sig = 0;
  int code = 0;
  std::uintptr_t address = 0;
  pid_t thread = 0;
  std::array<void*, detail::max_stack_depth + 1> frames{};
  std::size_t frame_count = 0;
  std::array<detail::crash_site, 64> sites{};
  std::size_t site_count = 0;
  bool sites_complete = true;
};

// The crash context is large: it lives in static storage, not on the alternate stack. Only the
// thread that won `crash_thread` touches it.
crash_facts facts;

void gather(int sig, const siginfo_t* info, const void* context) noexcept {
  facts.sig = sig;
  facts.code = info != nullptr ? info->si_code : 0;
  facts.address = info != nullptr ? reinterpret_cast<std::uintptr_t>(info->si_addr) : 0;
  facts.thread = static_cast<pid_t>(::syscall(SYS_gettid));
  std::size_t n = 0;
#if defined(__x86_64__)
  if (context != nullptr) {
    const auto* uc = static_cast<const ucontext_t*>(context);
    // The instruction that faulted: the frames below start inside this handler.
    facts.frames[n++] = reinterpret_cast<void*>(static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]));  // NOLINT(performance-no-int-to-ptr)
  }
#else
  static_cast<void>(context);
#endif
  n += detail::capture_frames(facts.frames.data() + n, detail::max_stack_depth);
  facts.frame_count = n;
  facts.site_count = detail::crash_scan(facts.sites.data(), facts.sites.size(), facts.sites_complete);
  // Largest first (insertion sort: no allocation).
  for (std::size_t i = 1; i < facts.site_count; ++i) {
    const detail::crash_site moving = facts.sites[i];
    std::size_t j = i;
    while (j > 0 && facts.sites[j - 1].bytes < moving.bytes) {
      facts.sites[j] = facts.sites[j - 1];
      --j;
    }
    facts.sites[j] = moving;
  }
}

void write_human(int fd) noexcept {
  signal_writer out(fd);
  out.put("[gpuguard] CRASH: ").put(detail::signal_name(facts.sig, "signal")).put(" (code ").sdec(facts.code)
      .put(", address ").hex(facts.address).put(") in thread ").dec(static_cast<std::uint64_t>(facts.thread)).put("\n");
  for (int device = host_device_id; device < max_devices; ++device) {
    const counters c = detail::device_counters_unstopped(device);  // no lock: a crashing thread may hold one
    if (c.allocations == 0) { continue; }
    out.put("[gpuguard]   live on ");
    if (device == host_device_id) {
      out.put("host memory");
    } else {
      out.put("device ").sdec(device);
    }
    out.put(": ").dec(c.current_bytes).put(" bytes (").dec(c.current_bytes >> 20).put(" MiB) in ")
        .dec(c.live_count()).put(" allocations; peak ").dec(c.peak_bytes).put(" bytes\n");
  }
  const std::size_t shown = facts.site_count < 5 ? facts.site_count : 5;
  for (std::size_t i = 0; i < shown; ++i) {
    const detail::crash_site& s = facts.sites[i];
    out.put("[gpuguard]   live site ").dec(s.site).put(" on device ").sdec(s.device).put(": ")
        .dec(s.bytes).put(" bytes in ").dec(s.count).put(" allocations\n");
  }
  out.put("[gpuguard]   frames:");
  for (std::size_t i = 0; i < facts.frame_count; ++i) {
    out.put(" ").hex(reinterpret_cast<std::uintptr_t>(facts.frames[i]));
  }
  out.put("\n");
  const char* path = crash_path_text.load(std::memory_order_relaxed);
  if (crash_fd.load(std::memory_order_relaxed) >= 0 && path != nullptr) {
    out.put("[gpuguard]   crash record written to ").put(path).put("; resolve its frames with: gpuguard symbolize ")
        .put(path).put("\n");
  }
}

// The executable mappings, for resolving the frames later (addresses are randomised per run).
void write_mappings(signal_writer& out) noexcept {
  const int maps = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (maps < 0) { return; }
  char chunk[1024];
  char line[512];
  std::size_t length = 0;
  bool first = true;
  const auto emit = [&] {
    // "start-end perms offset dev inode path": keep executable ones.
    const char* space = static_cast<const char*>(std::memchr(line, ' ', length));
    if (space != nullptr && space + 4 < line + length && space[3] == 'x') {
      out.put(first ? "\"" : ",\"").json_text(line, length).put("\"");
      first = false;
    }
    length = 0;
  };
  for (;;) {
    const ssize_t n = ::read(maps, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) { continue; }
    if (n <= 0) { break; }
    for (ssize_t i = 0; i < n; ++i) {
      if (chunk[i] == '\n') {
        emit();
      } else if (length < sizeof line) {
        line[length++] = chunk[i];
      }
    }
  }
  if (length > 0) { emit(); }
  ::close(maps);
}

// The JSON objects of what was live at the crash, shared by the crash record and the event log's
// crash line: each device that allocated, and the `limit` largest live sites (returns how many).
void write_live_devices(signal_writer& out) noexcept {
  bool first = true;
  for (int device = host_device_id; device < max_devices; ++device) {
    const counters c = detail::device_counters_unstopped(device);  // no lock: a crashing thread may hold one
    if (c.allocations == 0) { continue; }
    out.put(first ? "{\"device\":" : ",{\"device\":").sdec(device)
        .put(",\"live_bytes\":").dec(c.current_bytes).put(",\"live_count\":").dec(c.live_count())
        .put(",\"peak_bytes\":").dec(c.peak_bytes).put("}");
    first = false;
  }
}

std::size_t write_live_sites(signal_writer& out, std::size_t limit) noexcept {
  const std::size_t shown = facts.site_count < limit ? facts.site_count : limit;
  for (std::size_t i = 0; i < shown; ++i) {
    const detail::crash_site& site = facts.sites[i];
    out.put(i == 0 ? "{\"site\":" : ",{\"site\":").dec(site.site).put(",\"device\":").sdec(site.device)
        .put(",\"bytes\":").dec(site.bytes).put(",\"count\":").dec(site.count).put("}");
  }
  return shown;
}

void write_record(int fd) noexcept {
  signal_writer out(fd);
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  out.put("{\"schema\":\"gpuguard.crash\",\"version\":1,\"pid\":").dec(static_cast<std::uint64_t>(::getpid()))
      .put(",\"thread\":").dec(static_cast<std::uint64_t>(facts.thread))
      .put(",\"unix_ns\":").dec(static_cast<std::uint64_t>(now.tv_sec) * 1000000000U + static_cast<std::uint64_t>(now.tv_nsec))
      .put(",\"signal\":").dec(static_cast<std::uint64_t>(facts.sig))
      .put(",\"signal_name\":\"").put(detail::signal_name(facts.sig, "signal"))
      .put("\",\"code\":").sdec(facts.code)
      .put(",\"address\":\"").hex(facts.address).put("\",\"frames\":[");
  for (std::size_t i = 0; i < facts.frame_count; ++i) {
    out.put(i == 0 ? "\"" : ",\"").hex(reinterpret_cast<std::uintptr_t>(facts.frames[i])).put("\"");
  }
  out.put("],\"devices\":[");
  write_live_devices(out);
  out.put("],\"sites\":[");
  const std::size_t shown = write_live_sites(out, 20);
  out.put("],\"sites_complete\":").put(facts.sites_complete && shown == facts.site_count ? "true" : "false");
  out.put(",\"mappings\":[");
  write_mappings(out);
  out.put("]}\n");
}

// The last line of the event log: what the crash was, what was live, the raw frames (the record in
// crash_file has the mappings to resolve them). The writer thread may be gone or stopped mid-run:
// the line goes straight to the log's descriptor, after whatever the writer flushed.
void write_crash_event(int fd) noexcept {
  // The whole line in one write(): the writer thread may still be writing to the same file, and a
  // write of its own between two parts of this line would break both. Static, not on the stack:
  // the handler may run on a small alternate signal stack, and only one thread ever gets here.
  static char line[32768];
  signal_writer out(fd, line, sizeof line);
  const char* path = crash_path_text.load(std::memory_order_relaxed);
  out.put("{\"v\":1,\"type\":\"crash\",\"t\":").sdec(detail::now_ns())
      .put(",\"signal\":\"").put(detail::signal_name(facts.sig, "signal"))
      .put("\",\"code\":").sdec(facts.code)
      .put(",\"address\":\"").hex(facts.address)
      .put("\",\"thread\":").dec(static_cast<std::uint64_t>(facts.thread))
      .put(",\"crash_file\":\"");
  if (path != nullptr && crash_fd.load(std::memory_order_relaxed) >= 0) { out.json_text(path, std::strlen(path)); }
  out.put("\",\"devices\":[");
  write_live_devices(out);
  out.put("],\"sites\":[");
  write_live_sites(out, 5);
  out.put("],\"frames\":[");
  for (std::size_t i = 0; i < facts.frame_count && i < 32; ++i) {
    out.put(i == 0 ? "\"" : ",\"").hex(reinterpret_cast<std::uintptr_t>(facts.frames[i])).put("\"");
  }
  out.put("]}\n");
}

void on_watchdog(int /*sig*/) {
  static constexpr char message[] = "[gpuguard] the crash handler did not finish within 3 s: ending the process\n";
  ssize_t ignored = ::write(STDERR_FILENO, message, sizeof message - 1);
  static_cast<void>(ignored);
  die_by(crash_signal.load(std::memory_order_relaxed));
}

// True for the SIGABRT that the terminate path raises itself (abort() on the thread that ran
// on_terminate, sent by this process): the exception and the end of the run are already
// reported, so it is not recorded again as a crash.
bool terminate_abort(int sig, const siginfo_t* info, pid_t me) noexcept {
  return sig == SIGABRT && info != nullptr && info->si_code <= 0 && info->si_pid == ::getpid() &&
         me == terminate_thread.load(std::memory_order_relaxed);
}

void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  if (detail::in_copied_process()) {
    // Not our process's crash to record: the default action, as if unhooked. A fault returns to
    // the faulting instruction and dies there; a sent signal is raised again.
    set_default(sig);
    if (info == nullptr || info->si_code <= 0) { static_cast<void>(::raise(sig)); }
    errno = saved_errno;
    return;
  }
  const auto me = static_cast<pid_t>(::syscall(SYS_gettid));
  pid_t owner = 0;
  if (!crash_thread.compare_exchange_strong(owner, me)) {
    if (owner == me) { die_by(crash_signal.load(std::memory_order_relaxed)); }  // a fault in here
    for (;;) { ::pause(); }  // another thread writes the one record and ends the process
  }
  crash_signal.store(sig, std::memory_order_relaxed);
  struct sigaction watchdog{};
  watchdog.sa_handler = on_watchdog;
  ::sigemptyset(&watchdog.sa_mask);
  static_cast<void>(::sigaction(SIGALRM, &watchdog, nullptr));
  ::alarm(watchdog_seconds);

  gpuguard_crash_handler_active = me;
  if (!terminate_abort(sig, info, me)) {
    gather(sig, info, context);
    write_human(STDERR_FILENO);
    const int fd = crash_fd.load(std::memory_order_relaxed);
    if (fd >= 0) { write_record(fd); }
    if (const int log = event_log_fd.load(std::memory_order_relaxed); log >= 0) { write_crash_event(log); }
  }
  detail::run_signal_safe_cleanups();
  detail::kill_child_groups();
  gpuguard_crash_handler_active = 0;

  // Chain: a handler that was there before (a sanitizer's, Python's faulthandler) runs next.
  const struct sigaction& previous = previous_actions[static_cast<std::size_t>(sig)];
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler != nullptr) {
    previous.sa_handler(sig);
  }
  // Then the default action. A fault returns to the faulting instruction and dies there, so a
  // core dump shows where it happened; a signal that was sent (kill, raise, abort) is raised again
  // and delivered when this handler returns.
  set_default(sig);
  if (info == nullptr || info->si_code <= 0) { static_cast<void>(::raise(sig)); }
  errno = saved_errno;
}

void on_termination_signal(int sig) {
  const int saved_errno = errno;
  if (detail::in_copied_process()) { die_by(sig); }  // the pipe is the parent's: act as if unhooked
  if (termination_started.exchange(true)) {
    // A second signal while the first is handled: end now, still by this signal.
    discard_crash_file_if_empty();
    die_by(sig);
  }
  if (detail::hand_signal_to_exit(sig)) {
    // exit() is running the end of the run (its cleanups may be in this very thread's stack): it
    // ends the process by this signal when that work is done, so the work is neither cut short
    // nor followed by exit's own status.
    signal_writer out(STDERR_FILENO);
    out.put("[gpuguard] ").put(detail::signal_name(sig, "signal"))
        .put(" received while the exit work runs (cleanups, report): ending by it when that is done\n");
    errno = saved_errno;
    return;
  }
  const unsigned char byte = static_cast<unsigned char>(sig);
  const int fd = pipe_write_fd.load(std::memory_order_relaxed);
  if (fd < 0 || ::write(fd, &byte, 1) != 1) {  // no watcher: act as if unhooked
    discard_crash_file_if_empty();
    die_by(sig);
  }
  errno = saved_errno;
}

// ---- the watcher thread and std::terminate -------------------------------------------------------

// The signal's end of the run: it claims the work (end_run), or finds another path running it;
// end_run returns here only when this thread may end the process by the signal (exit_paths.hpp).
void watcher_main(int read_fd) {
  for (;;) {
    unsigned char byte = 0;
    const ssize_t n = ::read(read_fd, &byte, 1);
    if (n < 0 && errno == EINTR) { continue; }
    if (n != 1 || byte == 0) { return; }  // closed by uninstall_hooks
    const int sig = byte;
    std::fprintf(stderr, "[gpuguard] %s received: running cleanups and writing the report, then ending by %s\n",
                 detail::signal_name(sig, "signal"), detail::signal_name(sig, "signal"));
    const std::string reason = std::string("signal ") + detail::signal_name(sig, "signal");
    detail::end_run(reason.c_str(), false, sig);
    std::fflush(nullptr);
    discard_crash_file_if_empty();
    restore_previous(sig);
    die_by(sig);
  }
}

std::string current_exception_text() {
  std::string type = "(none)";
  if (const std::type_info* info = abi::__cxa_current_exception_type()) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info->name(), nullptr, nullptr, &status);
    type = status == 0 && demangled != nullptr ? demangled : info->name();
    std::free(demangled);  // NOLINT(cppcoreguidelines-no-malloc): __cxa_demangle's contract
  }
  const std::exception_ptr current = std::current_exception();
  if (!current) { return "std::terminate called without an active exception"; }
  try {
    std::rethrow_exception(current);
  } catch (const std::exception& error) {
    return "uncaught exception of type " + type + ": " + error.what();
  } catch (...) {
    return "uncaught exception of type " + type;
  }
}

[[noreturn]] void on_terminate() {
  static std::atomic<bool> entered{false};
  // In a copy of another process's state the ledger, the report and the files are the parent's:
  // only the previous handler and the abort, as if unhooked.
  if (!detail::in_copied_process() && !entered.exchange(true)) {
    try {
      const std::string what = current_exception_text();
      std::fprintf(stderr, "[gpuguard] std::terminate: %s\n", what.c_str());
      for (const auto& [device, c] : snapshot(false).devices) {
        std::fprintf(stderr, "[gpuguard]   live at terminate on %s: %s in %llu allocations\n",
                     device == host_device_id ? "host memory" : ("device " + std::to_string(device)).c_str(),
                     detail::format_bytes(c.current_bytes).c_str(), static_cast<unsigned long long>(c.live_count()));
      }
    } catch (...) {  // NOLINT(bugprone-empty-catch): the exit path must go on
    }
    detail::end_run("terminate", false, SIGABRT);
    std::fflush(nullptr);
    discard_crash_file_if_empty();
    // The abort below ends this path; it is not recorded as a crash (terminate_abort).
    terminate_thread.store(static_cast<pid_t>(::syscall(SYS_gettid)), std::memory_order_relaxed);
  }
  const std::terminate_handler previous = hooks().previous_terminate;
  if (previous != nullptr && previous != on_terminate) { previous(); }
  std::abort();
}

// In a child made by fork() the watcher thread does not exist and the pipe and crash file are the
// parent's: a SIGTERM to a forked worker must not end its parent. The child gets the previous
// dispositions of the termination signals back, and crash records on stderr only.
void hooks_off_in_forked_child() noexcept {
  pipe_write_fd.store(-1, std::memory_order_relaxed);
  crash_fd.store(-1, std::memory_order_relaxed);
  event_log_fd.store(-1, std::memory_order_relaxed);  // the parent's log
  for (const int sig : termination_signals) {
    if (installed_for[static_cast<std::size_t>(sig)].exchange(false)) { restore_previous(sig); }
  }
  new (&hooks().mutex) std::mutex();  // NOLINT(cppcoreguidelines-owning-memory): a lock held at the fork stays held
  detail::kept_for_process(std::exchange(hooks().watcher, nullptr));  // the parent's thread object
  hooks().installed = false;
}

// A fresh alternate stack for the installing thread, so a stack overflow can still be reported.
alignas(16) char alternate_stack[64 * 1024];

}  // namespace

// ---- public -------------------------------------------------------------------------------------

void install_hooks(const options& opts) noexcept {
  hook_state& st = hooks();
  const std::lock_guard<std::mutex> lock(st.mutex);
  if (st.installed) { return; }
  static const bool fork_handler = ::pthread_atfork(nullptr, nullptr, hooks_off_in_forked_child) == 0;
  static_cast<void>(fork_handler);
  try {
    if (!opts.crash_file.empty()) {
      st.crash_path = detail::expand_path(opts.crash_file);
      std::string why;
      const int fd = detail::open_output_file(st.crash_path, detail::existing_file::truncate, &why);
      if (fd < 0) {
        std::fprintf(stderr, "[gpuguard] crash_file: %s; crash records go to stderr only\n", why.c_str());
        st.crash_path.clear();
      } else {
        crash_path_text.store(st.crash_path.c_str(), std::memory_order_relaxed);
      }
      crash_fd.store(fd, std::memory_order_relaxed);
    }
    // Load the unwinder now: its first use may allocate, which the crash handler must not.
    std::array<void*, 4> warm{};
    static_cast<void>(detail::capture_frames(warm.data(), warm.size()));

    stack_t current{};
    if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) != 0) {
      stack_t fresh{};
      fresh.ss_sp = alternate_stack;
      fresh.ss_size = sizeof alternate_stack;
      static_cast<void>(::sigaltstack(&fresh, nullptr));
    }

    st.previous_terminate = std::set_terminate(on_terminate);

    std::array<int, 2> fds{};
    if (::pipe2(fds.data(), O_CLOEXEC) == 0) {
      st.pipe_read_fd = fds[0];
      pipe_write_fd.store(fds[1], std::memory_order_relaxed);
      const int read_fd = fds[0];
      st.watcher = detail::start_quiet_thread([read_fd] { watcher_main(read_fd); });
      for (const int sig : termination_signals) {
        struct sigaction previous{};
        if (::sigaction(sig, nullptr, &previous) != 0) { continue; }
        // A signal the program handles or ignores is its own business: left alone.
        if ((previous.sa_flags & SA_SIGINFO) != 0 || previous.sa_handler != SIG_DFL) { continue; }
        previous_actions[static_cast<std::size_t>(sig)] = previous;
        struct sigaction action{};
        action.sa_handler = on_termination_signal;
        ::sigemptyset(&action.sa_mask);
        action.sa_flags = SA_RESTART;
        if (::sigaction(sig, &action, nullptr) == 0) { installed_for[static_cast<std::size_t>(sig)] = true; }
      }
    } else {
      std::fprintf(stderr, "[gpuguard] hooks: pipe: %s; termination signals are not hooked\n", std::strerror(errno));
    }

    for (const int sig : fatal_signals) {
      struct sigaction previous{};
      if (::sigaction(sig, nullptr, &previous) != 0) { continue; }
      previous_actions[static_cast<std::size_t>(sig)] = previous;
      struct sigaction action{};
      action.sa_sigaction = on_fatal_signal;
      ::sigemptyset(&action.sa_mask);
      action.sa_flags = SA_SIGINFO | SA_ONSTACK;
      if (::sigaction(sig, &action, nullptr) == 0) { installed_for[static_cast<std::size_t>(sig)] = true; }
    }
    st.installed = true;
    detail::register_exit_report();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "[gpuguard] hooks could not be installed: %s\n", error.what());
  }
}

void uninstall_hooks() noexcept {
  hook_state& st = hooks();
  const std::lock_guard<std::mutex> lock(st.mutex);
  if (!st.installed) { return; }
  for (std::size_t sig = 0; sig < installed_for.size(); ++sig) {
    if (installed_for[sig].exchange(false)) { restore_previous(static_cast<int>(sig)); }
  }
  if (std::get_terminate() == on_terminate) { std::set_terminate(st.previous_terminate); }
  const int write_fd = pipe_write_fd.exchange(-1);
  if (write_fd >= 0) { ::close(write_fd); }  // the watcher reads end-of-file and returns
  if (st.watcher != nullptr) {
    st.watcher->join();
    delete st.watcher;
    st.watcher = nullptr;
  }
  if (st.pipe_read_fd >= 0) {
    ::close(st.pipe_read_fd);
    st.pipe_read_fd = -1;
  }
  st.installed = false;
}

bool hooks_installed() noexcept {
  hook_state& st = hooks();
  const std::lock_guard<std::mutex> lock(st.mutex);
  return st.installed;
}

void detail::die_by_signal(int sig) noexcept { die_by(sig); }

void detail::set_event_log_fd(int fd) noexcept { event_log_fd.store(fd, std::memory_order_relaxed); }

void detail::discard_unused_crash_file() noexcept { discard_crash_file_if_empty(); }

}  // namespace gpuguard
