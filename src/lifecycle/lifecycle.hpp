// A tracked run's start and finish, as the rest of the compiled core sees them: start_run.cpp
// turns tracking (enable_tracking) or the ledger's reporting for another source
// (enable_ledger_reporting) on, and finish_run.cpp ends the run in the one order every exit path
// keeps. Internal to libgpuguard.
#pragma once

#include <gpuguard/core/options.hpp>

namespace gpuguard::detail {

/// The options that tracking or the ledger's reporting was turned on with, into `out`; false,
/// and `out` unchanged, when neither is on.
bool reporting_options(options& out);

/**
 * The end of the run: cleanups, termination of spawned children's process groups, the leak report
 * (text and JSON, when tracking is on) and the outputs' last lines, with `reason` in the log's
 * `end` line. With `normal_exit`, leak_exitcode may end the process with its status; other paths
 * keep theirs. If it takes longer than cleanup_timeout, the process ends by `end_signal` (when
 * not 0) or with `exit_status` (when not negative; else EXIT_FAILURE). In a child made by fork()
 * there is no leak report: it is the parent's. The exit paths run it once (exit/exit_paths.hpp,
 * end_run); nothing else calls it.
 */
void finish_run(const char* reason, bool normal_exit, int end_signal, int exit_status) noexcept;

}  // namespace gpuguard::detail
