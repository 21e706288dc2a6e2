// The host benchmarks' upstream: std::malloc and std::free behind the resource interface.
//
// glibc serves a 256-byte malloc from a per-thread cache (tcache) and its arenas per thread, so
// pairs on many threads share no cache line and the untracked baseline scales with the threads;
// then a tracked run that does not scale is tracking's doing. gpuguard::host_memory_resource is
// not such a baseline: it counts the bytes in use in one atomic that every thread writes, and its
// 256-byte alignment takes glibc's memalign path, which the per-thread cache does not serve.
#pragma once

#include <gpuguard/memory_resource.hpp>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace gpuguard_bench {

class malloc_resource final : public gpuguard::memory_resource {
 private:
  void* do_allocate(std::size_t bytes, gpuguard::stream_view /*stream*/) override {
    void* ptr = std::malloc(bytes);  // NOLINT(cppcoreguidelines-no-malloc): the point of it
    if (ptr == nullptr) { throw std::bad_alloc(); }
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t /*bytes*/, gpuguard::stream_view /*stream*/) noexcept override {
    std::free(ptr);  // NOLINT(cppcoreguidelines-no-malloc,cppcoreguidelines-owning-memory)
  }
  [[nodiscard]] gpuguard::memory_kind do_kind() const noexcept override { return gpuguard::memory_kind::host; }
};

}  // namespace gpuguard_bench
