// The end-of-run work as the exit paths see it (exit_paths.hpp): handed over when the library
// loads, registered with on_exit, and run once by whichever path gets there first. The path that
// claims it also decides how the process ends; a path that comes second (exit() on one thread
// while a SIGTERM's cleanups run on the watcher, or a SIGTERM while exit() runs the work) leaves
// the work to the first and makes sure the process still ends the way the first path and the
// signal say, never half-way through the work and never by exit's status when a signal came.
#include "exit/exit_paths.hpp"
#include "util/process_identity.hpp"

#include <atomic>
#include <cstdio>

#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace gpuguard::detail {

namespace {

std::atomic<end_of_run_work> handed_work{nullptr};
std::atomic<quick_exit_work> handed_quick_work{nullptr};

// Who claimed the end of the run: `unclaimed`, or the signal the claiming path ends the process
// by (0: an exit path, which ends with a status). Set once.
constexpr int unclaimed = -1;
std::atomic<int> end_claim{unclaimed};
// The thread running the work (0 until the claim is made): the same thread coming back (exit()
// from a cleanup, a second on_exit registration of the handler) must not wait for itself.
std::atomic<pid_t> end_thread{0};

// A termination signal handed to an exit path that is running the work: 0 none yet, a signal
// number, or `handover_closed` once the exit path has finished the work and looked.
constexpr int handover_closed = -1;
std::atomic<int> handed_signal{0};

static_assert(std::atomic<int>::is_always_lock_free, "the signal handler hands its signal over through it");

pid_t this_thread() noexcept { return static_cast<pid_t>(::syscall(SYS_gettid)); }

// For a thread that must not go on: the path that owns the end of the run ends the process (and
// its cleanup_timeout watchdog ends it if the work hangs).
[[noreturn]] void wait_for_the_end() noexcept {
  for (;;) { ::pause(); }
}

// end_run's caller came second: another path claimed the end of the run, `owner_signal` says how
// that path ends the process. Returns only where the caller may go on.
void join_running_end(int owner_signal, int end_signal) noexcept {
  if (end_thread.load(std::memory_order_acquire) == this_thread()) { return; }  // under way below us
  if (owner_signal != 0) {
    // A signal's path (SIGTERM's watcher, an uncaught exception) owns the end: an exit() called
    // meanwhile must not run the rest of exit (statics destroyed, status 0) under its cleanups.
    wait_for_the_end();
  }
  if (end_signal != 0) {
    // An exit path owns it and this path ends by a signal: hand the signal over, so the process
    // ends by it once the work is done. Too late (the work is done): the caller ends it now.
    if (hand_signal_to_exit(end_signal)) { wait_for_the_end(); }
    return;
  }
  // Two exit paths (run_exit_report on one thread, exit() on another): this one goes on once the
  // work is done.
  const timespec tick{0, 1000000};
  while (handed_signal.load(std::memory_order_acquire) != handover_closed) { ::nanosleep(&tick, nullptr); }
}

// on_exit, not atexit: the handler learns the status the process is ending with, which the
// cleanup_timeout watchdog keeps if it has to end the process itself. Both lists are one in
// glibc, so the order rule of register_exit_report holds.
void exit_handler(int status, void* /*unused*/) { end_run("exit", true, 0, status); }

// quick_exit runs no atexit work: only what is registered with at_quick_exit. The outputs'
// buffered lines are flushed (the handed work) and an unused crash file is removed; cleanups, the
// leak report and the outputs' end lines are left out, as quick_exit means.
void quick_exit_handler() {
  if (in_copied_process() || run_finished()) { return; }
  if (const quick_exit_work work = handed_quick_work.load(std::memory_order_acquire)) { work(); }
  discard_unused_crash_file();
}

}  // namespace

void hand_end_of_run(end_of_run_work work) noexcept { handed_work.store(work, std::memory_order_release); }

void hand_quick_exit(quick_exit_work work) noexcept { handed_quick_work.store(work, std::memory_order_release); }

void end_run(const char* reason, bool normal_exit, int end_signal, int exit_status) noexcept {
  // A copy of another process's state (a child of _Fork, syscall(SYS_fork), clone): none of the
  // work is this process's, and the parent's writer thread it would join does not exist here.
  if (in_copied_process()) { return; }
  int owner = unclaimed;
  if (!end_claim.compare_exchange_strong(owner, end_signal, std::memory_order_acq_rel)) {
    join_running_end(owner, end_signal);
    return;
  }
  end_thread.store(this_thread(), std::memory_order_release);
  if (const end_of_run_work work = handed_work.load(std::memory_order_acquire)) {
    work(reason, normal_exit, end_signal, exit_status);
  }
  if (end_signal == 0) { end_by_handed_signal(); }
}

bool hand_signal_to_exit(int sig) noexcept {
  if (end_claim.load(std::memory_order_acquire) != 0) { return false; }  // unclaimed, or a signal's path
  int none = 0;
  // A signal handed over before this one wins: the process ends by the first.
  return handed_signal.compare_exchange_strong(none, sig, std::memory_order_acq_rel) || none > 0;
}

int handed_over_signal() noexcept {
  const int sig = handed_signal.load(std::memory_order_acquire);
  return sig > 0 ? sig : 0;
}

void end_by_handed_signal() noexcept {
  const int sig = handed_signal.exchange(handover_closed, std::memory_order_acq_rel);
  if (sig <= 0) { return; }
  std::fflush(nullptr);
  discard_unused_crash_file();
  die_by_signal(sig);
}

bool run_finished() noexcept { return end_claim.load(std::memory_order_acquire) != unclaimed; }

void register_exit_report() noexcept {
  if (!run_finished()) { static_cast<void>(::on_exit(exit_handler, nullptr)); }
  static const bool quick = ::at_quick_exit(quick_exit_handler) == 0;
  static_cast<void>(quick);
}

}  // namespace gpuguard::detail
