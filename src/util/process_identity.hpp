// Which process the library's state belongs to. Its cleanups, spawned children, writer thread,
// pipe and files are the state of one process: the one that loaded the library, or a child made
// by fork(), whose child handlers (pthread_atfork) hand it state of its own. A child made by a
// fork-like call that runs no atfork handler (`_Fork()`, `syscall(SYS_fork)`, `clone` without
// CLONE_VM) holds a copy of its parent's state that is not its own: every exit path checks
// in_copied_process() and does none of the parent's work there. Header-only, async-signal-safe.
#pragma once

#include <atomic>

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

namespace gpuguard::detail {

/// The pid the library's state belongs to (0 until the library has loaded).
inline std::atomic<pid_t> state_owner_pid{0};
/// The pid that loaded the library.
inline std::atomic<pid_t> loaded_pid{0};

/// fork()'s child handler: the child's state is its own from here on (the other parts' child
/// handlers make it so).
inline void own_state_in_forked_child() noexcept { state_owner_pid.store(::getpid(), std::memory_order_relaxed); }

/// Recorded when the library loads, before anything can fork.
inline const bool process_identity_recorded = [] {
  loaded_pid.store(::getpid(), std::memory_order_relaxed);
  state_owner_pid.store(::getpid(), std::memory_order_relaxed);
  return ::pthread_atfork(nullptr, nullptr, own_state_in_forked_child) == 0;
}();

/// True in a process whose state is a copy of another's: a child made by a fork-like call that
/// ran no atfork handler. Async-signal-safe (getpid is).
inline bool in_copied_process() noexcept {
  const pid_t owner = state_owner_pid.load(std::memory_order_relaxed);
  return owner != 0 && ::getpid() != owner;
}

/// True in a child made by fork() (at any depth): its state is its own, but it started from its
/// parent's, so what is the parent's alone (the leak report) is not its work.
inline bool in_forked_child() noexcept {
  const pid_t loaded = loaded_pid.load(std::memory_order_relaxed);
  return loaded != 0 && state_owner_pid.load(std::memory_order_relaxed) != loaded;
}

}  // namespace gpuguard::detail
