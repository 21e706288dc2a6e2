// The frame-pointer walk (frame_walk.hpp): stack bounds per thread, the bounded walk, and the
// table of verdicts on return addresses.
//
// A function built with frame pointers pushes its caller's rbp and points rbp at that slot, so
// from any frame [rbp] is the caller's rbp and [rbp + 8] the return address into the caller: a
// stack is a few loads per frame. A function built without them may use rbp for anything: a walk
// that passes through it either stops (rbp out of the stack) or, if the function left rbp alone,
// silently skips its caller. Which functions keep the chain cannot be read off the binary cheaply,
// so stacks.cpp asks the unwind tables once per return address and keeps the answer here.
#include "ledger/frame_walk.hpp"

#include <array>
#include <atomic>
#include <pthread.h>

namespace gpuguard::detail {

namespace {

// The thread's bounds, looked up on its first capture. initial-exec, as the ledger's thread state
// (ledger_state.hpp says why): an offset from the thread pointer, no call per capture.
struct thread_bounds {
  bool looked = false;
  stack_bounds bounds;
};
__attribute__((tls_model("initial-exec"))) thread_local thread_bounds this_thread_bounds;

stack_bounds look_up_bounds() noexcept {
  stack_bounds found;
  pthread_attr_t attr;
  if (::pthread_getattr_np(::pthread_self(), &attr) != 0) { return found; }
  void* low = nullptr;
  std::size_t size = 0;
  if (::pthread_attr_getstack(&attr, &low, &size) == 0 && low != nullptr && size != 0) {
    found.low = reinterpret_cast<std::uintptr_t>(low);
    found.high = found.low + size;
  }
  ::pthread_attr_destroy(&attr);
  return found;
}

// Verdicts, open addressing over the return address's hash: each entry is the address shifted
// left by two with the verdict in the low bits (user-space addresses leave the top bits free), 0
// is empty. Entries are written once and never removed. A library unloaded and another loaded at
// its addresses inherits the old verdicts; at worst a capture through it then gives wrong frames
// (every read stays inside the stack).
constexpr unsigned verdict_bits = 13;
constexpr std::size_t verdict_slots = std::size_t{1} << verdict_bits;
constexpr std::size_t verdict_probes = 8;
std::array<std::atomic<std::uintptr_t>, verdict_slots> verdicts{};
std::atomic<bool> verdict_table_full{false};
std::atomic<bool> fast_unwind_on{true};

std::size_t home_of(std::uintptr_t address) noexcept {
  return static_cast<std::size_t>((static_cast<std::uint64_t>(address) * 0x9E3779B97F4A7C15ULL) >> (64 - verdict_bits));
}

}  // namespace

stack_bounds thread_stack_bounds() noexcept {
  thread_bounds& mine = this_thread_bounds;
  if (!mine.looked) {
    mine.bounds = look_up_bounds();
    mine.looked = true;
  }
  return mine.bounds;
}

// Not instrumented: a broken chain can point anywhere in the thread's stack, such as a sanitizer's
// redzone between another frame's locals; the reads are bounded, not wrong.
__attribute__((no_sanitize_address, no_sanitize_thread)) std::size_t walk_frame_pointers(
    const void* fp, stack_bounds bounds, void** ips, void* const** slots, std::size_t depth) noexcept {
  if (bounds.high <= bounds.low || bounds.high - bounds.low < 2 * sizeof(void*)) { return 0; }
  auto frame = reinterpret_cast<std::uintptr_t>(fp);
  std::size_t count = 0;
  while (count < depth) {
    // The frame's two words, its caller's rbp and the return address, must lie inside the stack.
    if (frame < bounds.low || frame > bounds.high - 2 * sizeof(void*) || frame % sizeof(void*) != 0) { break; }
    const auto* words = reinterpret_cast<void* const*>(frame);  // NOLINT(performance-no-int-to-ptr)
    void* const ip = words[1];
    if (ip == nullptr) { break; }
    if (ips != nullptr) { ips[count] = ip; }
    if (slots != nullptr) { slots[count] = &words[1]; }
    ++count;
    const auto next = reinterpret_cast<std::uintptr_t>(words[0]);
    if (next <= frame) { break; }  // the chain's end (0), or not a caller's frame
    frame = next;
  }
  return count;
}

namespace {

inline frame_verdict look_up_verdict(std::uintptr_t address) noexcept {
  const std::size_t home = home_of(address);
  for (std::size_t probe = 0; probe < verdict_probes; ++probe) {
    const std::uintptr_t entry = verdicts[(home + probe) % verdict_slots].load(std::memory_order_relaxed);
    if (entry == 0) { return frame_verdict::unknown; }
    if (entry >> 2 == address) { return static_cast<frame_verdict>(entry & 3U); }
  }
  return frame_verdict::unknown;
}

}  // namespace

frame_verdict verdict_of(const void* return_address) noexcept {
  return look_up_verdict(reinterpret_cast<std::uintptr_t>(return_address));
}

// walk_frame_pointers with each step judged on the way (one loop: the verdicts' loads overlap the
// chain's). Not instrumented, for the same reason.
__attribute__((no_sanitize_address, no_sanitize_thread)) judged_walk walk_judged(
    const void* fp, stack_bounds bounds, void** ips, void* const** slots, std::size_t depth) noexcept {
  judged_walk walk;
  if (bounds.high <= bounds.low || bounds.high - bounds.low < 2 * sizeof(void*)) {
    walk.worst = frame_verdict::broken;
    return walk;
  }
  auto frame = reinterpret_cast<std::uintptr_t>(fp);
  while (walk.count < depth) {
    if (frame < bounds.low || frame > bounds.high - 2 * sizeof(void*) || frame % sizeof(void*) != 0) { break; }
    const auto* words = reinterpret_cast<void* const*>(frame);  // NOLINT(performance-no-int-to-ptr)
    void* const ip = words[1];
    if (ip == nullptr) { break; }
    ips[walk.count] = ip;
    slots[walk.count] = &words[1];
    if (++walk.count == depth) { break; }  // the last frame's step is not taken
    if (walk.worst == frame_verdict::chained) {
      const frame_verdict step = look_up_verdict(reinterpret_cast<std::uintptr_t>(ip));
      if (step == frame_verdict::broken) {
        walk.worst = frame_verdict::broken;
        return walk;
      }
      walk.worst = step;
    }
    const auto next = reinterpret_cast<std::uintptr_t>(words[0]);
    if (next <= frame) { break; }
    frame = next;
  }
  if (walk.count == 0) { walk.worst = frame_verdict::broken; }
  return walk;
}

void learn_verdict(const void* return_address, frame_verdict verdict) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(return_address);
  if (verdict == frame_verdict::unknown || address == 0 || (address >> (8 * sizeof(address) - 2)) != 0) { return; }
  const std::uintptr_t wanted = (address << 2) | static_cast<std::uintptr_t>(verdict);
  const std::size_t home = home_of(address);
  for (std::size_t probe = 0; probe < verdict_probes; ++probe) {
    std::atomic<std::uintptr_t>& slot = verdicts[(home + probe) % verdict_slots];
    std::uintptr_t entry = slot.load(std::memory_order_relaxed);
    if (entry == 0 && slot.compare_exchange_strong(entry, wanted, std::memory_order_relaxed)) { return; }
    if (entry >> 2 == address) { return; }  // known already (or another thread just learned it)
  }
  verdict_table_full.store(true, std::memory_order_relaxed);
}

bool verdicts_full() noexcept { return verdict_table_full.load(std::memory_order_relaxed); }

bool fast_unwind() noexcept { return fast_unwind_on.load(std::memory_order_relaxed); }
void set_fast_unwind(bool on) noexcept { fast_unwind_on.store(on, std::memory_order_relaxed); }

}  // namespace gpuguard::detail
