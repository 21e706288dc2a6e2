// gpuguard's own threads (the outputs' writer, the signal watcher) must never be picked to run the
// program's signal handlers: a handler that calls exit() there would make the exit path join the
// very thread it runs on. They start with every asynchronous signal blocked (the mask is set
// before the thread exists, so no signal can slip in first); faults still reach them.
#pragma once

#include <csignal>
#include <thread>
#include <utility>

#include <pthread.h>

namespace gpuguard::detail {

template <class F>
std::thread* start_quiet_thread(F&& body) {
  sigset_t quiet;
  sigfillset(&quiet);
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS}) { sigdelset(&quiet, sig); }
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &quiet, &previous);
  std::thread* started = nullptr;
  try {
    started = new std::thread(std::forward<F>(body));
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return started;
}

}  // namespace gpuguard::detail
