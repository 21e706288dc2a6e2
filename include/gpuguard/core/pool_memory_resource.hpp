/**
 * @file pool_memory_resource.hpp
 * @brief A caching pool over any resource, in the manner of PyTorch's CUDA caching allocator:
 *        requests rounded to 512 bytes, small ones carved from 2 MiB segments, large ones
 *        best-fit over larger segments, blocks split and merged again, and a freed block reused
 *        at once by its own stream. Needs the compiled core (`gpuguard::gpuguard`): its reserve is
 *        named in the exit report. docs/pool.md says how to use it and what it costs.
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/memory_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace gpuguard {

/// A pool's figures at one instant (all of them from one moment: read under the pool's lock).
struct pool_statistics {
  std::size_t allocated_bytes = 0;       ///< handed out now, as the pool rounded them (512-byte steps)
  std::size_t requested_bytes = 0;       ///< handed out now, as asked for
  std::size_t reserved_bytes = 0;        ///< held from the upstream now: segments, live and cached
  std::size_t peak_allocated_bytes = 0;  ///< most allocated at once (since construction or reset_peaks)
  std::size_t peak_reserved_bytes = 0;   ///< most reserved at once (since construction or reset_peaks)
  std::uint64_t segments = 0;            ///< segments held now
  std::uint64_t live_blocks = 0;         ///< blocks handed out now
  std::uint64_t allocations = 0;         ///< allocations ever
  std::uint64_t frees = 0;               ///< frees ever (of blocks the pool handed out)
  std::uint64_t segment_allocations = 0; ///< upstream allocations ever (each a new segment)
  std::uint64_t segment_releases = 0;    ///< segments given back to the upstream ever
  std::uint64_t cache_flushes = 0;       ///< times an allocation synchronized and gave the cache back to retry
  std::uint64_t unknown_frees = 0;       ///< frees of pointers the pool did not hand out (ignored)
  /// Reserved but not handed out: the cache.
  [[nodiscard]] std::size_t cached_bytes() const noexcept { return reserved_bytes - allocated_bytes; }
};

/// Makes work queued later on `waiter` wait for the work queued so far on `freed_on`.
using pool_stream_wait = void (*)(stream_view waiter, stream_view freed_on) noexcept;
/// Waits on the host until every stream of `device` has finished its queued work.
using pool_synchronize = void (*)(int device) noexcept;

/// A pool's knobs. The defaults are PyTorch's.
struct pool_options {
  static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();
  /// The most the pool holds from its upstream. Past it, an allocation first gives the cache back
  /// (after a synchronization) and then throws out_of_memory.
  std::size_t reserve_limit = unlimited;
  /// Blocks of at least this many bytes are never split, and serve only requests of at least this
  /// size (PyTorch's `max_split_size_mb`): large tensors then cannot fragment the pool.
  std::size_t max_split_bytes = unlimited;
  /// The pool's name in messages and in the exit report.
  std::string name = "gpuguard pool";
  /// How a block freed on another stream than the one it was allocated on is made safe for its
  /// own stream again. nullptr: a CUDA event (device, pinned and managed memory), nothing (host).
  pool_stream_wait wait = nullptr;
  /// How the pool waits before it gives segments back (empty, trim, a retry after the upstream ran
  /// out). nullptr: cudaDeviceSynchronize on the pool's device (CUDA memory), nothing (host).
  pool_synchronize synchronize = nullptr;
};

/// What one live pool holds at an instant, as the exit report names it.
struct pool_holding {
  std::string name;
  int device = host_device_id;
  pool_statistics statistics;
};

/// Every pool alive now with something reserved, in the order they were made.
GPUGUARD_API std::vector<pool_holding> pool_holdings();

/**
 * A caching pool over `upstream`. Requests are rounded up to 512 bytes. Those of at most 1 MiB come
 * from 2 MiB segments, those under 10 MiB from 20 MiB segments, larger ones from a segment of
 * their own size rounded up to 2 MiB; a free block is chosen best-fit (the smallest that fits) and
 * split when the rest is worth keeping (at least 512 bytes of a small segment, more than 1 MiB of
 * a large one). A freed block merges with free neighbours of its segment.
 *
 * Streams: every segment belongs to the stream it was first allocated on, and its blocks serve
 * only that stream: a block freed is reused by its stream at once, with no synchronization (the
 * stream's later work comes after its earlier work). A block freed on another stream is first
 * made safe for its own (`pool_options::wait`: an event recorded on the freeing stream that its
 * own stream waits for). Another stream gets the memory only after it went back to the upstream:
 * when the upstream runs out, or at the reserve limit, the pool synchronizes the device, gives
 * every wholly free segment back and tries once more (PyTorch's rule).
 *
 * Thread-safe: one lock per pool. The caller's rules are memory_resource's: free with the pool
 * that allocated, on a stream where the memory is no longer in use.
 */
class GPUGUARD_API pool_memory_resource final : public memory_resource {
 public:
  static constexpr std::size_t round_bytes = 512;
  static constexpr std::size_t small_request_limit = std::size_t{1} << 20;
  static constexpr std::size_t small_segment_bytes = std::size_t{2} << 20;
  static constexpr std::size_t large_segment_bytes = std::size_t{20} << 20;
  static constexpr std::size_t own_segment_from = std::size_t{10} << 20;
  static constexpr std::size_t own_segment_round = std::size_t{2} << 20;

  /// `device` is the device `upstream`'s memory belongs to (host_device_id for host and pinned
  /// memory); the pool enters it to synchronize and give memory back. The upstream must outlive
  /// the pool. @throws std::invalid_argument for a reserve limit under 512 bytes.
  pool_memory_resource(memory_resource& upstream, int device, pool_options options = {});
  /// Gives every wholly free segment back to the upstream. Blocks still handed out are reported
  /// on stderr (count, bytes, name) and their segments are left to the process, never freed under
  /// their users. Never throws.
  ~pool_memory_resource() override;
  pool_memory_resource(const pool_memory_resource&) = delete;
  pool_memory_resource& operator=(const pool_memory_resource&) = delete;
  pool_memory_resource(pool_memory_resource&&) = delete;
  pool_memory_resource& operator=(pool_memory_resource&&) = delete;

  [[nodiscard]] memory_resource& upstream() const noexcept { return *upstream_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] const std::string& name() const noexcept;

  [[nodiscard]] pool_statistics statistics() const noexcept;
  /// Makes the peaks the current figures.
  void reset_peaks() noexcept;
  /// Synchronizes, then gives every wholly free segment back to the upstream; returns the bytes
  /// given back. Blocks handed out, and segments holding any, stay.
  std::size_t empty() noexcept;
  /// As empty(), but stops once at most `keep_bytes` are reserved (largest segments go first).
  std::size_t trim(std::size_t keep_bytes) noexcept;

  /// Segment sizes a request of `bytes` (already rounded) is carved from, and the rounding: the
  /// pool's size classes, for tests and for reading its statistics.
  [[nodiscard]] static std::size_t rounded_size(std::size_t bytes) noexcept;
  [[nodiscard]] static std::size_t segment_size(std::size_t rounded) noexcept;

 private:
  struct state;
  void* do_allocate(std::size_t bytes, stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, stream_view stream) noexcept override;
  [[nodiscard]] memory_kind do_kind() const noexcept override { return kind_; }
  friend std::vector<pool_holding> pool_holdings();

  memory_resource* upstream_;
  int device_;
  memory_kind kind_;
  std::unique_ptr<state> state_;
};

}  // namespace gpuguard
