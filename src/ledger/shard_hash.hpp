// Which shard of the live table a pointer's record lives in. Internal to libgpuguard; the tracking
// benchmark includes it too, to pick pointers that share a shard or do not (BM_shard_pair).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuguard::detail {

/// log2 of the live table's shards (ledger.cpp says why 1024).
constexpr unsigned ledger_shard_bits = 10;

/// The live table's hash of a pointer: its top bits pick the shard, the bits below them the slot.
inline std::uint64_t pointer_hash(const void* ptr) noexcept {
  // Allocations are at least 16-byte aligned: drop the zero bits, then spread with a multiply.
  return (static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ptr)) >> 4) * 0x9E3779B97F4A7C15ULL;
}

/// The shard a hash's record is in: the hash's top bits.
inline unsigned ledger_shard_of_hash(std::uint64_t hash) noexcept {
  return static_cast<unsigned>(hash >> (64 - ledger_shard_bits));
}

inline unsigned ledger_shard_of(const void* ptr) noexcept { return ledger_shard_of_hash(pointer_hash(ptr)); }

/// The shift that takes a hash's slot bits down, for a table of `size` slots (see
/// ledger_home_slot). The live table keeps it with each shard's table, so that a probe neither
/// counts the size's bits nor divides a vector's byte length by the record's size.
inline unsigned ledger_slot_shift(std::size_t size) noexcept {
  return 64 - static_cast<unsigned>(__builtin_ctzll(size));
}

/// ledger_home_slot for a table whose ledger_slot_shift is `shift`.
inline std::size_t ledger_home_slot_shifted(std::uint64_t hash, unsigned shift) noexcept {
  return static_cast<std::size_t>((hash << ledger_shard_bits) >> shift);
}

/// Where a hash's probe starts in its shard's table of `size` slots (a power of two, at least 2):
/// the bits just below the shard's. A multiply carries each bit of the address only upwards, so
/// the hash's low bits are zero for aligned addresses: taken as the slot, they put every 2 MiB
/// aligned device buffer at slot 0 and 512-byte blocks on one slot in 32, and lookups then walk
/// runs of neighbours.
inline std::size_t ledger_home_slot(std::uint64_t hash, std::size_t size) noexcept {
  return ledger_home_slot_shifted(hash, ledger_slot_shift(size));
}

}  // namespace gpuguard::detail
