// The capture cache of allocation-site stacks (src/ledger/stacks.cpp): a capture it answers must give the
// frames an unwind gives, and a different chain of calls at the same stack address must not get
// the cached frames.
#include "ledger/stacks.hpp"

#include "ledger/frame_walk.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

using frames_t = std::vector<void*>;

// The cache serves the unwinder: these captures do not take the frame-pointer walk.
struct unwinder_only {
  unwinder_only() { gpuguard::detail::set_fast_unwind(false); }
  unwinder_only(const unwinder_only&) = delete;
  unwinder_only& operator=(const unwinder_only&) = delete;
  unwinder_only(unwinder_only&&) = delete;
  unwinder_only& operator=(unwinder_only&&) = delete;
  ~unwinder_only() { gpuguard::detail::set_fast_unwind(true); }
};

__attribute__((noinline)) frames_t capture_here() {
  std::array<void*, 16> frames{};
  const std::size_t count = gpuguard::detail::capture_caller_frames(frames.data(), frames.size());
  asm volatile("" ::: "memory");  // no tail call: this frame stays on the stack
  return frames_t(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(count));
}

// Two callers of the same frame size, called from the same place: their captures start at the
// same stack address and differ only in the return address into them.
__attribute__((noinline)) frames_t from_a() {
  frames_t frames = capture_here();
  asm volatile("" ::: "memory");
  return frames;
}
__attribute__((noinline)) frames_t from_b() {
  frames_t frames = capture_here();
  asm volatile("" ::: "memory");
  return frames;
}

__attribute__((noinline)) frames_t from(bool a) { return a ? from_a() : from_b(); }

TEST(stack_cache, repeats_the_unwound_frames_for_the_same_chain) {
  const unwinder_only unwinder;
  const std::uint64_t hits_before = gpuguard::detail::cached_captures();
  std::vector<frames_t> got;
  got.reserve(6);
  for (int i = 0; i < 6; ++i) { got.push_back(from(true)); }  // one call site: one chain
  ASSERT_GE(got[0].size(), 3U);
  for (int i = 1; i < 6; ++i) { EXPECT_EQ(got[static_cast<std::size_t>(i)], got[0]) << "capture " << i; }
#if defined(__x86_64__)
  EXPECT_GE(gpuguard::detail::cached_captures(), hits_before + 5) << "the cache answered none";
#endif
}

TEST(stack_cache, another_chain_at_the_same_address_is_unwound_again) {
  const unwinder_only unwinder;
  // Alternating from one call site: the captures start at the same stack address each time, and
  // the chains differ only in from_a or from_b (the return addresses into them and into from).
  std::vector<frames_t> a;
  std::vector<frames_t> b;
  for (int i = 0; i < 8; ++i) {
    const bool first = i % 2 == 0;
    (first ? a : b).push_back(from(first));
  }
  ASSERT_EQ(a[0].size(), b[0].size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < a[0].size(); ++i) { differing += a[0][i] != b[0][i] ? 1 : 0; }
  EXPECT_GE(differing, 1U);
  EXPECT_LE(differing, 2U);
  for (std::size_t i = 1; i < a.size(); ++i) {
    EXPECT_EQ(a[i], a[0]) << "capture " << i << " through from_a";
    EXPECT_EQ(b[i], b[0]) << "capture " << i << " through from_b";
  }
}

}  // namespace
