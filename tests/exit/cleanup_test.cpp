// The cleanup registry, the hooks' install and uninstall, and spawn's errors, in process. What
// happens when a process really ends is tested in child processes (hooks_test.py).
#include <gpuguard/core/child_process.hpp>
#include <gpuguard/core/cleanup.hpp>
#include <gpuguard/core/hooks.hpp>

#include <gtest/gtest.h>

#include <csignal>
#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <sys/wait.h>

namespace {

TEST(cleanup, runs_once_in_priority_order_latest_first_among_equals) {
  std::vector<std::string> order;
  gpuguard::cleanup_handle low = gpuguard::register_cleanup("low", [&] { order.push_back("low"); }, -5);
  gpuguard::cleanup_handle first = gpuguard::register_cleanup("a", [&] { order.push_back("a"); });
  gpuguard::cleanup_handle second = gpuguard::register_cleanup("b", [&] { order.push_back("b"); });
  gpuguard::cleanup_handle high = gpuguard::register_cleanup("high", [&] { order.push_back("high"); }, 10);
  EXPECT_EQ(gpuguard::pending_cleanups(), 4U);
  EXPECT_EQ(gpuguard::run_cleanups("test"), 4U);
  EXPECT_EQ(order, (std::vector<std::string>{"high", "b", "a", "low"}));
  EXPECT_EQ(gpuguard::run_cleanups("test"), 0U);  // each runs at most once
  EXPECT_FALSE(first.pending());
}

TEST(cleanup, a_destroyed_handle_unregisters) {
  int ran = 0;
  {
    const gpuguard::cleanup_handle scoped = gpuguard::register_cleanup("scoped", [&] { ++ran; });
    EXPECT_TRUE(scoped.pending());
  }
  gpuguard::cleanup_handle kept = gpuguard::register_cleanup("kept", [&] { ran += 10; });
  kept.keep();
  EXPECT_FALSE(kept.pending());  // no longer owned by the handle, but still registered
  EXPECT_EQ(gpuguard::run_cleanups("test"), 1U);
  EXPECT_EQ(ran, 10);
}

TEST(cleanup, a_throwing_cleanup_is_reported_and_the_rest_still_run) {
  int ran = 0;
  gpuguard::cleanup_handle a = gpuguard::register_cleanup("after", [&] { ++ran; }, 0);
  gpuguard::cleanup_handle b = gpuguard::register_cleanup("thrower", [] { throw std::runtime_error("disk gone"); }, 5);
  gpuguard::cleanup_handle c = gpuguard::register_cleanup("odd thrower", [] { throw 42; }, 4);
  testing::internal::CaptureStderr();
  EXPECT_EQ(gpuguard::run_cleanups("test"), 3U);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(ran, 1);
  EXPECT_NE(err.find("[gpuguard] cleanup 'thrower' (test) threw disk gone; the other cleanups still run"), std::string::npos) << err;
  EXPECT_NE(err.find("cleanup 'odd thrower' (test) threw a non-standard exception"), std::string::npos) << err;
}

TEST(cleanup, a_cleanup_may_register_another) {
  int ran = 0;
  gpuguard::cleanup_handle inner;
  gpuguard::cleanup_handle outer = gpuguard::register_cleanup("outer", [&] {
    inner = gpuguard::register_cleanup("inner", [&] { ++ran; });
  });
  EXPECT_EQ(gpuguard::run_cleanups("test"), 2U);
  EXPECT_EQ(ran, 1);
}

int safe_runs = 0;
void count_safe(void* context) noexcept { safe_runs += *static_cast<int*>(context); }

TEST(cleanup, signal_safe_cleanups_run_with_the_others_in_priority_order) {
  std::vector<std::string> order;
  static int one = 1;
  safe_runs = 0;
  gpuguard::cleanup_handle safe = gpuguard::register_signal_safe_cleanup("safe", count_safe, &one, 5);
  gpuguard::cleanup_handle ordinary = gpuguard::register_cleanup("ordinary", [&] {
    order.push_back(safe_runs == 1 ? "ordinary after safe" : "ordinary before safe");
  }, 1);
  EXPECT_TRUE(safe.pending());
  EXPECT_EQ(gpuguard::run_cleanups("test"), 2U);
  EXPECT_EQ(safe_runs, 1);
  EXPECT_EQ(order, std::vector<std::string>{"ordinary after safe"});
  EXPECT_FALSE(safe.pending());
  EXPECT_EQ(gpuguard::run_cleanups("test"), 0U);
  EXPECT_EQ(safe_runs, 1);

  gpuguard::cleanup_handle dropped = gpuguard::register_signal_safe_cleanup("dropped", count_safe, &one);
  dropped.reset();
  EXPECT_EQ(gpuguard::run_cleanups("test"), 0U);
  EXPECT_EQ(safe_runs, 1);
}

TEST(cleanup, signal_safe_slots_are_limited_and_say_so) {
  static int zero = 0;
  std::vector<gpuguard::cleanup_handle> handles;
  handles.reserve(64);
  for (int i = 0; i < 64; ++i) { handles.push_back(gpuguard::register_signal_safe_cleanup("slot", count_safe, &zero)); }
  EXPECT_THROW(static_cast<void>(gpuguard::register_signal_safe_cleanup("one too many", count_safe, &zero)),
               std::length_error);
  handles.pop_back();  // frees a slot
  EXPECT_NO_THROW(handles.push_back(gpuguard::register_signal_safe_cleanup("again", count_safe, &zero)));
}

// ---- hooks: install twice is harmless, uninstall restores ---------------------------------------

void program_handler(int /*sig*/) {}
[[noreturn]] void program_terminate() { std::abort(); }

struct sigaction current(int sig) {
  struct sigaction action{};
  sigaction(sig, nullptr, &action);
  return action;
}

TEST(hooks, install_twice_is_harmless_and_uninstall_restores) {
  std::signal(SIGSEGV, program_handler);  // the program's own: chained, then put back
  std::signal(SIGHUP, program_handler);   // the program handles it: left alone
  std::signal(SIGTERM, SIG_DFL);
  std::set_terminate(program_terminate);
  gpuguard::options opts;
  gpuguard::install_hooks(opts);
  ASSERT_TRUE(gpuguard::hooks_installed());
  const struct sigaction segv = current(SIGSEGV);
  EXPECT_NE(segv.sa_flags & SA_SIGINFO, 0);
  EXPECT_NE(segv.sa_flags & SA_ONSTACK, 0);
  EXPECT_NE(current(SIGTERM).sa_handler, SIG_DFL);
  EXPECT_EQ(current(SIGHUP).sa_handler, &program_handler);
  EXPECT_NE(std::get_terminate(), &program_terminate);

  gpuguard::install_hooks(opts);  // again: nothing changes
  EXPECT_EQ(current(SIGSEGV).sa_sigaction, segv.sa_sigaction);

  gpuguard::uninstall_hooks();
  EXPECT_FALSE(gpuguard::hooks_installed());
  EXPECT_EQ(current(SIGSEGV).sa_handler, &program_handler);
  EXPECT_EQ(current(SIGTERM).sa_handler, SIG_DFL);
  EXPECT_EQ(current(SIGHUP).sa_handler, &program_handler);
  EXPECT_EQ(std::get_terminate(), &program_terminate);

  gpuguard::install_hooks(opts);  // and back again
  EXPECT_TRUE(gpuguard::hooks_installed());
  gpuguard::uninstall_hooks();
}

TEST(hooks, an_unopenable_crash_file_is_reported_and_stderr_still_used) {
  gpuguard::options opts;
  opts.crash_file = "/nonexistent-dir/crash.json";
  testing::internal::CaptureStderr();
  gpuguard::install_hooks(opts);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[gpuguard] crash_file: cannot open '/nonexistent-dir/crash.json': No such file or directory; "
                     "crash records go to stderr only"), std::string::npos) << err;
  EXPECT_TRUE(gpuguard::hooks_installed());
  gpuguard::uninstall_hooks();
}

// ---- spawn --------------------------------------------------------------------------------------

TEST(spawn, runs_a_program_in_its_own_group_and_returns_its_status) {
  gpuguard::child_process child = gpuguard::spawn({"sh", "-c", "exit 7"});
  ASSERT_GT(child.pid(), 0);
  const int status = child.wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  EXPECT_EQ(child.wait(), -1);  // nothing left to wait for
}

TEST(spawn, terminate_ends_the_child) {
  gpuguard::child_process child = gpuguard::spawn({"sleep", "1000"});
  EXPECT_EQ(getpgid(child.pid()), child.pid());
  const int status = child.terminate(2000);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(spawn, a_missing_program_is_a_clear_error) {
  try {
    static_cast<void>(gpuguard::spawn({"/nonexistent/trainer", "--epochs", "3"}));
    FAIL() << "spawn of a missing program did not throw";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), ENOENT);
    EXPECT_NE(std::string(error.what()).find("cannot start '/nonexistent/trainer'"), std::string::npos) << error.what();
  }
  EXPECT_THROW(static_cast<void>(gpuguard::spawn({})), std::invalid_argument);
}

}  // namespace
