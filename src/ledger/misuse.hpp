// Misuse the ledger sees at a free (an unknown pointer, a double free, a wrong size, a wrong
// device): its counts, and its report on stderr with the stacks involved. Reports are rare, so
// they may format, resolve and write. Internal to libgpuguard.
#pragma once

#include <gpuguard/core/ledger.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace gpuguard::detail {

/// What a free found wrong, as the ledger saw it.
struct misuse_report {
  bool interposed;  ///< seen by an interposer, which passes every free on to CUDA
  misuse_kind kind;
  const void* ptr;
  std::size_t bytes_given;
  std::size_t bytes_recorded;
  int device_given;
  int device_recorded;
  site_id allocated_at;
  site_id freed_at;  ///< the first free's site, for a double free
};

/// Writes `m` to `out`: what was wrong and what the free then did, where the memory was allocated
/// (and first freed), and `here`, the site of this free (no_site: stacks were off). Never throws.
void write_misuse_report(std::FILE* out, const misuse_report& m, site_id here) noexcept;

/// The ledger's misuse counts, and the frees of pointers it did not know seen by an interposer
/// (memory from before tracking began: not misuse). Written at misuse only, so they share a line.
struct misuse_counters {
  std::atomic<std::uint64_t> unknown_pointer{0};
  std::atomic<std::uint64_t> double_free{0};
  std::atomic<std::uint64_t> wrong_size{0};
  std::atomic<std::uint64_t> wrong_device{0};
  std::atomic<std::uint64_t> untracked_frees{0};

  void count(misuse_kind kind) noexcept { of(kind).fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] misuse_counts read() const noexcept;
  void clear() noexcept;

 private:
  std::atomic<std::uint64_t>& of(misuse_kind kind) noexcept {
    switch (kind) {
      case misuse_kind::unknown_pointer: return unknown_pointer;
      case misuse_kind::double_free: return double_free;
      case misuse_kind::wrong_size: return wrong_size;
      case misuse_kind::wrong_device: return wrong_device;
    }
    return unknown_pointer;
  }
};

}  // namespace gpuguard::detail
