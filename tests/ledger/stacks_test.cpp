// The capture cache of allocation-site stacks (src/ledger/stacks.cpp): a capture it answers must give the
// frames an unwind gives, and a different chain of calls at the same stack address must not get
// the cached frames. The sites it remembers must be those interning gives, per prefix and depth.
#include "ledger/stacks.hpp"

#include "ledger/frame_walk.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

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

// ---- remembered sites ----------------------------------------------------------------------------

using gpuguard::site_id;

// The site of this chain with `prefix` in front, as capture_site_now in the ledger makes it.
__attribute__((noinline)) site_id site_here(const std::vector<void*>& prefix, std::size_t depth) {
  std::array<void*, gpuguard::detail::max_memo_prefix + gpuguard::detail::max_stack_depth> frames{};
  std::copy(prefix.begin(), prefix.end(), frames.begin());
  const site_id site = gpuguard::detail::capture_caller_site(frames.data(), prefix.size(), depth);
  asm volatile("" ::: "memory");  // no tail call: this frame stays on the stack
  return site;
}

__attribute__((noinline)) site_id site_from(const std::vector<void*>& prefix, std::size_t depth) {
  const site_id site = site_here(prefix, depth);
  asm volatile("" ::: "memory");
  return site;
}

// Words no code lies at, standing in for a Python part.
std::vector<void*> prefix_of(std::uintptr_t first, std::size_t count) {
  std::vector<void*> words;
  for (std::size_t i = 0; i < count; ++i) { words.push_back(reinterpret_cast<void*>(first + i * 8)); }  // NOLINT(performance-no-int-to-ptr)
  return words;
}

// The frames of `site` after its prefix must be a capture of this chain: the same as a fresh one.
void expect_site_holds(site_id site, const std::vector<void*>& prefix, std::size_t depth) {
  ASSERT_NE(site, gpuguard::no_site);
  const frames_t frames = gpuguard::detail::site_frames(site);
  ASSERT_GT(frames.size(), prefix.size());
  EXPECT_LE(frames.size(), prefix.size() + depth);
  EXPECT_EQ(frames_t(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(prefix.size())), prefix);
}

// One capture_caller_site per request, all through one chain of calls.
struct request {
  std::vector<void*> prefix;
  std::size_t depth = 16;
};

__attribute__((noinline)) std::vector<site_id> sites_of(const std::vector<request>& requests) {
  std::vector<site_id> sites;
  sites.reserve(requests.size());
  for (const request& r : requests) { sites.push_back(site_from(r.prefix, r.depth)); }
  return sites;
}

TEST(site_memo, a_repeated_stack_answers_with_the_site_it_was_interned_into) {
  const unwinder_only unwinder;
  gpuguard::detail::forget_cached_stacks();
  const std::uint64_t memo_before = gpuguard::detail::memoized_sites();
  const std::vector<site_id> sites = sites_of(std::vector<request>(6));
  expect_site_holds(sites[0], {}, 16);
  for (std::size_t i = 1; i < sites.size(); ++i) { EXPECT_EQ(sites[i], sites[0]) << "capture " << i; }
  // The site is what interning the frames gives: they intern into it again.
  const frames_t frames = gpuguard::detail::site_frames(sites[0]);
  EXPECT_EQ(gpuguard::detail::intern_site(frames.data(), frames.size()), sites[0]);
#if defined(__x86_64__)
  EXPECT_GE(gpuguard::detail::memoized_sites(), memo_before + 5) << "no capture was answered by its memo";
#endif
}

TEST(site_memo, another_prefix_or_depth_on_the_same_stack_is_another_site) {
  const unwinder_only unwinder;
  const std::vector<void*> a = prefix_of(0x1000, 3);
  const std::vector<void*> b = prefix_of(0x2000, 3);
  const std::vector<void*> shorter(a.begin(), a.begin() + 2);
  const std::vector<request> kinds{{a, 16}, {b, 16}, {shorter, 16}, {a, 2}};
  std::vector<request> requests;
  for (int round = 0; round < 5; ++round) { requests.insert(requests.end(), kinds.begin(), kinds.end()); }
  const std::uint64_t memo_before = gpuguard::detail::memoized_sites();
  const std::vector<site_id> sites = sites_of(requests);
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    expect_site_holds(sites[k], kinds[k].prefix, kinds[k].depth);
    for (std::size_t j = 0; j < k; ++j) { EXPECT_NE(sites[k], sites[j]) << "requests " << j << " and " << k; }
  }
  for (std::size_t i = kinds.size(); i < sites.size(); ++i) {  // alternating: each keeps its own memo
    EXPECT_EQ(sites[i], sites[i % kinds.size()]) << "request " << i;
  }
