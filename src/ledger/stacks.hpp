// Allocation-site stacks: raw capture on the hot path, interning into sites, and resolution to
// function/file/line only when a report asks. Internal to the compiled core.
#pragma once

#include <gpuguard/core/ledger.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpuguard::detail {

inline constexpr std::size_t max_stack_depth = 64;

/// Raw return addresses of the calling thread, innermost first; no allocation, no locks.
/// Returns how many were written (at most `depth`).
std::size_t capture_frames(void** frames, std::size_t depth) noexcept;

/// Like capture_frames, but first passes over the innermost frames that lie in modules marked with
/// skip_frames_in_modules (a framework's allocator and dispatcher), so that `depth` frames are spent
/// on the code that asked for the memory. No allocation, no locks.
std::size_t capture_caller_frames(void** frames, std::size_t depth) noexcept;

/// How many of the calling thread's captures (capture_caller_frames) its capture cache answered
/// without unwinding. For tests.
std::uint64_t cached_captures() noexcept;

/// Empties the calling thread's capture cache (and the sites it remembered), so that its next
/// captures walk or unwind. For tests.
void forget_cached_stacks() noexcept;

/// Longest prefix (a site's Python part, python_frames.hpp) whose site a cached stack remembers.
inline constexpr std::size_t max_memo_prefix = 9;

/**
 * The site of `frames`' first `prefix_count` slots (written by the caller: a Python part) followed
 * by capture_caller_frames(depth) of the calling thread: what intern_site gives for those frames.
 * A stack the capture cache answers remembers the sites it was interned into, by prefix, depth
 * and skipped modules, so a repeated site costs neither the copy of its frames nor interning.
 * `frames` has room for prefix_count + max_stack_depth slots; what it holds after is unspecified.
 * No allocation, no locks, except the first time a site is seen (intern_site).
 */
site_id capture_caller_site(void** frames, std::size_t prefix_count, std::size_t depth) noexcept;

/// How many of the calling thread's capture_caller_site calls a remembered site answered. For tests.
std::uint64_t memoized_sites() noexcept;

/// The site for these frames: the same frames always give the same id. Allocates only the first
/// time a stack is seen. Returns no_site if interning fails (out of memory).
site_id intern_site(void* const* frames, std::size_t count) noexcept;

/// The raw frames of a site (empty for no_site or an unknown id).
std::vector<void*> site_frames(site_id site);

/// Resolved frames, with gpuguard's own frames dropped from the front.
std::vector<frame_info> resolve_frames(const std::vector<void*>& frames);

/// The name of the stack backend this build uses ("backtrace", "addr2line", "basic", ...).
const char* stack_backend() noexcept;

}  // namespace gpuguard::detail
