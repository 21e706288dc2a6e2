// A test hook for python_lines_test.py: the raw walk's location-table decoder
// (src/ledger/python_raw.cpp), called from Python through ctypes.
#include "ledger/python_raw.hpp"

#include <cstddef>
#include <cstdint>
#include <thread>

extern "C" __attribute__((visibility("default"))) int gpuguard_test_python_line(const std::uint8_t* table, std::size_t size,
                                                                                 int first_line, long index) {  // NOLINT(google-runtime-int)
  return gpuguard::detail::python_line(table, size, first_line, index);
}

// Calls `malloc_function` (a cudaMalloc) for `bytes` on a new native thread that Python never ran
// on, and waits for it: sites_job.py's allocation without a Python thread state. Returns its status.
extern "C" __attribute__((visibility("default"))) int gpuguard_test_on_native_thread(void* malloc_function, std::size_t bytes) {
  using malloc_type = int (*)(void**, std::size_t);
  const auto allocate = reinterpret_cast<malloc_type>(malloc_function);
  int status = -1;
  std::thread native([&] {
    void* pointer = nullptr;
    status = allocate(&pointer, bytes);
  });
  native.join();
  return status;
}