#if defined(__x86_64__)
  EXPECT_GE(gpuguard::detail::memoized_sites(), memo_before + 16) << "the memos did not keep the prefixes apart";
#endif
}

TEST(site_memo, more_prefixes_than_a_stack_remembers_still_get_their_own_sites) {
  const unwinder_only unwinder;
  std::vector<request> requests;
  for (std::uintptr_t k = 0; k < 24; ++k) { requests.push_back({prefix_of(0x10000 * (k % 12 + 3), 2), 16}); }
  const std::vector<site_id> sites = sites_of(requests);
  for (std::size_t k = 0; k < 12; ++k) {
    expect_site_holds(sites[k], requests[k].prefix, 16);
    EXPECT_EQ(sites[k + 12], sites[k]) << "prefix " << k;
    for (std::size_t j = 0; j < k; ++j) { EXPECT_NE(sites[k], sites[j]) << "prefixes " << j << " and " << k; }
  }
}

// What happens between captures at one round (a fork, or emptying the cache): the child, and the
// memo count just after it.
struct fork_point {
  int at_round = 0;
  pid_t child = -1;
  std::uint64_t memo_before = 0;
};

// Calls `before_each` then captures, `rounds` times, through one call site whatever the rounds do.
__attribute__((noinline)) std::vector<site_id> captures(int rounds, void (*before_each)(int, fork_point&),
                                                        fork_point& point) {
  std::vector<site_id> sites;
  for (int i = 0; i < rounds; ++i) {
    before_each(i, point);
    sites.push_back(site_from({}, 16));
  }
  return sites;
}

void fork_at_its_round(int round, fork_point& point) {
  if (round != point.at_round) { return; }
  point.child = ::fork();
  point.memo_before = gpuguard::detail::memoized_sites();
}

void forget_at_its_round(int round, fork_point& point) {
  if (round != point.at_round) { return; }
  gpuguard::detail::forget_cached_stacks();
  point.memo_before = gpuguard::detail::memoized_sites();
}

TEST(site_memo, an_emptied_cache_forgets_its_sites_and_interns_again) {
  const unwinder_only unwinder;
  fork_point point;
  point.at_round = 2;
  const std::vector<site_id> sites = captures(3, forget_at_its_round, point);
  ASSERT_NE(sites[0], gpuguard::no_site);
  EXPECT_EQ(sites[1], sites[0]);
  EXPECT_EQ(sites[2], sites[0]);
  EXPECT_EQ(gpuguard::detail::memoized_sites(), point.memo_before) << "a memo outlived its emptied cache";
}

TEST(site_memo, a_forked_child_keeps_the_parents_sites) {
  const unwinder_only unwinder;
  fork_point point;
  point.at_round = 2;
  const std::vector<site_id> sites = captures(3, fork_at_its_round, point);
  if (point.child == 0) {
    // The child's last capture: its memo answered with the parent's id, which names frames here.
#if defined(__x86_64__)
    const bool memo = gpuguard::detail::memoized_sites() > point.memo_before;
#else
    const bool memo = true;
#endif
    const bool named = !gpuguard::detail::site_frames(sites[2]).empty();
    ::_exit((sites[2] == sites[0] ? 0 : 1) + (memo ? 0 : 2) + (named ? 0 : 4));
  }
  ASSERT_GT(point.child, 0);
  ASSERT_NE(sites[0], gpuguard::no_site);
  int status = 0;
  ASSERT_EQ(::waitpid(point.child, &status, 0), point.child);
  ASSERT_TRUE(WIFEXITED(status));
  // 1: another site than the parent's; 2: no memo answered; 4: the site names no frames.
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the forked child's site was not the parent's remembered one";
}

}  // namespace
