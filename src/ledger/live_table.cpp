// The live table's slow paths (live_table.hpp): a shard's first table and its growth.
#include "ledger/live_table.hpp"

#include <new>

namespace gpuguard::detail {

live_shard::live_shard() {
  std::vector<allocation_record> table(live_table_initial_capacity);
  take_table(table);
}

void live_shard::take_table(std::vector<allocation_record>& table) noexcept {
  slots.swap(table);
  mask = slots.size() - 1;
  shift = ledger_slot_shift(slots.size());
}

__attribute__((noinline)) bool live_shard::grow() noexcept {
  try {
    std::vector<allocation_record> bigger(slots.size() * 2);
    const std::size_t bigger_mask = bigger.size() - 1;
    for (const allocation_record& record : slots) {
      if (record.ptr == nullptr) { continue; }
      std::size_t i = ledger_home_slot(pointer_hash(record.ptr), bigger.size());
      while (bigger[i].ptr != nullptr) { i = (i + 1) & bigger_mask; }
      bigger[i] = record;
    }
    take_table(bigger);
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}

}  // namespace gpuguard::detail
