// The frame-pointer walk of allocation stacks (src/ledger/frame_walk.cpp) and when a capture uses
// it (src/ledger/stacks.cpp): through code with frame pointers it gives the unwinder's frames and is
// then used; through code without them (callers built with -fomit-frame-pointer, rbp holding
// anything, a thread with a small stack) it never reads outside the stack, and a capture still
// gives exactly the unwinder's frames.
#include "ledger/frame_walk.hpp"
#include "ledger/stacks.hpp"

#include "frame_walk_no_fp.hpp"

#include <gtest/gtest.h>

#include <pthread.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

using frames_t = std::vector<void*>;
using gpuguard::detail::frame_verdict;

constexpr std::size_t depth = 8;

// An address as a pointer: the made-up frames and return addresses below are only compared.
void* as_pointer(std::uintptr_t address) {
  return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr)
}

// For functions whose locals must lie in the thread's stack (a made-up chain of frames): ASan's
// use-after-return detection moves an instrumented function's locals to a stack of its own, which
// the walk rightly refuses to read.
#define GPUGUARD_TEST_LOCALS_ON_THE_STACK __attribute__((no_sanitize_address))

__attribute__((noinline)) frames_t capture(std::size_t wanted) {
  std::array<void*, gpuguard::detail::max_stack_depth> frames{};
  const std::size_t count = gpuguard::detail::capture_caller_frames(frames.data(), wanted);
  asm volatile("" ::: "memory");  // no tail call: this frame stays on the stack
  return frames_t(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(count));
}

// One capture with the walk allowed and one by the unwinder alone, from the same call, each with
// the thread's capture cache emptied first (it would answer the second from the first).
struct both_ways {
  frames_t fast;
  frames_t unwound;
  frames_t raw;  // the bare walk from the capturing function's frame, depth frames at most
};

__attribute__((noinline)) std::size_t capture_both(void* out) {
  auto& both = *static_cast<both_ways*>(out);
  for (const bool fast : {true, false}) {
    gpuguard::detail::set_fast_unwind(fast);
    gpuguard::detail::forget_cached_stacks();
    (fast ? both.fast : both.unwound) = capture(depth);
  }
  gpuguard::detail::set_fast_unwind(true);
  std::array<void*, depth> ips{};
  const std::size_t walked = gpuguard::detail::walk_frame_pointers(
      __builtin_frame_address(0), gpuguard::detail::thread_stack_bounds(), ips.data(), nullptr, depth);
  both.raw.assign(ips.begin(), ips.begin() + static_cast<std::ptrdiff_t>(walked));
  asm volatile("" ::: "memory");
  return both.fast.size();
}

// A known chain of calls built with frame pointers, deep enough that a capture of `depth` frames
// ends inside it (below it lies gtest, built without them).
__attribute__((noinline)) std::size_t descend(int levels, both_ways& both) {
  const std::size_t got = levels == 0 ? capture_both(&both) : descend(levels - 1, both);
  asm volatile("" ::: "memory");  // no tail call
  return got;
}
std::size_t level1(both_ways& both) { return descend(static_cast<int>(depth), both); }

// Where the bare walk's first frame (the return into capture_both's caller) is among the
// unwinder's frames; the frames from there on must be the walk's.
void expect_walk_matches(const both_ways& both) {
  ASSERT_FALSE(both.raw.empty());
  const auto at = std::find(both.unwound.begin(), both.unwound.end(), both.raw.front());
  ASSERT_NE(at, both.unwound.end()) << "the walk's first frame is not among the unwinder's";
  const auto overlap = std::min<std::ptrdiff_t>(both.unwound.end() - at, static_cast<std::ptrdiff_t>(both.raw.size()));
  ASSERT_GE(overlap, 4);
  EXPECT_TRUE(std::equal(at, at + overlap, both.raw.begin()));
}

TEST(frame_walk, gives_the_unwinders_innermost_frames_through_frame_pointers) {
  for (int round = 0; round < 3; ++round) {  // the first learns the addresses, the rest use the walk
    both_ways both;
    ASSERT_EQ(level1(both), depth);
    EXPECT_EQ(both.fast, both.unwound) << "round " << round;
    expect_walk_matches(both);
  }
  both_ways both;
  level1(both);
  // Every step the walk took was vouched for: its frames were used as they are.
  for (std::size_t i = 0; i + 1 < both.fast.size(); ++i) {
    EXPECT_EQ(gpuguard::detail::verdict_of(both.fast[i]), frame_verdict::chained) << "frame " << i;
  }
}

__attribute__((noinline)) std::size_t through_no_fp(both_ways& both) {
  const std::size_t got = gpuguard_test::no_fp_outer(capture_both, &both);
  asm volatile("" ::: "memory");
  return got;
}

// Each check, run on the thread's own stack and again on a small one.
void check_without_frame_pointers() {
  for (int round = 0; round < 3; ++round) {
    both_ways both;
    through_no_fp(both);
    EXPECT_EQ(both.fast, both.unwound) << "round " << round;
    ASSERT_GE(both.unwound.size(), 5U);
    // The bare walk leaves the callers without frame pointers out; the capture did not use it.
    const bool all_walked = std::all_of(both.unwound.begin() + 3, both.unwound.begin() + 5, [&](void* ip) {
      return std::find(both.raw.begin(), both.raw.end(), ip) != both.raw.end();
    });
    EXPECT_FALSE(all_walked) << "the bare walk found the frames without frame pointers";
  }
}

