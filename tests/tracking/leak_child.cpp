// A program that leaks on purpose, for the leak-report tests (tests/tracking/leak_report_test.py).
// It enables tracking from GPUGUARD_OPTIONS and leaves memory live at exit as its first argument
// says: "leak" (two sites), "clean" (nothing), "double_free" (misuse), "gpu" (on the GPU),
// "unrolled" (four stacks that differ only in return addresses on one line: one site).
// The LEAK-SITE markers let the test find the lines the report must name.
#include <gpuguard/gpuguard.hpp>
#include <gpuguard/core/tracking.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

namespace {

constexpr std::size_t mib = std::size_t{1024} * 1024;

// Kept alive by a "bug": a cache nobody clears. It is destroyed after the exit report runs.
std::vector<gpuguard::device_buffer>& cache() {
  static std::vector<gpuguard::device_buffer> buffers;
  return buffers;
}

__attribute__((noinline)) void leak_small_blocks() {
  for (int i = 0; i < 3; ++i) {
    cache().push_back(gpuguard::device_buffer(1 * mib));  // LEAK-SITE-SMALL
  }
}

__attribute__((noinline)) void leak_big_block() {
  GPUGUARD_TAG("checkpoint");
  cache().push_back(gpuguard::device_buffer(4 * mib));  // LEAK-SITE-BIG
}

__attribute__((noinline)) void leak_one() {
  cache().push_back(gpuguard::device_buffer(1 * mib));  // LEAK-SITE-ONE
}

// Four calls on one line, as an unrolled loop leaves them: four return addresses, one place.
__attribute__((noinline)) void leak_unrolled() {
  leak_one(); leak_one(); leak_one(); leak_one();  // LEAK-SITE-UNROLLED
  asm volatile("" ::: "memory");  // code after the last call: it stays a call, not a tail jump
}

}  // namespace

int main(int argc, char** argv) try {
  const char* mode = argc > 1 ? argv[1] : "leak";
  cache().reserve(16);
  gpuguard::enable_tracking();
  if (std::strcmp(mode, "leak") == 0 || std::strcmp(mode, "gpu") == 0) {
    leak_small_blocks();
    leak_big_block();
    const gpuguard::device_buffer freed(2 * mib);  // freed: must not appear
  } else if (std::strcmp(mode, "unrolled") == 0) {
    leak_unrolled();
  } else if (std::strcmp(mode, "double_free") == 0) {
    gpuguard::memory_resource& resource = *gpuguard::current_device_resource().resource;
    void* p = resource.allocate(4096);
    resource.deallocate(p, 4096);
    resource.deallocate(p, 4096);  // DOUBLE-FREE-SITE
  } else if (std::strcmp(mode, "clean") != 0) {
    std::fprintf(stderr, "leak_child: unknown mode '%s'\n", mode);
    return 2;
  }
  std::printf("leak_child: %s done\n", mode);
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "leak_child: %s\n", error.what());
  return 1;
}
