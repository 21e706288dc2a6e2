// A program that ends in every way the exit paths handle, for tests/exit/hooks_test.py. It enables
// tracking (GPUGUARD_OPTIONS applies), leaves memory live, registers an ordinary and a signal-safe
// cleanup that append a line to the marker file (argv[2]), prints "ready" and then ends as argv[1]
// says. Built twice: once plainly, and once with GPUGUARD_TRAP_MALLOC, where malloc and friends
// end the process with status 99 if they are called while the crash handler writes its record.
#include <gpuguard/core/child_process.hpp>
#include <gpuguard/core/cleanup.hpp>
#include <gpuguard/gpuguard.hpp>
#include <gpuguard/core/hooks.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/tracking.hpp>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" volatile std::sig_atomic_t gpuguard_crash_handler_active;

#if defined(GPUGUARD_TRAP_MALLOC)
// NOLINTBEGIN(bugprone-reserved-identifier): glibc's own names for its allocator
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void __libc_free(void*);

// Only the crashing thread is held to it: gpuguard's writer thread may allocate meanwhile.
static bool in_crash_handler() {
  return gpuguard_crash_handler_active != 0 &&
         gpuguard_crash_handler_active == static_cast<std::sig_atomic_t>(::syscall(SYS_gettid));
}

[[noreturn]] static void trapped() {
  static constexpr char message[] = "hooks_child: MALLOC IN CRASH HANDLER\n";
  ssize_t ignored = ::write(STDERR_FILENO, message, sizeof message - 1);
  static_cast<void>(ignored);
  ::_exit(99);
}
void* malloc(std::size_t n) {
  if (in_crash_handler()) { trapped(); }
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) {
  if (in_crash_handler()) { trapped(); }
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) {
  if (in_crash_handler()) { trapped(); }
  return __libc_realloc(p, n);
}
void free(void* p) {
  if (p != nullptr && in_crash_handler()) { trapped(); }
  __libc_free(p);
}
}
// NOLINTEND(bugprone-reserved-identifier)
#endif

namespace {

constexpr std::size_t mib = std::size_t{1024} * 1024;
int marker_fd = -1;

void mark(const char* text) noexcept {
  ssize_t ignored = ::write(marker_fd, text, std::strlen(text));
  static_cast<void>(ignored);
}

void safe_cleanup(void* /*context*/) noexcept { mark("cleanup:safe\n"); }

std::vector<gpuguard::device_buffer>& live() {
  static std::vector<gpuguard::device_buffer> buffers;
  return buffers;
}

void ready() {
  std::printf("ready %d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
}

[[noreturn]] void wait_for_signal() {
  for (;;) { std::this_thread::sleep_for(std::chrono::milliseconds(10)); }
}

// The faults are the point: in a sanitizer build UBSan must not stop the null store or the
// division by zero before the signal is raised (docs/testing.md, "Sanitizer builds").
__attribute__((no_sanitize("undefined"))) void crash(const std::string& kind) {
  if (kind == "SIGSEGV") {
    volatile int* null = nullptr;
    *null = 1;  // CRASH-SEGV-LINE  NOLINT(clang-analyzer-core.NullDereference): on purpose
  } else if (kind == "SIGBUS") {
    // A mapping past the end of its file: touching it raises SIGBUS.
    char path[] = "/tmp/gpuguard-sigbus-XXXXXX";
    const int fd = ::mkstemp(path);
    ::unlink(path);
    void* map = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    static_cast<volatile char*>(map)[0] = 1;
  } else if (kind == "SIGFPE") {
    volatile int zero = 0;
    volatile int one = 1;
    std::printf("%d\n", one / zero);  // NOLINT(clang-analyzer-core.DivideZero): on purpose
  } else if (kind == "SIGILL") {
    __builtin_trap();
  } else if (kind == "SIGABRT") {
    std::abort();
  }
}

std::atomic<int> arrived{0};

[[noreturn]] void hang_forever(int /*sig*/) {
  mark("user-handler:hang\n");
  for (;;) { ::pause(); }
}

void user_segv_handler(int /*sig*/) { mark("user-handler:segv\n"); }

void user_term_handler(int /*sig*/) {
  mark("user-handler:term\n");
  std::exit(3);
}

// A worker made by a fork-like call that runs no atfork handler ends as `how` says: "exit"
// (exit(0), which runs the atexit work), "crash" (SIGSEGV) or "term" (SIGTERM to itself). It
// allocates nothing first: the call left malloc's locks as the parent's other threads held them.
[[noreturn]] void copied_worker(const char* how) {
  if (std::strcmp(how, "crash") == 0) { crash("SIGSEGV"); }
  if (std::strcmp(how, "term") == 0) {
    ::kill(::getpid(), SIGTERM);
    ::sleep(5);
    ::_exit(9);  // the signal did not end it
  }
  std::exit(0);
}

int clone_entry(void* how) { copied_worker(static_cast<const char*>(how)); }

// ---- exit() and a termination signal racing for the end of the run ------------------------------

std::atomic<pid_t> exiting_thread{0};
std::atomic<bool> exit_reached_gpuguard{false};
std::array<int, 2> go_pipe{-1, -1};

// Registered before the hooks: runs after gpuguard's exit handler, so it marks that exit() went on
// past gpuguard's end of the run (to the program's statics and its exit status).
void exit_went_on() { mark("exit:went-on\n"); }
// Registered after them: runs just before gpuguard's exit handler.
void exit_reaching_gpuguard() { exit_reached_gpuguard.store(true); }

// True when the thread is asleep (state S in /proc/self/task/TID/stat).
bool sleeping(pid_t thread) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(thread));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) { return false; }
  char text[512];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) { return false; }
  text[n] = '\0';
  const char* paren = std::strrchr(text, ')');  // the name may hold spaces and parentheses
  return paren != nullptr && paren[1] == ' ' && paren[2] == 'S';
}

