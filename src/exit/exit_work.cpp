// The end-of-run work as the exit paths see it (exit_paths.hpp): handed over when the library
// loads, registered with on_exit, and run once by whichever path gets there first.
#include "exit/exit_paths.hpp"
#include "util/process_identity.hpp"

#include <atomic>

#include <stdlib.h>

namespace gpuguard::detail {

namespace {

std::atomic<end_of_run_work> handed_work{nullptr};
std::atomic<quick_exit_work> handed_quick_work{nullptr};
std::atomic<bool> work_started{false};

// on_exit, not atexit: the handler learns the status the process is ending with, which the
// cleanup_timeout watchdog keeps if it has to end the process itself. Both lists are one in
// glibc, so the order rule of register_exit_report holds.
void exit_handler(int status, void* /*unused*/) { end_run("exit", true, 0, status); }

// quick_exit runs no atexit work: only what is registered with at_quick_exit. The outputs'
// buffered lines are flushed (the handed work) and an unused crash file is removed; cleanups, the
// leak report and the outputs' end lines are left out, as quick_exit means.
void quick_exit_handler() {
  if (in_copied_process() || work_started.load(std::memory_order_acquire)) { return; }
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
  if (work_started.exchange(true)) { return; }
  if (const end_of_run_work work = handed_work.load(std::memory_order_acquire)) {
    work(reason, normal_exit, end_signal, exit_status);
  }
}

bool run_finished() noexcept { return work_started.load(std::memory_order_acquire); }

void register_exit_report() noexcept {
  if (!work_started.load(std::memory_order_relaxed)) { static_cast<void>(::on_exit(exit_handler, nullptr)); }
  static const bool quick = ::at_quick_exit(quick_exit_handler) == 0;
  static_cast<void>(quick);
}

}  // namespace gpuguard::detail
