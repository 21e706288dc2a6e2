// Callers without a frame-pointer chain, for the frame-walk tests (frame_walk_no_fp.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuguard_test {

#if defined(__x86_64__)
/// Calls fn(arg) with rbp holding `rbp`. Returns what fn returns.
std::size_t call_with_rbp(std::uintptr_t rbp, std::size_t (*fn)(void*), void* arg);
#endif

/// Calls fn(arg) through two functions built without frame pointers. Returns what fn returns.
std::size_t no_fp_outer(std::size_t (*fn)(void*), void* arg);

}  // namespace gpuguard_test
