// A training-like program for the output tests (tests/outputs/outputs_test.py), run as a real child
// process with GPUGUARD_OPTIONS choosing the outputs. Its first argument picks what it does:
//   workload  nested scopes on two threads, an exception, an op-growth alert, a device-full alert
//             and its recovery (host memory with host_capacity), and a planted leak
//   overflow  blocks the writer in the alert callback, then ends 1000 scopes into a queue of 64
//   plain     three scopes and nothing else (for failing sinks)
//   fork      a scope, then fork(): the child ends a scope and calls exit(); the parent goes on
//   spike     1 MiB kept, a pause of 300 ms (the device is sampled), then 40 MiB allocated and
//             freed at once, and the end 20 ms later: a spike far shorter than sample_ms
//   spike_first  the same spike before anything else, and the end 20 ms later
//   steps     1, 2 and 4 MiB allocated, 2 and 4 freed, 3 allocated and freed, 1 freed: live
//             1, 3, 7, 3, 1, 4, 1, 0 MiB within a millisecond or so, far shorter than sample_ms
//   timeline_full  blocks the writer in the alert callback, then 4 threads make 40000 allocations
//             and frees each (one a 32 MiB spike) into the timeline's queue of 65536: the rest
//             are folded by the producers
//   many N    N allocations of 4 KiB through a ring of 8 (each freed when its slot comes round),
//             one of them (the N/2-th) 64 MiB: the peak is 7 * 4 KiB + 64 MiB for microseconds
//   endless S  scopes (names with quotes, a backslash and UTF-8) around 4 KiB allocations, as fast
//             as it can, for S seconds at most: the SIGKILL test (kill_test.py) kills it first
// Every size is exact so that the test can check the numbers the outputs carry.
#include <gpuguard/gpuguard.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/outputs.hpp>
#include <gpuguard/core/tracking.hpp>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr std::size_t mib = std::size_t{1024} * 1024;

std::vector<gpuguard::device_buffer>& cache() {
  static std::vector<gpuguard::device_buffer> buffers;
  return buffers;
}

void sleep_ms(int n) { std::this_thread::sleep_for(std::chrono::milliseconds(n)); }

// forward: keeps 1 MiB (activations for backward), peaks at 4 MiB.
void forward(std::vector<gpuguard::device_buffer>& saved) {
  GPUGUARD_OP("forward");
  saved.emplace_back(1 * mib);
  const gpuguard::device_buffer scratch(3 * mib);
}

// backward: frees what forward kept, peaks at 2 MiB.
void backward(std::vector<gpuguard::device_buffer>& saved) {
  GPUGUARD_OP("backward");
  const gpuguard::device_buffer gradients(2 * mib);
  saved.clear();
}

void train_step() {
  GPUGUARD_OP("train_step");
  std::vector<gpuguard::device_buffer> saved;
  saved.reserve(4);  // allocated before the scopes below, in host memory the ledger does not see
  forward(saved);
  backward(saved);
}

void failing_step() {
  GPUGUARD_OP("failing_step");
  const gpuguard::device_buffer batch(1 * mib);
  throw std::runtime_error("loss is NaN");
}

__attribute__((noinline)) void leaky_eval() {
  GPUGUARD_OP("leaky_eval");
  cache().emplace_back(3 * mib);  // LEAK-SITE-EVAL
}

int workload() {
  cache().reserve(8);
  gpuguard::enable_tracking();
  std::thread loader([] {
    for (int i = 0; i < 2; ++i) {
      GPUGUARD_OP("load_batch");
      const gpuguard::device_buffer batch(std::size_t{512} * 1024);
    }
  });
  loader.join();
  for (int i = 0; i < 3; ++i) { train_step(); }
  try {
    failing_step();
  } catch (const std::exception& error) {
    std::printf("ops_child: caught: %s\n", error.what());
  }
  leaky_eval();  // passes alert_op_growth=2M
  {
    GPUGUARD_OP("fill");  // 40 of host_capacity=64 MiB: past alert_fraction=0.5
    const gpuguard::device_buffer big(40 * mib);
    sleep_ms(150);
  }
  sleep_ms(150);  // back to 3 MiB: below 0.5 - 0.05, re-armed
  return 0;
}

// Turns tracking on and sticks the outputs' writer thread inside an alert callback, so that the
// queues fill behind it: a scope passes alert_op_growth=1K, and the writer spins in the callback
// until the returned flag is set. Static flags: the writer may still be leaving the callback after
// the caller has returned.
std::atomic<bool>& stick_writer() {
  static std::atomic<bool> release{false};
  static std::atomic<int> alerts{0};
  gpuguard::set_alert_callback([](const gpuguard::alert& fired) {
    if (fired.kind != gpuguard::alert_kind::op_growth) { return; }
    alerts.fetch_add(1);
    while (!release.load()) { std::this_thread::yield(); }  // the writer is stuck here
  });
  gpuguard::enable_tracking();
  {
    GPUGUARD_OP("grow");  // passes alert_op_growth=1K: the writer enters the callback
    cache().emplace_back(4096);
  }
  while (alerts.load() == 0) { std::this_thread::yield(); }
  return release;
}

int overflow() {
  std::atomic<bool>& release = stick_writer();
  for (int i = 0; i < 1000; ++i) { GPUGUARD_OP("burst"); }
  const gpuguard::output_stats during = gpuguard::output_statistics();
  release.store(true);
  if (!gpuguard::flush_outputs()) {
    std::fprintf(stderr, "ops_child: flush timed out\n");
    return 1;
  }
  const gpuguard::output_stats after = gpuguard::output_statistics();
  std::printf("ops_child: queued %llu dropped %llu written %llu (dropped while blocked %llu)\n",
              static_cast<unsigned long long>(after.queued), static_cast<unsigned long long>(after.dropped),
              static_cast<unsigned long long>(after.written),
              static_cast<unsigned long long>(during.dropped));
  return 0;
}

