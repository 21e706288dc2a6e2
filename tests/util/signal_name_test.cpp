// util/signal_name: the one table of signal names, read by signal handlers and by the CLI.
#include "util/signal_name.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <string>

namespace {

using gpuguard::detail::signal_name;
using gpuguard::detail::signal_text;

TEST(signal_name, names_the_signals_the_exit_hooks_and_the_supervisor_see) {
  EXPECT_STREQ(signal_name(SIGINT), "SIGINT");
  EXPECT_STREQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(signal_name(SIGHUP), "SIGHUP");
  EXPECT_STREQ(signal_name(SIGQUIT), "SIGQUIT");
  EXPECT_STREQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_STREQ(signal_name(SIGBUS), "SIGBUS");
  EXPECT_STREQ(signal_name(SIGFPE), "SIGFPE");
  EXPECT_STREQ(signal_name(SIGILL), "SIGILL");
  EXPECT_STREQ(signal_name(SIGABRT), "SIGABRT");
  EXPECT_STREQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_STREQ(signal_name(SIGTSTP), "SIGTSTP");
  EXPECT_STREQ(signal_name(SIGWINCH), "SIGWINCH");
  EXPECT_STREQ(signal_name(SIGCONT), "SIGCONT");
}

TEST(signal_name, where_a_signal_has_two_names_it_gives_the_one_python_and_kill_use) {
  EXPECT_STREQ(signal_name(SIGIOT), "SIGABRT");
  EXPECT_STREQ(signal_name(SIGPOLL), "SIGIO");
  EXPECT_STREQ(signal_name(SIGCHLD), "SIGCHLD");
}

TEST(signal_name, agrees_with_the_c_library_on_every_standard_signal) {
  // glibc's sigabbrev_np has the other spelling of the two signals above; every other name of
  // signals 1 to SIGRTMIN-1 must be its "SIG" + abbreviation.
  int named = 0;
  for (int sig = 1; sig < SIGRTMIN; ++sig) {
    const char* abbrev = ::sigabbrev_np(sig);
    if (abbrev == nullptr || sig == SIGPOLL) { continue; }
    ASSERT_NE(signal_name(sig), nullptr) << "signal " << sig;
    EXPECT_EQ(std::string(signal_name(sig)), std::string("SIG") + abbrev) << "signal " << sig;
    ++named;
  }
  EXPECT_GE(named, 30);  // Linux has 31 standard signals
}

TEST(signal_name, a_number_without_a_fixed_name_gets_the_callers_fallback) {
  for (const int sig : {0, -1, -15, SIGRTMIN, SIGRTMIN + 8, SIGRTMAX, NSIG, 1000}) {
    EXPECT_EQ(signal_name(sig), nullptr) << "signal " << sig;
    EXPECT_STREQ(signal_name(sig, "signal"), "signal") << "signal " << sig;
  }
  EXPECT_STREQ(signal_name(SIGSEGV, "signal"), "SIGSEGV");  // the fallback is only for the unnamed
}

TEST(signal_text, spells_a_signal_without_a_name_by_its_number) {
  EXPECT_EQ(signal_text(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_text(SIGRTMIN + 8), "SIG" + std::to_string(SIGRTMIN + 8));
  EXPECT_EQ(signal_text(0), "SIG0");
  EXPECT_EQ(signal_text(-3), "SIG-3");
}

}  // namespace
