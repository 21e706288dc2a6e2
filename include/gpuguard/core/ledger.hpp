/**
 * @file ledger.hpp
 * @brief The process-wide ledger as its readers see it: exact counters per device and per tag,
 *        snapshots of every live allocation, tags, allocation sites and misuse counts. Sources
 *        record into it through allocation_source.hpp (the tracking resource, the LibTorch
 *        adapter and the preload interposer do); every report reads from it. Part of the compiled
 *        core (gpuguard::gpuguard).
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/memory_resource.hpp>
#include <gpuguard/core/options.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuguard {

/// An allocation site: an interned stack (Python frames, native frames or both). 0 means "no
/// stack" (stacks off or not sampled, and no Python frames).
using site_id = std::uint32_t;
inline constexpr site_id no_site = 0;

/// A tag: a short label for a region of code. 0 is "untagged".
using tag_id = std::uint16_t;
inline constexpr tag_id untagged = 0;
/// Tags beyond this many distinct labels all count as one "(other)" tag.
inline constexpr int max_tags = 256;

/// Counter values for one device or one tag at one moment.
struct counters {
  std::size_t current_bytes = 0;     ///< live bytes now
  std::size_t peak_bytes = 0;        ///< most live bytes ever
  std::size_t phase_peak_bytes = 0;  ///< most live bytes since the last `reset_phase_peak()`
  std::size_t total_bytes = 0;       ///< bytes ever allocated
  std::uint64_t allocations = 0;     ///< allocations ever recorded
  std::uint64_t frees = 0;           ///< frees ever recorded
  [[nodiscard]] std::uint64_t live_count() const noexcept { return allocations - frees; }
};

/// One allocation as the ledger knows it.
struct allocation_record {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  int device = host_device_id;
  cudaStream_t stream = nullptr;
  memory_kind kind = memory_kind::device;
  tag_id tag = untagged;
  std::uint32_t thread = 0;   ///< gpuguard's small id for the allocating thread (1, 2, ...)
  /// When it was allocated: nanoseconds since the ledger started, on the kernel's coarse
  /// monotonic clock (CLOCK_MONOTONIC_COARSE, steady_clock's scale), so about one kernel tick (a
  /// few milliseconds) early. The JSONL log and the Chrome trace time each event exactly.
  std::int64_t time_ns = 0;
  site_id site = no_site;
  /// Unique per allocation and increasing within each thread. Threads take numbers in blocks
  /// (so that allocating needs no shared counter): across threads they follow the blocks, not the
  /// exact order of allocation (the JSONL log's event times give that).
  std::uint64_t sequence = 0;
};

/// Kinds of misuse the ledger detects when memory is freed.
enum class misuse_kind { unknown_pointer, double_free, wrong_size, wrong_device };
GPUGUARD_API const char* to_string(misuse_kind kind) noexcept;

struct misuse_counts {
  std::uint64_t unknown_pointer = 0;
  std::uint64_t double_free = 0;
  std::uint64_t wrong_size = 0;
  std::uint64_t wrong_device = 0;
  [[nodiscard]] std::uint64_t total() const noexcept {
    return unknown_pointer + double_free + wrong_size + wrong_device;
  }
};

/// A consistent copy of the ledger: all of it as of one instant.
struct ledger_snapshot {
  std::vector<std::pair<int, counters>> devices;        ///< devices that ever allocated (host: -1), ascending
  std::vector<std::pair<std::string, counters>> tags;   ///< tags that ever allocated, by id ("" = untagged)
  misuse_counts misuse;
  std::vector<allocation_record> live;                  ///< only when asked for; by sequence
};

/// A resolved stack frame.
struct frame_info {
  std::uintptr_t address = 0;
  std::string function;  ///< demangled name, or "" when unknown
  std::string file;      ///< source file, or "" when unknown
  std::size_t line = 0;  ///< 0 when unknown
};

/// A consistent copy of counters (and, if `with_live`, of every live allocation). Safe while other
/// threads allocate: it briefly holds every shard of the live table.
GPUGUARD_API ledger_snapshot snapshot(bool with_live = false);

/// Counters of one device (host: host_device_id), each field exact. While the device's live bytes
/// are kept per thread (docs/tracking.md, "The ledger") it holds every shard of the live table for
/// a moment, as snapshot() does; otherwise it reads without stopping other threads, and fields
/// may be from instants a few nanoseconds apart. Not for a signal handler.
GPUGUARD_API counters device_counters(int device) noexcept;

/// Starts a new phase: every device's and tag's phase peak becomes its current bytes. The global
/// peak is left alone.
GPUGUARD_API void reset_phase_peak() noexcept;

/// Misuse seen so far.
GPUGUARD_API misuse_counts misuse() noexcept;

/// Stack capture and misuse settings from `opts` (stacks, stack_sample, stack_depth,
/// abort_on_error). Takes effect for later records.
GPUGUARD_API void configure_ledger(const options& opts) noexcept;

/// The interned tag for `name` (at most 63 bytes are kept). Never fails: past max_tags distinct
/// names, returns the id of "(other)".
GPUGUARD_API tag_id intern_tag(std::string_view name) noexcept;
GPUGUARD_API std::string tag_name(tag_id tag);

/// The calling thread's current tag, which new allocations are recorded under.
GPUGUARD_API tag_id current_tag() noexcept;
GPUGUARD_API void set_current_tag(tag_id tag) noexcept;

/**
 * Marks the code of the loaded shared objects whose file name (not its folders) contains `name_part`
 * (such as "libtorch" or "libc10") as lying between an allocation and the code that asked for it: stacks
 * captured from now on pass over such frames at their innermost end, so that `stack_depth` frames
 * are spent on the caller's code. A framework's adapter calls it (the LibTorch adapter does, for
 * PyTorch's libraries and gpuguard's own). Returns how many code segments were added. Not for the
 * hot path: it walks the loaded modules.
 */
GPUGUARD_API std::size_t skip_frames_in_modules(std::string_view name_part) noexcept;

/// The frames of a site, resolved to function, file and line (slow: for reports only). Frames
/// inside gpuguard itself are dropped from the front. A site of an allocation made while Python
/// ran (the `python_frames` option) begins with its Python frames, innermost first, each with
/// address 0; its native frames, when stacks were captured, follow them.
GPUGUARD_API std::vector<frame_info> resolve_site(site_id site);

/// Tags allocations made by this thread until the end of the scope; restores the previous tag.
class scoped_tag {
 public:
  explicit scoped_tag(std::string_view name) noexcept : previous_(current_tag()) {
    set_current_tag(intern_tag(name));
  }
  scoped_tag(const scoped_tag&) = delete;
  scoped_tag& operator=(const scoped_tag&) = delete;
  scoped_tag(scoped_tag&&) = delete;
  scoped_tag& operator=(scoped_tag&&) = delete;
  ~scoped_tag() { set_current_tag(previous_); }

 private:
  tag_id previous_;
};

}  // namespace gpuguard

/// Tags this thread's allocations with `name` for the rest of the enclosing scope.
#define GPUGUARD_TAG(name) ::gpuguard::scoped_tag GPUGUARD_DETAIL_UNIQUE(gpuguard_scoped_tag_)(name)
