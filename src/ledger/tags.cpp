// The ledger's tags (tags.hpp).
#include "ledger/tags.hpp"

#include "ledger/postmortem.hpp"

#include <utility>

namespace gpuguard {

namespace detail {

tag_id tag_table::intern(std::string_view name) noexcept {
  if (name.empty()) { return untagged; }
  try {
    std::string key(name.substr(0, max_tag_length));
    tag_id id = untagged;
    bool made = false;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (const auto it = ids_.find(key); it != ids_.end()) { return it->second; }
      if (count_ == max_tags - 1 && other_ == untagged) {
        other_ = static_cast<tag_id>(count_++);
        names_[other_] = "(other)";
        key = names_[other_];
        id = other_;
        made = true;
      } else if (count_ >= max_tags) {
        return other_;
      } else {
        id = static_cast<tag_id>(count_++);
        names_[id] = key;
        ids_.emplace(key, id);
        made = true;
      }
    }
    // Outside the table's lock (the post-mortem's writer takes it under its own): a new name is
    // kept where the supervisor can read it after the process is gone.
    if (made) { postmortem::note_tag(id, key); }
    return id;
  } catch (...) {  // out of memory or a broken mutex: count it untagged rather than fail
    return untagged;
  }
}

std::string tag_table::name(tag_id tag) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return tag < max_tags ? names_[tag] : std::string();
}

tag_table& process_tags() {
  static auto* table = new tag_table();  // lives through exit: reports at exit read it
  return *table;
}

}  // namespace detail

tag_id intern_tag(std::string_view name) noexcept { return detail::process_tags().intern(name); }

std::string tag_name(tag_id tag) { return detail::process_tags().name(tag); }

}  // namespace gpuguard