int plain() {
  gpuguard::enable_tracking();
  for (int i = 0; i < 3; ++i) {
    GPUGUARD_OP("plain");
    const gpuguard::device_buffer b(1024);
  }
  return 0;
}

int forking() {
  gpuguard::enable_tracking();
  { GPUGUARD_OP("before_fork"); const gpuguard::device_buffer b(1024); }
  gpuguard::flush_outputs();
  const pid_t child = ::fork();
  if (child == 0) {
    // No CUDA here: a forked child cannot use the runtime its parent initialised (on a GPU
    // machine, enable_tracking did). The scope records without memory.
    { GPUGUARD_OP("in_child"); }
    std::exit(0);  // runs the exit handlers: the parent's files must not see them
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  { GPUGUARD_OP("after_fork"); const gpuguard::device_buffer b(4096); }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

// A spike of 40 MiB that lives for microseconds, between two memory samples.
int spike(bool pause_first) {
  gpuguard::enable_tracking();
  const gpuguard::device_buffer kept(1 * mib);
  if (pause_first) { sleep_ms(300); }
  { const gpuguard::device_buffer burst(40 * mib); }
  sleep_ms(20);
  return 0;
}

// Every step of the memory timeline, faster than any sampling. With the log's path: flush_outputs()
// then says how many alloc lines the log has (the writer sleeps for sample_ms otherwise).
int steps(const char* log) {
  gpuguard::enable_tracking();
  gpuguard::device_buffer a(1 * mib);
  {
    const gpuguard::device_buffer b(2 * mib);
    const gpuguard::device_buffer c(4 * mib);
  }  // c, then b
  { const gpuguard::device_buffer d(3 * mib); }
  if (log != nullptr) {
    const bool flushed = gpuguard::flush_outputs();
    int lines = 0;
    if (std::FILE* f = std::fopen(log, "r")) {
      char line[4096];
      while (std::fgets(line, sizeof line, f) != nullptr) { lines += std::strstr(line, "\"type\":\"alloc\"") != nullptr ? 1 : 0; }
      std::fclose(f);
    }
    std::printf("ops_child: flushed %d, %d alloc lines after flush_outputs\n", flushed ? 1 : 0, lines);
  }
  return 0;
}

// More allocations and frees than the timeline queue holds, from 4 threads, while the writer is
// stuck: the producers fold what does not fit, and nothing is lost.
int timeline_full() {
  std::atomic<bool>& release = stick_writer();
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 40000; ++i) {
        const gpuguard::device_buffer b(t == 2 && i == 20000 ? 32 * mib : std::size_t{4096});
      }
    });
  }
  for (std::thread& t : threads) { t.join(); }
  release.store(true);
  return gpuguard::flush_outputs() ? 0 : 1;
}

// A burst of allocations far more than timeline_events per millisecond.
int many(long count) {
  gpuguard::enable_tracking();
  std::vector<gpuguard::device_buffer> ring(8);
  for (long i = 0; i < count; ++i) {
    gpuguard::device_buffer& slot = ring[static_cast<std::size_t>(i % 8)];
    slot = gpuguard::device_buffer();  // frees the old block first
    slot = gpuguard::device_buffer(i == count / 2 ? 64 * mib : std::size_t{4096});
  }
  return 0;
}

int endless(double seconds) {
  gpuguard::enable_tracking();
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  const auto steps = [until] {
    std::vector<gpuguard::device_buffer> ring(8);
    for (unsigned long i = 0; std::chrono::steady_clock::now() < until; ++i) {
      GPUGUARD_OP(i % 2 == 0 ? "step \"even\" \\ \u00e9t\u00e9" : "step odd");
      ring[i % 8] = gpuguard::device_buffer();  // frees the old block first
      ring[i % 8] = gpuguard::device_buffer(std::size_t{4096} * (1 + i % 3));
    }
  };
  // NVTX sets itself up on its first call without a lock ThreadSanitizer can see: one scope on
  // this thread first, then the second thread.
  { GPUGUARD_OP("start"); }
  std::thread other(steps);  // two threads: more events a writer pass, so longer writes to cut
  steps();
  other.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const char* mode = argc > 1 ? argv[1] : "workload";
  if (std::strcmp(mode, "workload") == 0) { return workload(); }
  if (std::strcmp(mode, "overflow") == 0) { return overflow(); }
  if (std::strcmp(mode, "plain") == 0) { return plain(); }
  if (std::strcmp(mode, "fork") == 0) { return forking(); }
  if (std::strcmp(mode, "spike") == 0) { return spike(true); }
  if (std::strcmp(mode, "spike_first") == 0) { return spike(false); }
  if (std::strcmp(mode, "steps") == 0) { return steps(argc > 2 ? argv[2] : nullptr); }
  if (std::strcmp(mode, "timeline_full") == 0) { return timeline_full(); }
  if (std::strcmp(mode, "many") == 0) { return many(argc > 2 ? std::atol(argv[2]) : 200000); }
  if (std::strcmp(mode, "endless") == 0) { return endless(argc > 2 ? std::atof(argv[2]) : 20.0); }
  std::fprintf(stderr, "ops_child: unknown mode '%s'\n", mode);
  return 2;
} catch (const std::exception& error) {
  std::fprintf(stderr, "ops_child: %s\n", error.what());
  return 1;
}
