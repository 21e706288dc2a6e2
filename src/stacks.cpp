// Stack capture and site interning with Boost.Stacktrace. The backend (Debian's compiled
// libboost_stacktrace_backtrace here, header-only addr2line or basic elsewhere) is chosen by CMake.
#include "stacks.hpp"

#include <boost/stacktrace/frame.hpp>
#include <boost/stacktrace/safe_dump_to.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>

namespace gpuguard::detail {

namespace {

constexpr unsigned site_shard_bits = 4;
constexpr unsigned site_shard_count = 1U << site_shard_bits;
constexpr unsigned site_index_bits = 32 - site_shard_bits;

struct site_entry {
  std::vector<void*> frames;
};

struct site_shard {
  std::mutex mutex;
  std::unordered_multimap<std::uint64_t, std::uint32_t> by_hash;  // hash -> local index
  std::deque<site_entry> entries;                                 // stable addresses
};

std::array<site_shard, site_shard_count>& site_shards() {
  static auto* shards = new std::array<site_shard, site_shard_count>();  // lives through exit
  return *shards;
}

std::uint64_t hash_frames(void* const* frames, std::size_t count) noexcept {
  std::uint64_t hash = 1469598103934665603ULL;  // FNV-1a over the addresses
  for (std::size_t i = 0; i < count; ++i) {
    hash ^= reinterpret_cast<std::uintptr_t>(frames[i]);
    hash *= 1099511628211ULL;
  }
  return hash ^ count;
}

// The qualified name of a demangled function, without its return type and parameters:
// "void std::vector<int>::push_back(int&&)" -> "std::vector<int>::push_back".
std::string_view qualified_name(std::string_view name) {
  int angle = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<') { ++angle; }
    else if (c == '>') { --angle; }
    else if (angle == 0 && c == ' ') { start = i + 1; }
    else if (angle == 0 && c == '(') { return name.substr(start, i - start); }
  }
  return name.substr(start);
}

// Frames of gpuguard and of the standard library's containers and allocators, which stand between
// the allocation and the code that asked for it. Dropped from the front of a site's frames.
bool is_internal_frame(const std::string& function) {
  const std::string_view name = qualified_name(function);
  for (const std::string_view prefix : {"gpuguard::", "std::", "__gnu_cxx::", "boost::stacktrace::"}) {
    if (name.substr(0, prefix.size()) == prefix) { return true; }
  }
  return false;
}

}  // namespace

std::size_t capture_frames(void** frames, std::size_t depth) noexcept {
  // safe_dump_to writes at most size/sizeof(void*) - 1 addresses and a terminating null.
  std::array<void*, max_stack_depth + 2> buffer{};
  const std::size_t wanted = depth < max_stack_depth ? depth : max_stack_depth;
  const std::size_t got = boost::stacktrace::safe_dump_to(1, buffer.data(),
                                                          (wanted + 1) * sizeof(void*));
  const std::size_t count = got < wanted ? got : wanted;
  std::memcpy(frames, buffer.data(), count * sizeof(void*));
  return count;
}

site_id intern_site(void* const* frames, std::size_t count) noexcept {
  if (count == 0) { return no_site; }
  const std::uint64_t hash = hash_frames(frames, count);
  const unsigned shard_index = static_cast<unsigned>(hash >> (64 - site_shard_bits));
  site_shard& shard = site_shards()[shard_index];
  try {
    const std::lock_guard<std::mutex> lock(shard.mutex);
    const auto range = shard.by_hash.equal_range(hash);
    for (auto it = range.first; it != range.second; ++it) {
      const site_entry& entry = shard.entries[it->second];
      if (entry.frames.size() == count &&
          std::memcmp(entry.frames.data(), frames, count * sizeof(void*)) == 0) {
        return (shard_index << site_index_bits) | (it->second + 1);
      }
    }
    const auto local = static_cast<std::uint32_t>(shard.entries.size());
    if (local + 1 >= (1U << site_index_bits)) { return no_site; }
    shard.entries.push_back(site_entry{std::vector<void*>(frames, frames + count)});
    shard.by_hash.emplace(hash, local);
    return (shard_index << site_index_bits) | (local + 1);
  } catch (const std::bad_alloc&) {
    return no_site;
  } catch (const std::system_error&) {
    return no_site;
  }
}

std::vector<void*> site_frames(site_id site) {
  if (site == no_site) { return {}; }
  const unsigned shard_index = site >> site_index_bits;
  const std::uint32_t local = (site & ((1U << site_index_bits) - 1)) - 1;
  site_shard& shard = site_shards()[shard_index];
  const std::lock_guard<std::mutex> lock(shard.mutex);
  if (local >= shard.entries.size()) { return {}; }
  return shard.entries[local].frames;
}

std::vector<frame_info> resolve_frames(const std::vector<void*>& frames) {
  std::vector<frame_info> resolved;
  resolved.reserve(frames.size());
  for (void* address : frames) {
    const boost::stacktrace::frame frame(address);
    frame_info info;
    info.address = reinterpret_cast<std::uintptr_t>(address);
    info.function = frame.name();
    info.file = frame.source_file();
    info.line = frame.source_line();
    if (resolved.empty() && is_internal_frame(info.function)) { continue; }
    const bool is_main = info.function == "main";
    resolved.push_back(std::move(info));
    if (is_main) { break; }  // what lies below main (libc start-up) says nothing about the leak
  }
  return resolved;
}

const char* stack_backend() noexcept { return GPUGUARD_STACKTRACE_BACKEND; }

}  // namespace gpuguard::detail
