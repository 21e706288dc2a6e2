// The signal-name table (see signal_name.hpp). A linear search over a constant array: no state
// to set up, so a signal handler may call it before anything else has run.
#include "util/signal_name.hpp"

#include <csignal>

namespace gpuguard::detail {

namespace {

struct named_signal {
  int number;
  const char* name;
};

// The standard signals of Linux. Numbers differ between architectures, so the table is keyed by
// the macros; the two that not every architecture has are guarded.
constexpr named_signal signal_names[] = {
    {SIGHUP, "SIGHUP"},     {SIGINT, "SIGINT"},     {SIGQUIT, "SIGQUIT"},     {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"},   {SIGABRT, "SIGABRT"},   {SIGBUS, "SIGBUS"},       {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"},   {SIGUSR1, "SIGUSR1"},   {SIGSEGV, "SIGSEGV"},     {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"},   {SIGALRM, "SIGALRM"},   {SIGTERM, "SIGTERM"},     {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"},   {SIGSTOP, "SIGSTOP"},   {SIGTSTP, "SIGTSTP"},     {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"},   {SIGURG, "SIGURG"},     {SIGXCPU, "SIGXCPU"},     {SIGXFSZ, "SIGXFSZ"},
    {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},   {SIGIO, "SIGIO"},
    {SIGSYS, "SIGSYS"},
#ifdef SIGSTKFLT
    {SIGSTKFLT, "SIGSTKFLT"},
#endif
#ifdef SIGPWR
    {SIGPWR, "SIGPWR"},
#endif
};

}  // namespace

const char* signal_name(int sig, const char* unknown) noexcept {
  for (const named_signal& s : signal_names) {
    if (s.number == sig) { return s.name; }
  }
  return unknown;
}

std::string signal_text(int sig) {
  if (const char* name = signal_name(sig)) { return name; }
  return "SIG" + std::to_string(sig);
}

}  // namespace gpuguard::detail
