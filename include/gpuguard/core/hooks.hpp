/**
 * @file hooks.hpp
 * @brief The exit paths: whatever way the process ends, registered cleanups run once, what was
 *        live is written down, and the exit status stays the one the process would have had.
 *        Needs the compiled core. Behaviour per path: docs/hooks.md.
 *
 * - normal exit: an atexit handler registered after the CUDA runtime initialised, so it runs
 *   before the runtime's teardown: cleanups, leak report, outputs' end lines.
 * - std::terminate (an uncaught exception): the exception's type and what() and the live memory
 *   are logged, the same work as at exit is done, then the previous terminate handler (which
 *   aborts).
 * - SIGINT, SIGTERM, SIGHUP, SIGQUIT: the handler only writes the signal's number to a pipe; a
 *   watcher thread does the work, restores the previous disposition and raises the signal again,
 *   so the parent sees death by it. A second signal meanwhile ends the process at once. A signal
 *   the program already handles (or ignores) is left to it.
 * - SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT: on an alternate stack, async-signal-safe work only:
 *   a crash record (signal, fault address, raw frames, live bytes per device, top live sites,
 *   the executable mappings) written to `crash_file` and stderr; then the previous handler, then
 *   the default action (core dump, status). A 3 s watchdog ends a handler that hangs.
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/core/options.hpp>

namespace gpuguard {

/**
 * Installs the exit paths above that `opts.hooks` asks for (all by default) and opens
 * `opts.crash_file`. Handlers found in place are kept and chained. Installing again changes
 * nothing (the first options stay). `enable_tracking()` calls it. A crash file that cannot be
 * opened is reported on stderr, and the record then goes to stderr alone. Never throws.
 */
GPUGUARD_API void install_hooks(const options& opts = process_options()) noexcept;

/// Puts back every handler that install_hooks replaced and stops the watcher thread.
GPUGUARD_API void uninstall_hooks() noexcept;

[[nodiscard]] GPUGUARD_API bool hooks_installed() noexcept;

}  // namespace gpuguard
