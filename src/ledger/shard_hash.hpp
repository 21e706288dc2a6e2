// Which shard of the live table a pointer's record lives in. Internal to libgpuguard; the tracking
// benchmark includes it too, to pick pointers that share a shard or do not (BM_shard_pair).
#pragma once

#include <cstdint>

namespace gpuguard::detail {

/// log2 of the live table's shards (ledger.cpp says why 256).
constexpr unsigned ledger_shard_bits = 8;

/// The live table's hash of a pointer: its top bits pick the shard, its low bits the slot.
inline std::uint64_t pointer_hash(const void* ptr) noexcept {
  // Allocations are at least 16-byte aligned: drop the zero bits, then spread with a multiply.
  return (static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ptr)) >> 4) * 0x9E3779B97F4A7C15ULL;
}

inline unsigned ledger_shard_of(const void* ptr) noexcept {
  return static_cast<unsigned>(pointer_hash(ptr) >> (64 - ledger_shard_bits));
}

}  // namespace gpuguard::detail
