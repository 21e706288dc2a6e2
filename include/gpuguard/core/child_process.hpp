/**
 * @file child_process.hpp
 * @brief Starting child processes that die with their parent: a parent-death signal on the child
 *        (checked against the race where the parent died before it was set), and a process group
 *        of its own that gpuguard's exit paths end (SIGTERM, then SIGKILL after a grace period;
 *        SIGKILL at once on a crash). Needs the compiled core.
 *
 * For programs gpuguard does not start itself, `gpuguard run` (the supervisor) does the same from
 * outside.
 */
#pragma once

#include <gpuguard/config.hpp>

#include <csignal>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>
#include <unistd.h>

namespace gpuguard {

struct spawn_options {
  /// Sent to the child when the thread that started it ends (Linux ties the parent-death signal
  /// to the creating thread): start children from a thread that lives as long as they should.
  int death_signal = SIGKILL;
  /// The child leads a new process group, which the exit paths terminate as a whole.
  bool own_group = true;
};

/// A started child. The destructor ends it (its group: SIGTERM, then SIGKILL after 2 s) and reaps
/// it unless it was waited for or released; in a process forked from the one that started it (a
/// copy of this object), the destructor leaves the child alone. Move-only.
class GPUGUARD_API child_process {
 public:
  child_process() noexcept = default;
  explicit child_process(pid_t pid, bool own_group) noexcept
      : pid_(pid), own_group_(own_group), parent_(::getpid()) {}
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  child_process(child_process&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)), own_group_(other.own_group_), parent_(other.parent_) {}
  child_process& operator=(child_process&& other) noexcept {
    std::swap(pid_, other.pid_);
    std::swap(own_group_, other.own_group_);
    std::swap(parent_, other.parent_);
    return *this;
  }
  ~child_process();

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  /// Waits for the child to end and returns its wait status (see waitpid); -1 if there is none.
  int wait() noexcept;

  /// SIGTERM to the child (its group), up to `grace_ms` for it to end, then SIGKILL; reaps it and
  /// returns its wait status (-1 if there is none).
  int terminate(int grace_ms = 2000) noexcept;

  /// Lets the child go: gpuguard no longer ends or reaps it.
  [[nodiscard]] pid_t release() noexcept;

 private:
  pid_t pid_ = -1;
  bool own_group_ = true;
  pid_t parent_ = -1;  ///< the process that started the child: only its destructor ends it
};

static_assert(!std::is_copy_constructible_v<child_process>);
static_assert(std::is_nothrow_move_constructible_v<child_process>);

/**
 * Starts `argv[0]` (searched on PATH) with `argv` as its arguments and the current environment.
 * @throws std::system_error when the process cannot be created or the program cannot be started
 *         (the message names the program and the error). @throws std::invalid_argument for an
 *         empty argv.
 */
GPUGUARD_API child_process spawn(const std::vector<std::string>& argv, const spawn_options& opts = {});

}  // namespace gpuguard