#if defined(__x86_64__)
// What rbp holds in the calls below: nothing, small numbers, odd and high addresses, a misaligned
// address inside the stack, and a made-up chain inside the stack whose return addresses are false.
GPUGUARD_TEST_LOCALS_ON_THE_STACK void check_with_rbp_set_to_anything() {
  std::array<std::uintptr_t, 8> fake{};
  const auto at = [&](std::size_t i) { return reinterpret_cast<std::uintptr_t>(&fake[i]); };
  fake = {at(2), 0x1234, at(4), 0x5678, at(1), 0x9abc, 0, 0};  // the last link points back down: the end
  const std::uintptr_t inside = reinterpret_cast<std::uintptr_t>(&fake);
  for (const std::uintptr_t rbp : {std::uintptr_t{0}, std::uintptr_t{1}, std::uintptr_t{8},
                                   std::uintptr_t{0xdeadbeef}, inside + 3, inside, std::uintptr_t{UINTPTR_MAX - 7},
                                   std::uintptr_t{0x00007fffffffe000}}) {
    both_ways both;
    gpuguard_test::call_with_rbp(rbp, capture_both, &both);
    EXPECT_EQ(both.fast, both.unwound) << "rbp " << std::hex << rbp;
    EXPECT_LE(both.raw.size(), depth);
    if (rbp == inside) {  // the walk follows the made-up chain: wrong frames, read from the stack
      EXPECT_NE(std::find(both.raw.begin(), both.raw.end(), as_pointer(0x1234)), both.raw.end());
      EXPECT_EQ(std::find(both.fast.begin(), both.fast.end(), as_pointer(0x1234)), both.fast.end());
    }
  }
}
#endif

TEST(frame_walk, a_capture_through_code_without_frame_pointers_gives_the_unwinders_frames) {
  check_without_frame_pointers();
}

#if defined(__x86_64__)
TEST(frame_walk, never_reads_outside_the_stack_whatever_rbp_holds) { check_with_rbp_set_to_anything(); }
#endif

GPUGUARD_TEST_LOCALS_ON_THE_STACK void check_made_up_chains() {
  const gpuguard::detail::stack_bounds bounds = gpuguard::detail::thread_stack_bounds();
  ASSERT_NE(bounds.high, 0U);
  std::array<void*, depth> ips{};
  std::array<std::uintptr_t, 6> fake{};
  const auto at = [&](std::size_t i) { return reinterpret_cast<std::uintptr_t>(&fake[i]); };
  fake = {at(2), 0x1111, at(0), 0x2222, 0, 0};  // the second link goes back down
  EXPECT_EQ(gpuguard::detail::walk_frame_pointers(as_pointer(at(0)), bounds, ips.data(), nullptr, depth), 2U);
  EXPECT_EQ(ips[0], as_pointer(0x1111));
  EXPECT_EQ(ips[1], as_pointer(0x2222));
  fake = {at(2) + 1, 0x1111, 0, 0, 0, 0};  // a misaligned link
  EXPECT_EQ(gpuguard::detail::walk_frame_pointers(as_pointer(at(0)), bounds, ips.data(), nullptr, depth), 1U);
  fake = {bounds.high, 0x1111, 0, 0, 0, 0};  // a link past the stack's end
  EXPECT_EQ(gpuguard::detail::walk_frame_pointers(as_pointer(at(0)), bounds, ips.data(), nullptr, depth), 1U);
  fake = {at(2), 0, 0, 0, 0, 0};  // a null return address
  EXPECT_EQ(gpuguard::detail::walk_frame_pointers(as_pointer(at(2)), bounds, ips.data(), nullptr, depth), 0U);
  // A start outside the stack, or no stack known: nothing is read.
  EXPECT_EQ(gpuguard::detail::walk_frame_pointers(&ips, {bounds.high, bounds.high + 4096}, ips.data(), nullptr, depth), 0U);
  EXPECT_EQ(gpuguard::detail::walk_frame_pointers(&fake, {}, ips.data(), nullptr, depth), 0U);
  EXPECT_EQ(gpuguard::detail::walk_frame_pointers(as_pointer(bounds.high - 8), bounds, ips.data(), nullptr, depth), 0U);
}

TEST(frame_walk, stops_at_a_chain_outside_or_against_the_stack) { check_made_up_chains(); }

// The checks above again on a thread with a small stack of its own.
void* on_small_stack(void* /*unused*/) {
  const gpuguard::detail::stack_bounds bounds = gpuguard::detail::thread_stack_bounds();
  const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  EXPECT_TRUE(here >= bounds.low && here < bounds.high) << "the thread's bounds do not hold its stack";
  EXPECT_LE(bounds.high - bounds.low, std::size_t{1} << 20);
  check_without_frame_pointers();
#if defined(__x86_64__)
  check_with_rbp_set_to_anything();
#endif
  both_ways both;
  level1(both);
  EXPECT_EQ(both.fast, both.unwound);
  return nullptr;
}

TEST(frame_walk, on_a_thread_with_a_small_stack) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  // Small, yet room for the unwinder and gtest's assertions (sanitizer builds take more per frame).
  ASSERT_EQ(pthread_attr_setstacksize(&attr, std::max<std::size_t>(PTHREAD_STACK_MIN, std::size_t{256} * 1024)), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attr, on_small_stack, nullptr), 0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
}

}  // namespace
