// The names of signals ("SIGSEGV"), in one table that a signal handler may read: the crash
// record and the exit hooks name the signal that ended a process, `gpuguard run` names the
// signals it forwarded and the one that ended CMD. Internal to gpuguard.
#pragma once

#include <string>

namespace gpuguard::detail {

/// The name of signal `sig` as <signal.h> spells it ("SIGTERM"), from a static table: no
/// allocation, no lock, no locale, so it is async-signal-safe and may be called in a handler.
/// Where a signal has two names, the one Python's `signal.Signals` and `kill -l` use (SIGABRT,
/// not SIGIOT; SIGIO, not SIGPOLL; SIGCHLD). Returns `unknown` for a number with no fixed name:
/// 0, a negative number, a real-time signal (SIGRTMIN..SIGRTMAX), anything above them.
/// A handler passes a fixed fallback: `signal_name(sig, "signal")`.
const char* signal_name(int sig, const char* unknown = nullptr) noexcept;

/// signal_name(sig), or "SIG" and the number for a signal without a name ("SIG42"), for
/// messages and reports written outside signal handlers. Throws only std::bad_alloc.
std::string signal_text(int sig);

}  // namespace gpuguard::detail
