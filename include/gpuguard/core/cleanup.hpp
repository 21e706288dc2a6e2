/**
 * @file cleanup.hpp
 * @brief Named cleanups that run once, in priority order, on whichever exit path fires first:
 *        normal exit, an uncaught exception (std::terminate), SIGINT/SIGTERM/SIGHUP/SIGQUIT.
 *        Needs the compiled core; the exit paths themselves are installed by `install_hooks()`
 *        (hooks.hpp), which `enable_tracking()` calls.
 *
 * On a crash (SIGSEGV and the like) the process is in an unknown state and only async-signal-safe
 * work may be done: there, only cleanups registered with `register_signal_safe_cleanup` run.
 * On every other path, both kinds run, together in priority order (docs/hooks.md).
 */
#pragma once

#include <gpuguard/config.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>

namespace gpuguard {

/// Owns one registered cleanup: destroying (or resetting) the handle unregisters it, so a cleanup
/// never outlives what it cleans. Move-only.
class GPUGUARD_API cleanup_handle {
 public:
  cleanup_handle() noexcept = default;
  explicit cleanup_handle(std::uint64_t id) noexcept : id_(id) {}
  cleanup_handle(const cleanup_handle&) = delete;
  cleanup_handle& operator=(const cleanup_handle&) = delete;
  cleanup_handle(cleanup_handle&& other) noexcept : id_(std::exchange(other.id_, 0)) {}
  cleanup_handle& operator=(cleanup_handle&& other) noexcept {
    std::swap(id_, other.id_);
    return *this;
  }
  ~cleanup_handle() { reset(); }

  /// Unregisters the cleanup now (it will not run); does nothing if it already ran.
  void reset() noexcept;

  /// Leaves the cleanup registered for the rest of the process (it runs on the first exit path)
  /// and lets go of it: the handle's destruction no longer unregisters it.
  void keep() noexcept { id_ = 0; }

  /// True while the handle owns a cleanup that has not run yet.
  [[nodiscard]] bool pending() const noexcept;

 private:
  std::uint64_t id_ = 0;
};

static_assert(!std::is_copy_constructible_v<cleanup_handle>);
static_assert(std::is_nothrow_move_constructible_v<cleanup_handle>);
static_assert(std::is_nothrow_move_assignable_v<cleanup_handle>);

/**
 * Registers `fn` to run on the first exit path. Higher `priority` runs first; among equal
 * priorities the one registered last runs first (as destructors do). A cleanup that throws is
 * reported on stderr with its name and the rest still run. A cleanup may call CUDA (it runs before
 * the CUDA runtime's teardown) but should be quick: on SIGTERM a second signal ends the process at
 * once, and the exit work as a whole gets at most `cleanup_timeout` seconds. In a child made by
 * fork() the parent's cleanups are not registered (docs/hooks.md). @throws std::bad_alloc only.
 */
[[nodiscard]] GPUGUARD_API cleanup_handle register_cleanup(std::string name, std::function<void()> fn,
                                                           int priority = 0);

/// A cleanup that may run inside a signal handler: it must call async-signal-safe functions only
/// (write, close, kill, _exit, ...): no malloc, no locks, no stdio, no CUDA.
using signal_safe_cleanup = void (*)(void* context) noexcept;

/**
 * Registers a cleanup that also runs on a crash (fatal signal), from the crash handler. At most
 * 64 can be registered at once. @throws std::length_error when all 64 slots are taken.
 */
[[nodiscard]] GPUGUARD_API cleanup_handle register_signal_safe_cleanup(const char* name, signal_safe_cleanup fn,
                                                                       void* context, int priority = 0);

/**
 * Runs every pending cleanup now, once, in order, and returns how many ran. What the exit paths
 * call; also callable directly (before a planned shutdown). `reason` is logged with a failure.
 */
GPUGUARD_API std::size_t run_cleanups(const char* reason = "requested") noexcept;

/// Cleanups registered and not yet run.
[[nodiscard]] GPUGUARD_API std::size_t pending_cleanups() noexcept;

}  // namespace gpuguard
