// A program that allocates from one thread, then from two, through the CUDA driver API (linked
// against libcuda: the fake one on the CPU machine, the real one on the GPU). Under --track it
// prints the interposer's figures (gpuguard_track_figures, found with dlsym) after each phase, so
// that preload_test.py can check that what the interposer recorded later, off the calling thread,
// is in the ledger whenever it is read, and that a second thread ends the deferring:
//   1. one thread: 20000 stream-ordered pairs (more than the interposer's ring holds) and 3 blocks
//      of 1 MiB kept                                        -> "phase 1 {figures}"
//   2. 5000 more pairs and a 4th block, read by nobody before the next steps
//   3. on the fake driver only, a forked child frees its copy of the 4th block, allocates and
//      frees 1 MiB and prints its own figures, then _exits -> "child {figures}"
//   4. 5000 more pairs and a 5th block; at once a second thread frees the 5th block, the first
//      and the 4th, and keeps a 2 MiB block of its own     -> "phase 2 {figures}"
//   5. the main thread frees the second thread's block and one of its own: 1 MiB stays live at exit
// Without the interposer it prints "figures: none" for each phase.
#include "driver_context.hpp"

#include <cuda.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

bool ok(CUresult status, const char* what) { return gpuguard_test::ok("defer_program", status, what); }

constexpr std::size_t mib = std::size_t{1024} * 1024;

void print_figures(const char* phase) {
  using figures_fn = long (*)(char*, unsigned long);
  auto figures = reinterpret_cast<figures_fn>(::dlsym(RTLD_DEFAULT, "gpuguard_track_figures"));
  if (figures == nullptr) {
    std::printf("%s figures: none\n", phase);
  } else {
    std::vector<char> text(1 << 16);
    const long length = figures(text.data(), text.size());
    std::printf("%s %s\n", phase, length > 0 && static_cast<std::size_t>(length) < text.size() ? text.data() : "{}");
  }
  std::fflush(stdout);
}

bool pairs(int count, CUstream stream) {
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    if (!ok(cuMemAllocAsync(&p, mib, stream), "cuMemAllocAsync") || !ok(cuMemFreeAsync(p, stream), "cuMemFreeAsync")) {
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  CUcontext context = nullptr;
  if (!gpuguard_test::init_driver("defer_program", context)) { return 1; }
  CUstream stream = nullptr;
  if (context != nullptr && !ok(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) { return 1; }

  if (!pairs(20000, stream)) { return 1; }
  CUdeviceptr kept[3] = {};
  for (CUdeviceptr& p : kept) {
    if (!ok(cuMemAlloc(&p, mib), "cuMemAlloc")) { return 1; }
  }
  print_figures("phase 1");

  // More calls, left in the ring (nothing reads the figures before the fork and the second thread).
  if (!pairs(5000, stream)) { return 1; }
  CUdeviceptr pending = 0;
  if (!ok(cuMemAlloc(&pending, mib), "cuMemAlloc")) { return 1; }

  // A process cannot use the real driver after fork() once it is initialised: on the GPU the
  // child is left out. The child frees its copy of `pending` (the parent's, and quietly so) and
  // allocates and frees a block of its own.
  if (context == nullptr) {
    std::fflush(stdout);
    const pid_t child = ::fork();
    if (child == 0) {
      CUdeviceptr p = 0;
      if (!ok(cuMemFree(pending), "cuMemFree") || !ok(cuMemAlloc(&p, mib), "cuMemAlloc") ||
          !ok(cuMemFree(p), "cuMemFree")) {
        ::_exit(1);
      }
      print_figures("child");
      ::_exit(0);
    }
    int status = 0;
    if (child < 0 || ::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "defer_program: the forked child failed\n");
      return 1;
    }
  }

  // Again, with no fork after: these stay in the ring (unless the drainer is quicker).
  if (!pairs(5000, stream)) { return 1; }
  CUdeviceptr last = 0;
  if (!ok(cuMemAlloc(&last, mib), "cuMemAlloc")) { return 1; }

  // A second thread frees a block of the first thread's from before the last reading and the two
  // allocated since, and keeps a block of its own.
  CUdeviceptr theirs = 0;
  bool second_ok = false;
  std::thread second([&] {
    if (context != nullptr && !ok(cuCtxSetCurrent(context), "cuCtxSetCurrent")) { return; }
    second_ok = ok(cuMemFree(last), "cuMemFree") && ok(cuMemFree(kept[0]), "cuMemFree") &&
                ok(cuMemFree(pending), "cuMemFree") && ok(cuMemAlloc(&theirs, 2 * mib), "cuMemAlloc");
  });
  second.join();
  if (!second_ok) { return 1; }
  print_figures("phase 2");

  if (!ok(cuMemFree(theirs), "cuMemFree") || !ok(cuMemFree(kept[1]), "cuMemFree")) { return 1; }
  if (stream != nullptr) {
    cuStreamSynchronize(stream);
    cuStreamDestroy(stream);
  }
  std::printf("defer_program: leaving 1 MiB in 1 allocation behind\n");
  return 0;
}
