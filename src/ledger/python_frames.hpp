// Python lines as allocation sites: an allocation made by a thread Python runs on records
// the innermost user Python frames (file, line, function) at the front of its site's frames, so a
// site names the Python line that asked for the memory. Python is found at run time (dlsym), never
// linked: a process without it pays one cached check per allocation. Internal to the compiled core.
#pragma once

#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/options.hpp>

#include <atomic>
#include <cstddef>
#include <vector>

namespace gpuguard::detail {

/// Python frames a site keeps at most.
inline constexpr std::size_t max_python_frames = 8;
/// Slots of a site's frames the Python part takes at most: a marker, then one per frame.
inline constexpr std::size_t python_prefix_slots = max_python_frames + 1;

/// Whether an allocation may carry Python frames: the mode is not off and the process is not known
/// to lack Python. Read on every allocation; false once a capture found no Python in the process.
extern std::atomic<bool> python_frames_live;

/// Sets the mode (configure_ledger does, from the `python_frames` option).
void set_python_frames(python_frames_mode mode) noexcept;

/**
 * Writes the calling thread's innermost Python frames as the front of a site's frames: a marker,
 * then one word per frame (innermost first), `python_prefix_slots` at most. Returns how many slots
 * it wrote: 0 when the mode is off, the process has no initialised Python, the thread has no
 * Python thread state (or, where no raw layout is known for this Python, does not hold the GIL),
 * or no frame is running. Never takes the GIL, never blocks on Python; allocates only the first
 * time it meets a code object.
 */
std::size_t capture_python_frames(void** out) noexcept;

/// How many of `frames`' leading slots are a Python part (0: none).
std::size_t python_prefix_length(const void* const* frames, std::size_t count) noexcept;

/// The Python part's frames resolved (function, file, line; address 0). Needs neither the GIL nor
/// a live interpreter: the text was copied when each code object was first met.
std::vector<frame_info> resolve_python_frames(const void* const* frames, std::size_t count);

/// A site's raw frames resolved: its Python part (resolve_python_frames), then its native frames
/// (resolve_frames, stacks.hpp). Slow: for reports only.
std::vector<frame_info> resolve_site_frames(const std::vector<void*>& frames);

/// Whether the process has a Python interpreter whose frames the mode asks for (probes once).
bool python_frames_possible() noexcept;

}  // namespace gpuguard::detail
