// The end of a tracked run, in the one order that holds for every exit path: cleanups first (what
// they free is then not reported as leaked), then spawned children, then the leak report, then
// the outputs' last lines, under a watchdog. Handed to the exit paths (exit/exit_paths.hpp) when
// the library loads; they run it once, whichever gets there first.
#include <gpuguard/core/cleanup.hpp>
#include <gpuguard/core/outputs.hpp>
#include <gpuguard/core/tracking.hpp>

#include "exit/exit_paths.hpp"
#include "ledger/postmortem.hpp"
#include "lifecycle/lifecycle.hpp"
#include "process/child_groups.hpp"
#include "outputs/outputs_internal.hpp"
#include "util/process_identity.hpp"
#include "util/quiet_thread.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include <stdlib.h>
#include <unistd.h>

namespace gpuguard {

void run_exit_report(int exit_status) noexcept { detail::end_run("exit", true, 0, exit_status); }

namespace {

// Ends the process when the end of the run (cleanups, children, report) takes longer than
// cleanup_timeout: one stuck cleanup must not keep the process, and its GPU memory, alive for
// ever. It says which cleanup was running, then ends the process as it was going to end: by the
// signal, or with the exit status. It writes with write(2) and ends with _exit: the stuck thread
// may hold stdio's locks.
class exit_watchdog {
 public:
  exit_watchdog(std::uint32_t seconds, int end_signal, int exit_status) noexcept {
    if (seconds == 0) { return; }
    try {
      thread_ = detail::start_quiet_thread([this, seconds, end_signal, exit_status] {
        watch(seconds, end_signal, exit_status);
      });
    } catch (...) {  // NOLINT(bugprone-empty-catch): no thread, no watchdog; the exit goes on
    }
  }
  exit_watchdog(const exit_watchdog&) = delete;
  exit_watchdog& operator=(const exit_watchdog&) = delete;
  exit_watchdog(exit_watchdog&&) = delete;
  exit_watchdog& operator=(exit_watchdog&&) = delete;
  ~exit_watchdog() {
    if (thread_ == nullptr) { return; }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_->join();
    delete thread_;
  }

 private:
  void watch(std::uint32_t seconds, int end_signal, int exit_status) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) { return; }
    }
    // exit()'s work that a termination signal came into ends by that signal (exit_paths.hpp).
    if (end_signal == 0) { end_signal = detail::handed_over_signal(); }
    char name[128];
    detail::running_cleanup_name(name, sizeof name);
    const int status = exit_status >= 0 ? (exit_status & 0xFF) : EXIT_FAILURE;
    char ending[64];
    if (end_signal != 0) {
      std::snprintf(ending, sizeof ending, "by signal %d", end_signal);
    } else {
      std::snprintf(ending, sizeof ending, "with status %d", status);
    }
    char message[384];
    int length = 0;
    if (name[0] != '\0') {
      length = std::snprintf(message, sizeof message, "[gpuguard] cleanup '%s' did not finish within "
                             "cleanup_timeout=%u s: ending the process %s\n", name, seconds, ending);
    } else {
      length = std::snprintf(message, sizeof message, "[gpuguard] the exit work (cleanups, leak report, "
                             "outputs) did not finish within cleanup_timeout=%u s: ending the process %s\n",
                             seconds, ending);
    }
    if (length > 0) {
      ssize_t ignored = ::write(STDERR_FILENO, message, std::min<std::size_t>(static_cast<std::size_t>(length), sizeof message - 1));
      static_cast<void>(ignored);
    }
    detail::discard_unused_crash_file();
    if (end_signal != 0) { detail::die_by_signal(end_signal); }
    ::_exit(status);
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread* thread_ = nullptr;
};

}  // namespace

void detail::finish_run(const char* reason, bool normal_exit, int end_signal, int exit_status) noexcept {
  bool enabled = false;
  options opts;
  try {
    enabled = detail::reporting_options(opts);
    if (!enabled) { opts = process_options(); }
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: the defaults do
  }
  // In a child made by fork() only its own cleanups and children are left (the parent's were
  // forgotten at the fork), and the leak report is the parent's: a forked worker that exits must
  // not print it again, nor rewrite leak_json, nor end with leak_exitcode.
  const bool report_leaks = enabled && !detail::in_forked_child();
  const exit_watchdog watchdog(opts.cleanup_timeout, end_signal, exit_status);
  // The exit path reports for itself: `gpuguard run` writes no post-mortem for this process. Closed
  // first, so that what the report frees below is not read as a death half-way.
  detail::postmortem::close_part();
  // Cleanups first: what they free is then not reported as leaked.
  run_cleanups(reason);
  detail::end_child_groups(2000);
  if (normal_exit) { detail::discard_unused_crash_file(); }
  try {
    // Scopes alone (no tracking) still get their log's end lines, but no leak report on stderr.
    if (!report_leaks && !outputs_running()) { return; }
    std::fflush(stdout);  // the program's own output first, then the report
    const leak_report report = collect_leaks(opts.leak_sites);
    detail::stop_outputs_with(reason, &report);
    if (!report_leaks) { return; }
    if (opts.leak_report) { write_leak_text(stderr, report, opts.leak_sites); }
    if (!opts.leak_json.empty()) {
      std::string error;
      if (!write_leak_json(opts.leak_json, report, &error)) {
        std::fprintf(stderr, "[gpuguard] leak_json: %s\n", error.c_str());
      }
    }
    if (normal_exit && report.count != 0 && opts.leak_exitcode != 0) {
      detail::end_by_handed_signal();  // a SIGTERM that came during exit's work wins over the leak status
      std::fflush(nullptr);
      ::_exit(opts.leak_exitcode);
    }
  } catch (...) {
    std::fputs("[gpuguard] the exit report failed (out of memory?)\n", stderr);
  }
}

namespace {

// What quick_exit runs: the outputs' buffered lines reach their files (bounded: a writer stuck on
// a full disk does not keep the process). No cleanups, no leak report, no end lines: quick_exit
// is the program's way of leaving without its exit work.
void flush_at_quick_exit() noexcept {
  if (outputs_running()) { static_cast<void>(flush_outputs(std::chrono::seconds(2))); }
}

// The end of the run goes to the exit paths as the library loads, before any of them can run.
const bool end_of_run_handed = [] {
  detail::hand_end_of_run(detail::finish_run);
  detail::hand_quick_exit(flush_at_quick_exit);
  return true;
}();

}  // namespace

}  // namespace gpuguard
