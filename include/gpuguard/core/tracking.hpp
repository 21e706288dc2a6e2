/**
 * @file tracking.hpp
 * @brief Turning tracking on under every guard, and the leak report. Needs the compiled core.
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/options.hpp>
#include <gpuguard/core/pool_memory_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gpuguard {

/**
 * Slots a `tracking_resource` under the current resource of every device and of pinned buffers,
 * so existing `device_buffer` code is tracked without change, applies the stack and misuse
 * options, and registers the exit report (after initialising the CUDA runtime, so it runs before
 * the runtime's own teardown). With device=host, or device=auto on a machine without a GPU, the
 * guards allocate host memory instead, and a line on stderr says so. Calling it again changes
 * nothing. @throws cuda_error only for CUDA failures other than "no device".
 */
GPUGUARD_API void enable_tracking(const options& opts = process_options());

/**
 * For sources that feed the ledger themselves (the preload interposer, the LibTorch adapter):
 * applies the stack and misuse options, starts the outputs, installs the hooks (per `opts.hooks`)
 * and arranges the leak report at exit, like enable_tracking, but leaves the guards' resources
 * alone and does not initialise CUDA. Calling it again, or after enable_tracking, changes nothing.
 */
GPUGUARD_API void enable_ledger_reporting(const options& opts = process_options());

/// Puts back the resources that were current before `enable_tracking`. Buffers made while
/// tracking keep freeing through (and being recorded by) the tracking resources, which live on.
GPUGUARD_API void disable_tracking() noexcept;

[[nodiscard]] GPUGUARD_API bool tracking_enabled() noexcept;

/// Live allocations from one site on one device under one tag.
struct leak_site {
  site_id site = no_site;
  int device = host_device_id;
  std::string tag;
  std::size_t bytes = 0;
  std::uint64_t count = 0;
  std::vector<frame_info> frames;  ///< resolved; empty without a stack
  /// The raw stack ids grouped here (`site` is the first): stacks that differ only in return
  /// addresses within the same source lines (an unrolled loop, inlined copies) are one site.
  std::vector<site_id> raw_sites;
};

/// Everything still live, grouped by site, largest first: what was lost (`sites`), and apart from
/// it what a declared exit holder keeps on purpose (`held`, see declare_exit_holder).
struct leak_report {
  std::size_t bytes = 0;       ///< leaked: live, and not under an exit holder's tag
  std::uint64_t count = 0;
  std::vector<leak_site> sites;
  std::size_t held_bytes = 0;  ///< live under an exit holder's tag (a cache), not counted as leaked
  std::uint64_t held_count = 0;
  std::vector<leak_site> held; ///< by (site, device, tag), largest first; resolved and merged as `sites`
  misuse_counts misuse;
  std::vector<std::pair<int, counters>> devices;
  /// What gpuguard's caching pools hold from their upstreams (pool_memory_resource): their cache,
  /// named apart from the allocations above (collect_leaks fills it; group_leaks leaves it empty).
  std::vector<pool_holding> pools;
};

/**
 * Declares that what is live under `tag` when the process ends is kept there on purpose by its
 * owner until then, as a cache (PyTorch's caching allocator keeps its segments, and the driver
 * frees them at exit): the exit report lists it as held by the tag's name, not as leaked, and
 * leak_exitcode does not count it. The preload interposer declares the tag under which it records
 * allocations made by a caching allocator it recognises (docs/run.md).
 */
GPUGUARD_API void declare_exit_holder(tag_id tag) noexcept;
/// Whether `tag` was declared with declare_exit_holder.
[[nodiscard]] GPUGUARD_API bool is_exit_holder(tag_id tag) noexcept;
/// Groups the ledger's live allocations by (site, device, tag), largest first, and resolves the
/// stacks of the first `max_resolved` sites (the slow part); sites whose resolved frames name the
/// same functions, files and lines are then one site (their raw ids in `raw_sites`).
GPUGUARD_API leak_report collect_leaks(std::size_t max_resolved = 100000);
/// Groups `live` (some of the ledger's live allocations, such as those one test left: see
/// gpuguard/core/testing.hpp) as collect_leaks groups all of them, exit holders' tags apart; the
/// report's `devices` and `misuse` are left empty.
GPUGUARD_API leak_report group_leaks(const std::vector<allocation_record>& live,
                                     std::size_t max_resolved = 100000);

/// The text report: a headline, then up to `max_sites` sites with their frames.
GPUGUARD_API void write_leak_text(std::FILE* out, const leak_report& report, std::size_t max_sites);

/// The JSON report (docs/formats.md, schema "gpuguard.leaks" version 1), written to a temporary
/// file and renamed. Returns false and sets `error` (naming the path) on failure.
GPUGUARD_API bool write_leak_json(const std::string& path, const leak_report& report,
                                  std::string* error);

/// What a source knows about an allocation that failed for lack of device memory.
struct out_of_memory_info {
  const char* source = nullptr;  ///< who asked, for the message ("PyTorch's caching allocator")
  int device = 0;
  std::size_t requested = 0;     ///< bytes asked for
  std::size_t free_bytes = 0;    ///< the device's free bytes, as the source saw them
  std::size_t total_bytes = 0;
};

/// Writes to stderr what was live when an allocation failed for lack of memory: the request, the
/// operation scope open on the calling thread, the ledger's live bytes on that device and its five
/// largest live sites (with stacks when they were captured). Slow (resolves stacks); never throws.
GPUGUARD_API void report_out_of_memory(const out_of_memory_info& info) noexcept;

/// What the exit handler does: the cleanups, the text report (leak_report=1), the JSON file
/// (leak_json), and, with leaks and leak_exitcode=N, ends the process with status N. Runs once;
/// later calls return at once. Exposed for tests and for exit paths that cannot rely on atexit.
/// `exit_status` is the status the process is ending with (an `on_exit` handler gets it), kept if
/// the work takes longer than cleanup_timeout and the process is ended; negative: not known
/// (then EXIT_FAILURE). In a child made by fork() there is no leak report (docs/hooks.md).
GPUGUARD_API void run_exit_report(int exit_status = -1) noexcept;

}  // namespace gpuguard