// SIGTERM's cleanups run on gpuguard's watcher; this one has another thread call exit(0) and
// returns only once that exit() has reached gpuguard's exit handler and stopped there (asleep) or
// gone on past it, so exit() always lands inside the signal's end of the run.
void start_exit_inside_signal_cleanup() {
  mark("gate:start\n");
  ssize_t ignored = ::write(go_pipe[1], "x", 1);
  static_cast<void>(ignored);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t thread = exiting_thread.load();
    if (exit_reached_gpuguard.load() && thread != 0 && sleeping(thread)) { break; }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  mark("gate:end\n");
}

// exit() runs this cleanup; it says "gate" and waits for the test's line on stdin, written once
// the test has sent SIGTERM, so the signal always comes while exit's cleanups run.
void wait_for_signal_inside_exit_cleanup() {
  mark("gate:start\n");
  std::printf("gate\n");
  std::fflush(stdout);
  pollfd in{STDIN_FILENO, POLLIN, 0};
  while (::poll(&in, 1, 10000) < 0 && errno == EINTR) {}
  char line[16];
  ssize_t ignored = ::read(STDIN_FILENO, line, sizeof line);
  static_cast<void>(ignored);
  mark("gate:end\n");
}

// Starts a copied_worker by `call` ("_Fork", "sys_fork", "clone"); -2: not available here.
pid_t start_copy(const std::string& call, const char* how) {
  if (call == "_Fork") {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    const pid_t pid = ::_Fork();
    if (pid == 0) { copied_worker(how); }
    return pid;
#else
    return -2;
#endif
  }
  if (call == "sys_fork") {
#if defined(SYS_fork)
    const auto pid = static_cast<pid_t>(::syscall(SYS_fork));
#else
    const auto pid = static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0));
#endif
    if (pid == 0) { copied_worker(how); }
    return pid;
  }
  if (call == "clone") {
    // Static storage, never freed: the worker's exit() must not unmap the stack it runs on.
    alignas(16) static char stack[std::size_t{256} * 1024];
    return ::clone(clone_entry, stack + sizeof stack, SIGCHLD, const_cast<char*>(how));
  }
  return -2;
}

}  // namespace

