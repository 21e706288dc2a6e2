// The ledger's tags: short labels interned to small ids, which allocations are counted under.
// Internal to libgpuguard; ledger.hpp's intern_tag and tag_name read the process's one table.
#pragma once

#include <gpuguard/core/ledger.hpp>

#include <array>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace gpuguard::detail {

/// Longest tag name kept; longer ones are cut to it (and then share an id).
inline constexpr std::size_t max_tag_length = 63;

class tag_table {
 public:
  /// The id of `name` ("" is untagged). Never fails: past max_tags distinct names, the id of
  /// "(other)"; out of memory, untagged.
  tag_id intern(std::string_view name) noexcept;
  /// The name of `tag`; "" for untagged and for an id never handed out.
  std::string name(tag_id tag) const;

 private:
  mutable std::mutex mutex_;
  std::array<std::string, max_tags> names_;  // names_[0] = "" (untagged)
  std::unordered_map<std::string, tag_id> ids_;
  int count_ = 1;
  tag_id other_ = untagged;
};

/// The process's table; lives through exit (reports at exit read it).
tag_table& process_tags();

}  // namespace gpuguard::detail
