// The frame-pointer walk of allocation-site stacks: the calling thread's stack bounds, a walk of
// the rbp chain that never leaves them, and what is known of each return address (whether the
// function it returns into keeps its frame pointer at that call, so a walk may step past it).
// Internal to the compiled core; stacks.cpp decides when a walk's frames are used.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuguard::detail {

/// A thread's stack: [low, high). Both 0 when unknown.
struct stack_bounds {
  std::uintptr_t low = 0;
  std::uintptr_t high = 0;
};

/// The calling thread's stack, from pthread_getattr_np on its first call, cached per thread.
/// {0, 0} where the thread's stack cannot be known. No allocation after the first call.
stack_bounds thread_stack_bounds() noexcept;

/// Follows the frame-pointer chain that starts at `fp` (a frame's saved-rbp slot, as
/// __builtin_frame_address gives it): writes the return address of each frame to `ips` and the
/// stack slot it was read from to `slots` (either may be null), at most `depth` of them, innermost
/// first. Stops at a frame pointer outside `bounds`, misaligned or not above the one before it, and
/// at a null return address. Reads only within `bounds`, so a broken chain (code without frame
/// pointers) ends the walk early or gives wrong frames, never a fault. Returns how many it wrote.
std::size_t walk_frame_pointers(const void* fp, stack_bounds bounds, void** ips, void* const** slots,
                                std::size_t depth) noexcept;

/// What is known of a return address: whether the function it returns into keeps the caller's
/// frame pointer in rbp at that call (chained: a walk steps past it correctly), or not (broken: a
/// walk past it skips frames or stops), as an unwind by the binary's unwind tables once showed.
enum class frame_verdict : unsigned char { unknown = 0, chained = 1, broken = 2 };

/// The verdict learned for `return_address`. Lock-free.
frame_verdict verdict_of(const void* return_address) noexcept;

/// Keeps a verdict for `return_address`; the first one kept for an address stays. Lock-free; once
/// the table is full nothing more is kept and verdict_of answers unknown for the rest.
void learn_verdict(const void* return_address, frame_verdict verdict) noexcept;

/// The same walk as walk_frame_pointers (both arrays required), judging each step it takes by the
/// verdict on the return address it steps past: `worst` is chained when every step (each frame's
/// but the last when `depth` frames were written, each frame's when the walk ended before) is known
/// to keep the chain, broken as soon as one is known not to (the walk stops there), else unknown
/// (the walk goes on to `depth` unjudged, for a comparison). `worst` is broken for an empty walk.
struct judged_walk {
  std::size_t count = 0;
  frame_verdict worst = frame_verdict::chained;
};
judged_walk walk_judged(const void* fp, stack_bounds bounds, void** ips, void* const** slots,
                        std::size_t depth) noexcept;

/// Whether the table of verdicts has run out of room (then unknown addresses are not learned).
bool verdicts_full() noexcept;

/// Whether captures may use the frame-pointer walk (option fast_unwind, on by default).
bool fast_unwind() noexcept;
void set_fast_unwind(bool on) noexcept;

}  // namespace gpuguard::detail