// Some modes end by an uncaught exception on purpose: that is the exit path under test.
int main(int argc, char** argv) {  // NOLINT(bugprone-exception-escape)
  if (argc < 3) {
    std::fprintf(stderr, "usage: hooks_child MODE MARKER [ARG]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::string arg = argc > 3 ? argv[3] : "";
  marker_fd = ::open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

  // Handlers the program had before gpuguard: kept and chained.
  if (mode == "user_handlers") {
    std::signal(SIGSEGV, user_segv_handler);
    std::signal(SIGTERM, user_term_handler);
  } else if (mode == "hanging_handler") {
    std::signal(SIGSEGV, hang_forever);
  } else if (mode == "exit_during_signal" || mode == "signal_during_exit") {
    std::atexit(exit_went_on);
  }

  live().reserve(32);
  gpuguard::enable_tracking();
  gpuguard::register_cleanup("ordinary", [] { mark("cleanup:ordinary\n"); }).keep();
  gpuguard::register_signal_safe_cleanup("signal-safe", safe_cleanup, nullptr).keep();
  live().emplace_back(3 * mib);  // live at the end, whichever way it comes

  if (mode == "exit") {
    ready();
    return std::atoi(arg.c_str());
  }
  if (mode == "signal" || (mode == "user_handlers" && arg.empty())) {
    ready();
    wait_for_signal();
  }
  if (mode == "exit_during_signal") {
    // exit(0) from another thread while SIGTERM's cleanups run: the process still ends by SIGTERM.
    std::atexit(exit_reaching_gpuguard);
    if (::pipe2(go_pipe.data(), O_CLOEXEC) != 0) { return 2; }
    gpuguard::register_cleanup("gate", start_exit_inside_signal_cleanup, 10).keep();
    std::thread([] {
      char byte = 0;
      while (::read(go_pipe[0], &byte, 1) < 0 && errno == EINTR) {}
      exiting_thread.store(static_cast<pid_t>(::syscall(SYS_gettid)));
      std::exit(0);
    }).detach();
    ready();
    wait_for_signal();
  }
  if (mode == "signal_during_exit") {
    // SIGTERM while exit(0) runs the cleanups: the process ends by SIGTERM once they are done.
    gpuguard::register_cleanup("gate", wait_for_signal_inside_exit_cleanup, 10).keep();
    ready();
    return 0;
  }
  if (mode == "slow_cleanup") {
    gpuguard::register_cleanup("slow", [] {
      mark("slow:start\n");
      std::this_thread::sleep_for(std::chrono::seconds(5));
      mark("slow:end\n");
    }, 10).keep();
    ready();
    wait_for_signal();
  }
  if (mode == "faulting_cleanup") {
    gpuguard::register_cleanup("faulting", [] {
      mark("faulting:start\n");
      crash("SIGSEGV");
    }, 10).keep();
    ready();
    wait_for_signal();
  }
  if (mode == "crash" || mode == "user_handlers" || mode == "hanging_handler") {
    ready();
    crash(arg.empty() ? "SIGSEGV" : arg);
    return 0;
  }
  if (mode == "two_threads") {
    ready();
    std::vector<std::thread> threads;
    threads.reserve(2);
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([] {
        arrived.fetch_add(1);
        while (arrived.load() < 2) {}
        crash("SIGSEGV");
      });
    }
    for (auto& t : threads) { t.join(); }
    return 0;
  }
  if (mode == "throw_in_thread") {
    ready();
    std::thread worker([] { throw std::runtime_error("data loader failed: shard 7 is corrupt"); });
    worker.join();
    return 0;
  }
  if (mode == "exit_from_thread") {
    ready();
    std::thread worker([] { std::exit(5); });
    worker.join();
    wait_for_signal();
  }
  if (mode == "gpu_exit") {
    // A cleanup frees device memory at exit: it runs before the CUDA runtime's teardown, so the
    // frees succeed and no "CUDA runtime unloading" error surfaces.
    for (int i = 0; i < 16; ++i) { live().emplace_back(256 * mib); }
    gpuguard::register_cleanup("free the weights", [] { live().clear(); }).keep();
    ready();
    return 0;
  }
  if (mode == "gpu_loop" || mode == "gpu_throw") {
    // 4 GiB live on the GPU, like a model's weights and optimizer state, then training-like churn.
    for (int i = 0; i < 16; ++i) { live().emplace_back(256 * mib); }
    ready();
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0;; ++step) {
      const gpuguard::device_buffer activations(64 * mib);
      if (mode == "gpu_throw" && std::chrono::steady_clock::now() - start > std::chrono::milliseconds(500)) {
        throw std::runtime_error("CUDA kernel reported an illegal loss value at step " + std::to_string(step));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (mode == "fork") {
    // A worker made by fork() (argv[3]: "exit" or "crash"): none of the parent's exit work is its
    // own. The parent started a helper with gpuguard::spawn, which must outlive the worker.
    static gpuguard::child_process helper = gpuguard::spawn({"sleep", "1000"});
    std::printf("child %d\n", static_cast<int>(helper.pid()));
    std::fflush(stdout);
    const pid_t worker = ::fork();
    if (worker == 0) {
      const gpuguard::counters before = gpuguard::device_counters(gpuguard::host_device_id);
      gpuguard::register_cleanup("worker", [] { mark("cleanup:worker\n"); }).keep();
      gpuguard::register_signal_safe_cleanup("worker-safe", [](void*) noexcept { mark("cleanup:worker-safe\n"); },
                                             nullptr).keep();
      live().clear();  // the worker's copies of the parent's buffers: freed quietly
      live().emplace_back(1 * mib);  // the worker's own
      const gpuguard::ledger_snapshot view = gpuguard::snapshot(true);
      std::printf("worker before %zu after %zu live %zu misuse %llu\n", before.current_bytes,
                  gpuguard::device_counters(gpuguard::host_device_id).current_bytes, view.live.size(),
                  static_cast<unsigned long long>(view.misuse.total()));
      std::fflush(stdout);
      if (arg == "crash") { crash("SIGSEGV"); }
      std::exit(0);
    }
    int status = 0;
    while (::waitpid(worker, &status, 0) < 0) {}
    std::printf("worker status %d\n", status);
    int helper_status = 0;
    std::printf("helper running %d\n", ::waitpid(helper.pid(), &helper_status, WNOHANG) == 0 ? 1 : 0);
    ready();
    return 0;
  }
  if (mode == "fork_like") {
    // argv[3] is CALL+HOW (start_copy, copied_worker). The parent holds the same state as in
    // "fork": 3 MiB live, a cleanup of each kind, and a helper started with gpuguard::spawn.
    const std::string call = arg.substr(0, arg.find('+'));
    static const std::string how = arg.substr(arg.find('+') + 1);
    static gpuguard::child_process helper = gpuguard::spawn({"sleep", "1000"});
    std::printf("child %d\n", static_cast<int>(helper.pid()));
    std::fflush(stdout);
    std::fflush(stderr);
    const auto started = std::chrono::steady_clock::now();
    const pid_t worker = start_copy(call, how.c_str());
    if (worker == -2) {
      std::printf("unsupported %s\n", call.c_str());
      ready();
      return 0;
    }
    if (worker < 0) {
      std::printf("start failed %s: %s\n", call.c_str(), std::strerror(errno));
      ready();
      return 1;
    }
    int status = 0;
    while (::waitpid(worker, &status, 0) < 0) {}
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    std::printf("worker status %d\n", status);
    std::printf("worker ms %lld\n", static_cast<long long>(took.count()));
    int helper_status = 0;
    std::printf("helper running %d\n", ::waitpid(helper.pid(), &helper_status, WNOHANG) == 0 ? 1 : 0);
    ready();
    return 0;
  }
  if (mode == "quick_exit") {
    // Events the writer has not written yet when quick_exit comes: its at_quick_exit flush writes
    // them. argv[3]: how many allocations (each an `alloc` line).
    ready();
    const int count = std::atoi(arg.c_str());
    for (int i = 0; i < count; ++i) { live().emplace_back(4096); }
    std::quick_exit(4);
  }
  if (mode == "underscore_exit") {
    ready();
    ::_exit(6);
  }
  if (mode == "hung_cleanup") {
    // A cleanup that never returns (a checkpoint to a hung file server); argv[3] says how the
    // process ends: "exit" (status 7), "signal" (waits for one) or "throw".
    gpuguard::register_cleanup("stuck checkpoint", [] {
      mark("stuck:start\n");
      for (;;) { ::pause(); }
    }, 10).keep();
    ready();
    if (arg == "exit") { return 7; }
    if (arg == "throw") { throw std::runtime_error("the loss went NaN"); }
    wait_for_signal();
  }
  if (mode == "children") {
    // A child in its own group that would outlive us: the exit paths end it.
    static gpuguard::child_process child = gpuguard::spawn({"sleep", "1000"});
    std::printf("child %d\n", static_cast<int>(child.pid()));
    ready();
    if (arg == "exit") { return 0; }
    wait_for_signal();
  }
  std::fprintf(stderr, "hooks_child: unknown mode '%s'\n", mode.c_str());
  return 2;
}
