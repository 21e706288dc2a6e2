/**
 * @file scope_exit.hpp
 * @brief `scope_exit` runs a cleanup when a scope ends; `scope_fail` only when it ends by an
 *        exception.
 */
#pragma once

#include <exception>
#include <type_traits>
#include <utility>

namespace gpuguard {

namespace detail {
struct on_every_exit {
  static bool should_run(int /*uncaught_at_start*/) noexcept { return true; }
};
struct on_failure {
  static bool should_run(int uncaught_at_start) noexcept {
    return std::uncaught_exceptions() > uncaught_at_start;
  }
};

template <class Fn, class When>
class basic_scope_guard {
  static_assert(std::is_nothrow_move_constructible_v<Fn> || std::is_copy_constructible_v<Fn>,
                "the cleanup must be movable without throwing, or copyable");

 public:
  explicit basic_scope_guard(Fn fn) noexcept(std::is_nothrow_move_constructible_v<Fn>)
      : fn_(std::move(fn)) {}
  basic_scope_guard(basic_scope_guard&& other) noexcept(std::is_nothrow_move_constructible_v<Fn>)
      : fn_(std::move(other.fn_)),
        uncaught_(other.uncaught_),
        active_(std::exchange(other.active_, false)) {}
  basic_scope_guard(const basic_scope_guard&) = delete;
  basic_scope_guard& operator=(const basic_scope_guard&) = delete;
  basic_scope_guard& operator=(basic_scope_guard&&) = delete;

  /// Runs the cleanup if still armed and the exit matches. A cleanup that throws terminates the
  /// program, as a throwing destructor would: cleanups must not throw.
  ~basic_scope_guard() noexcept {
    if (active_ && When::should_run(uncaught_)) { fn_(); }
  }

  /// Disarms the guard: the cleanup will not run.
  void release() noexcept { active_ = false; }

 private:
  Fn fn_;
  int uncaught_ = std::uncaught_exceptions();
  bool active_ = true;
};
}  // namespace detail

/// Runs `fn` when the scope ends, however it ends: `auto close = gpuguard::scope_exit([&]{...});`
template <class Fn>
class scope_exit : public detail::basic_scope_guard<Fn, detail::on_every_exit> {
  using detail::basic_scope_guard<Fn, detail::on_every_exit>::basic_scope_guard;
};
template <class Fn>
scope_exit(Fn) -> scope_exit<Fn>;

/// Runs `fn` only when the scope ends by an exception (for rollback).
template <class Fn>
class scope_fail : public detail::basic_scope_guard<Fn, detail::on_failure> {
  using detail::basic_scope_guard<Fn, detail::on_failure>::basic_scope_guard;
};
template <class Fn>
scope_fail(Fn) -> scope_fail<Fn>;

}  // namespace gpuguard
