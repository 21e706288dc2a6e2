// What a source that records a thread's calls later, on another thread, needs of the ledger:
// libgpuguard_preload.so does, while one thread alone allocates (docs/run.md, "What --track
// costs"). The interposer alone includes it: these are exported from libgpuguard for it, and
// installed with no header. Internal to gpuguard.
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/core/allocation_source.hpp>

#include "ledger/ledger_internal.hpp"

#include <cstdint>

namespace gpuguard {

/// Whether this process's allocations may carry Python frames (the `python_frames` option is on
/// and a Python interpreter runs here): such a source must record them on the allocating thread.
GPUGUARD_API bool python_frames_expected() noexcept;

/// gpuguard's small id of the calling thread (1, 2, ...), as records and outputs name threads.
GPUGUARD_API std::uint32_t ledger_thread_id() noexcept;

/// record_allocation as if made by the thread with id `thread` under tag `tag` (not the calling
/// thread's): the record and its event name that thread. The calling thread's tag is left alone,
/// and its operation scopes count the record only when `thread` is its own id.
GPUGUARD_API void record_allocation_as(const allocation_event& event, tag_id tag, std::uint32_t thread) noexcept;
/// record_interposed_free as if made by the thread with id `thread`.
GPUGUARD_API free_result record_interposed_free_as(const void* ptr, int current_device, std::uint32_t thread) noexcept;

/**
 * Sets the function that brings the ledger up to date with what such a source holds back (nullptr:
 * none). The ledger calls it at the start of snapshot(), device_counters(), misuse() and
 * reset_phase_peak() (the leak report, the outputs' samples and every exit path read through
 * them), and when the process's first tag or operation scope begins; never from a signal handler
 * (a crash record shows what was recorded by then). It must not read the ledger itself.
 */
GPUGUARD_API void set_ledger_catch_up(void (*catch_up)() noexcept) noexcept;

}  // namespace gpuguard
