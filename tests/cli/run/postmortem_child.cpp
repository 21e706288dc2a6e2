// A tracked program for tests/cli/run/run_postmortem_test.py: it enables tracking (GPUGUARD_OPTIONS
// applies), records host allocations at two sites through the library, opens the scopes "step"
// and "forward", prints its live bytes, and then ends as argv[1] says: "kill" (SIGKILL to itself,
// which no handler sees), "exit" (returns 0: its own exit path reports), "oom" (touches memory
// until the OOM killer of a memory-limited cgroup ends it), or "held" (first records 2 MiB more
// under the tag "stand-in cache", declared an exit holder's as a framework's cache is, then
// SIGKILL). In "oom" it first raises its own oom_score_adj to 1000, so that the OOM killer picks it
// and not `gpuguard run` or its anchor, and records each block it touches at a third site.
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/tracking.hpp>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

std::size_t live_bytes = 0;
std::size_t activations = 0;  // (the two functions differ, so that the compiler cannot fold them into one)

// One host allocation recorded through the library: the sites differ by the caller below.
__attribute__((noinline)) void record_host(std::uintptr_t address, std::size_t bytes) {
  gpuguard::allocation_event e;
  e.ptr = reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr): made up, never touched
  e.bytes = bytes;
  e.device = gpuguard::host_device_id;
  e.kind = gpuguard::memory_kind::host;
  gpuguard::record_allocation(e);
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void allocate_weights(std::uintptr_t address, std::size_t bytes) {
  record_host(address, bytes);
  live_bytes += bytes;
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void allocate_activations(std::uintptr_t address, std::size_t bytes) {
  record_host(address, bytes);
  live_bytes += bytes;
  ++activations;
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void allocate_hog(std::uintptr_t address, std::size_t bytes) {
  record_host(address, bytes);
  asm volatile("" ::: "memory");
}

// The OOM killer's first choice: any process may raise its own score.
bool volunteer_for_oom_killer() {
  FILE* f = std::fopen("/proc/self/oom_score_adj", "w");
  if (f == nullptr) { return false; }
  const bool written = std::fputs("1000", f) >= 0;
  return std::fclose(f) == 0 && written;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "kill" && mode != "exit" && mode != "oom" && mode != "held") {
    std::fprintf(stderr, "usage: postmortem_child kill|exit|oom|held\n");
    return 2;
  }
  if (mode == "oom" && !volunteer_for_oom_killer()) {
    std::fprintf(stderr, "postmortem_child: cannot write /proc/self/oom_score_adj: %s\n", std::strerror(errno));
    return 4;
  }
  gpuguard::enable_tracking();
  if (mode == "held") {
    gpuguard::declare_exit_holder(gpuguard::intern_tag("stand-in cache"));
    const gpuguard::scoped_tag cache("stand-in cache");
    allocate_weights(0x5000000, 2 << 20);
  }
  for (std::uintptr_t i = 0; i < 4; ++i) { allocate_weights(0x100000 + i * 0x10000, 1 << 20); }
  const gpuguard::op_scope step("step");
  const gpuguard::op_scope forward("forward");
  for (std::uintptr_t i = 0; i < 3; ++i) { allocate_activations(0x900000 + i * 0x10000, 3 << 16); }
  static_cast<void>(gpuguard::record_free(reinterpret_cast<void*>(0x900000), 3 << 16, gpuguard::unknown_device, nullptr));
  live_bytes -= 3 << 16;
  std::printf("live %zu\n", live_bytes);
  std::fflush(stdout);
  if (mode == "exit") { return 0; }
  if (mode == "kill" || mode == "held") { ::kill(::getpid(), SIGKILL); }
  std::vector<char*> hog;
  for (;;) {  // oom: until the cgroup's limit is met
    auto* block = static_cast<char*>(std::malloc(std::size_t{16} << 20));
    if (block == nullptr) { return 3; }
    allocate_hog(reinterpret_cast<std::uintptr_t>(block), std::size_t{16} << 20);
    std::memset(block, 1, std::size_t{16} << 20);
    hog.push_back(block);
  }
}
