// Allocation-site stacks: raw capture on the hot path, interning into sites, and resolution to
// function/file/line only when a report asks. Internal to the compiled core.
#pragma once

#include <gpuguard/core/ledger.hpp>

#include <cstddef>
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

/// Empties the calling thread's capture cache, so that its next captures walk or unwind. For tests.
void forget_cached_stacks() noexcept;

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
