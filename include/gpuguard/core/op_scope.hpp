/**
 * @file op_scope.hpp
 * @brief Per-operation memory deltas: a scope around an operation records what the calling thread
 *        allocated and freed inside it, its peak above the starting point and its duration, and
 *        hands the result to the outputs (docs/outputs.md). Needs the compiled core.
 *
 * The figures come from the ledger's per-thread counters, so they are the same whichever source
 * fed the ledger (tracking resource, LibTorch adapter, preload interposer). Scopes nest: an
 * enclosing scope's figures include its inner scopes'. A scope belongs to the thread that made it
 * and must end on that thread (it is meant to live on the stack).
 */
#pragma once

#include <gpuguard/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gpuguard {

/// What one operation did, as recorded when its scope ended.
struct op_result {
  static constexpr std::size_t max_name = 47;  ///< longer names are cut to this many bytes

  char name[max_name + 1] = {};  ///< null-terminated
  std::int64_t start_ns = 0;     ///< the ledger's clock at entry (ns since gpuguard started)
  std::int64_t duration_ns = 0;
  std::uint64_t alloc_bytes = 0;  ///< allocated by this thread inside the scope
  std::uint64_t free_bytes = 0;   ///< freed by this thread inside the scope (allocated anywhere)
  std::int64_t net_bytes = 0;     ///< alloc_bytes - free_bytes: what the operation left behind
  std::uint64_t peak_bytes = 0;   ///< most the thread's net rose above its value at entry
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint32_t thread = 0;  ///< gpuguard's small id of the thread (1, 2, ...)
  std::uint16_t depth = 0;   ///< 0 for a scope with no enclosing scope on its thread
  bool exception = false;    ///< the scope ended while an exception unwound through it
  bool device_queried = false;  ///< used_before/used_after are filled (op_device_query=1)
  int device = host_device_id;  ///< the device queried (device query or framework probe): current at entry
  std::size_t used_before = 0;  ///< device-wide used bytes at entry (cudaMemGetInfo)
  std::size_t used_after = 0;   ///< device-wide used bytes at exit
  /// With op_device_query=1, the device's current stream-ordered memory pool (cudaMallocAsync's)
  /// was read at entry and exit, and it held memory at one of them. A pool keeps what it reserved
  /// after the frees, so the driver's figure moves with `pool_reserved_delta`, the ledger's with
  /// `pool_used_delta`: used_after - used_before = net_bytes - pool_used_delta + pool_reserved_delta
  /// when this thread is the only one allocating.
  bool pool_queried = false;
  std::int64_t pool_reserved_delta = 0;  ///< cudaMemPoolAttrReservedMemCurrent, exit minus entry
  std::int64_t pool_used_delta = 0;      ///< cudaMemPoolAttrUsedMemCurrent, exit minus entry
  /// A framework's own figures (set_framework_probe; the LibTorch adapter: PyTorch's allocated
  /// and reserved bytes), on the device current at entry. Null when no probe answered.
  const char* framework = nullptr;
  std::int64_t framework_allocated_delta = 0;  ///< the framework's allocated bytes, exit minus entry
  std::int64_t framework_reserved_delta = 0;   ///< the framework's reserved (cached) bytes, exit minus entry

  [[nodiscard]] std::string_view name_view() const noexcept { return name; }
};

/// What a framework that manages device memory itself says about one device.
struct framework_memory {
  std::uint64_t allocated = 0;  ///< bytes in live allocations (tensors)
  std::uint64_t reserved = 0;   ///< bytes the framework holds from the device (its cache included)
};

/// Reads a framework's figures for `device`; false when it cannot say now. Called by every scope at
/// entry and exit on the scope's thread, so it must be cheap, must not throw, and must not call
/// back into gpuguard's scopes.
using framework_probe = bool (*)(int device, framework_memory& out) noexcept;

/**
 * Makes every later scope also record `probe`'s figures (as deltas) under the framework's `name`,
 * a string that must live for the rest of the process ("torch"). nullptr removes the probe. The
 * LibTorch adapter installs one; scopes that are open when it changes are read consistently.
 */
GPUGUARD_API void set_framework_probe(framework_probe probe, const char* name) noexcept;

/// The innermost scope open on the calling thread (its name and start; the figures are only known
/// at its end), or nullptr. For reports made in the middle of an operation, such as out of memory.
[[nodiscard]] GPUGUARD_API const op_result* current_op() noexcept;

/**
 * Records the memory an operation takes. Construct it at the start of the operation; the result is
 * recorded and sent to the outputs when the scope ends (or at `end()`). Costs two clock reads and
 * a few thread-local reads; with `op_device_query=1` also two `cudaMemGetInfo` calls and two reads of
 * the device's memory pool. If the
 * outputs are not running yet, the first scope starts them with `process_options()`.
 *
 * Never throws. Not copyable or movable: it is tied to its thread's stack of scopes.
 */
class GPUGUARD_API op_scope {
 public:
  explicit op_scope(std::string_view name) noexcept;
  op_scope(const op_scope&) = delete;
  op_scope& operator=(const op_scope&) = delete;
  op_scope(op_scope&&) = delete;
  op_scope& operator=(op_scope&&) = delete;
  ~op_scope();

  /// Ends the scope now and returns its result; later calls (and the destructor) do nothing and
  /// return the same result. Must be called on the thread that made the scope, and inner scopes
  /// must have ended first.
  const op_result& end() noexcept;

  /// The result so far is only known at the end; this is the name and start of the scope.
  [[nodiscard]] const op_result& result() const noexcept;

 private:
  mutable op_result result_;      // start_ns is filled from start_ticks_ when first asked for
  std::int64_t start_ticks_ = 0;  // the clock's raw reading at entry
  mutable bool start_known_ = false;
  void* thread_ = nullptr;  // the thread's gpuguard state, looked up once at entry
  op_scope* parent_ = nullptr;
  std::uint64_t allocated_at_start_ = 0;
  std::uint64_t freed_at_start_ = 0;
  std::uint64_t allocs_at_start_ = 0;
  std::uint64_t frees_at_start_ = 0;
  std::int64_t net_at_start_ = 0;
  std::int64_t parent_peak_ = 0;
  int uncaught_at_start_ = 0;
  framework_probe probe_ = nullptr;
  framework_memory framework_at_start_{};
  std::uint64_t pool_reserved_at_start_ = 0;
  std::uint64_t pool_used_at_start_ = 0;
  bool ended_ = false;
  bool nvtx_ = false;
};

}  // namespace gpuguard

/// Records the memory of the rest of the enclosing block as the operation `name`:
/// `GPUGUARD_OP("forward");`
#define GPUGUARD_OP(name) ::gpuguard::op_scope GPUGUARD_DETAIL_UNIQUE(gpuguard_op_scope_)(name)
