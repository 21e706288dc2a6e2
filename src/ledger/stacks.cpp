// Stack capture and site interning with Boost.Stacktrace. The backend (Debian's compiled
// libboost_stacktrace_backtrace here, header-only addr2line or basic elsewhere) is chosen by CMake.
#include "ledger/stacks.hpp"

#include "ledger/frame_walk.hpp"

#include "util/addr2line.hpp"
#include "util/immovable.hpp"
#include "util/program_path.hpp"

#include <boost/stacktrace/frame.hpp>
#include <boost/stacktrace/safe_dump_to.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <unwind.h>
#include <map>
#include <unistd.h>
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

// Frames that stand between an allocation and the code that asked for it, dropped from the front of
// a site's frames so that a site begins with the user's line: gpuguard's, the standard library's
// containers and allocators, and PyTorch's (its dispatcher, ATen operators, c10's caching allocator
// and the inline tensor API that is compiled into the user's program, such as torch::ones).
bool is_internal_frame(const std::string& function) {
  const std::string_view name = qualified_name(function);
  for (const std::string_view prefix : {"gpuguard::", "std::", "__gnu_cxx::", "boost::stacktrace::",
                                        "c10::", "at::", "torch::", "caffe2::"}) {
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

namespace {

// The code of modules whose frames a capture passes over at its innermost end. Written under a
// mutex, published by the count; never shrinks, so a capture reads it without a lock.
struct code_range {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
};
constexpr std::size_t max_skipped_ranges = 64;
std::array<code_range, max_skipped_ranges> skipped_ranges;
std::atomic<std::size_t> skipped_count{0};

bool in_skipped_module(const void* address, std::size_t count) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  for (std::size_t i = 0; i < count; ++i) {
    if (a >= skipped_ranges[i].begin && a < skipped_ranges[i].end) { return true; }
  }
  return false;
}

struct cached_stack;

// What capture_caller_site asks of a capture (the memo's key), and what the capture answers: the
// remembered site, or else the entry that now holds the captured stack (to remember the site in
// once it is interned) and that entry's generation then.
struct memo_probe {
  void* const* prefix = nullptr;
  std::size_t prefix_count = 0;
  std::size_t depth = 0;
  std::size_t ranges = 0;
  site_id site = no_site;
  cached_stack* entry = nullptr;
  std::uint32_t generation = 0;
};

// ---- the capture cache ---------------------------------------------------------------------------
//
// A DWARF unwind (libgcc's _Unwind_Backtrace, which Boost.Stacktrace and glibc's backtrace use)
// costs a few hundred nanoseconds per frame: it finds and interprets each frame's CFI. Allocation
// sites repeat, so each thread keeps the stacks it captured, each with where in the stack every
// return address of it was found (on x86-64 a frame's return address lies just below its CFA).
// A capture whose own frame is at the same address as a cached one's reads those stack slots:
// if each still holds the cached return address, this is the same chain of calls, and the cached
// frames are returned without unwinding. Induction from the capture outward: the innermost slot is
// the capture's own return address, so equal means the same caller at the same call; a caller of
// fixed frame size then has its own return address at the cached slot, and so on out. (A frame
// whose size varies at the same call, alloca, can put a slot on stale memory that happens to hold
// the cached value; the cache then repeats an earlier stack of the same depth.) Slots are read
// only within the thread's own stack, above the capture's frame.

#if defined(__x86_64__)

struct unwind_walk {
  std::size_t wanted = 0;
  std::size_t count = 0;          // frames kept in ips (frame 0, the capture itself, is not kept)
  bool seen_capture = false;
  bool consistent = true;         // every slot held its frame's address
  void** ips = nullptr;
  void* const** slots = nullptr;  // slots[i]: where ips[i] lies in the stack
};

// libgcc's context for a frame holds as its "CFA" the stack pointer of that frame, which is the
// CFA of the frame it called: the frame's own address (the return address into it) lies just
// below it.
_Unwind_Reason_Code record_frame(_Unwind_Context* context, void* arg) {
  auto& walk = *static_cast<unwind_walk*>(arg);
  if (!walk.seen_capture) {  // frame 0: the capture function itself
    walk.seen_capture = true;
    return _URC_NO_REASON;
  }
  void* const ip = reinterpret_cast<void*>(_Unwind_GetIP(context));  // NOLINT(performance-no-int-to-ptr)
  if (ip == nullptr) { return _URC_END_OF_STACK; }
  const auto sp = static_cast<std::uintptr_t>(_Unwind_GetCFA(context));
  void* const* slot = reinterpret_cast<void* const*>(sp - sizeof(void*));  // NOLINT(performance-no-int-to-ptr)
  if (*slot != ip) { walk.consistent = false; }
  walk.ips[walk.count] = ip;
  walk.slots[walk.count] = slot;
  return ++walk.count == walk.wanted ? _URC_END_OF_STACK : _URC_NO_REASON;
}

constexpr std::size_t cache_ways = 32;

// ---- remembered sites ----------------------------------------------------------------------------
//
// A cached stack also remembers the sites capture_caller_site interned it into: the same frames
// always give the same site, and a site id stays valid for the life of the process (a forked
// child's too: it has the parent's site table), so a memo is never stale while its stack is
// cached, and is emptied with it. A site depends on more than the stack, so a memo is keyed by the
// rest: the prefix before the native frames (one native stack, the interpreter's, serves many
// Python lines, hence a few memos a stack), the depth asked for, and how many skipped modules
// were known (they only grow, and change which frames are kept).
constexpr std::size_t memo_ways = 4;

struct site_memo {
  site_id site = no_site;  // no_site: empty
  std::uint32_t depth = 0;
  std::uint32_t ranges = 0;
  std::uint32_t prefix_count = 0;
  std::array<void*, max_memo_prefix> prefix{};

  [[nodiscard]] bool answers(void* const* asked, std::size_t asked_count, std::size_t asked_depth,
                             std::size_t asked_ranges) const noexcept {
    return site != no_site && prefix_count == asked_count && depth == asked_depth && ranges == asked_ranges &&
           std::memcmp(prefix.data(), asked, asked_count * sizeof(void*)) == 0;
  }
};

struct cached_stack {
  std::uintptr_t anchor = 0;   // the capture's frame address; 0: empty
  std::size_t wanted = 0;
  std::size_t count = 0;
  std::uint32_t generation = 0;  // changes whenever the entry is emptied or taken for another stack
  std::uint32_t next_memo = 0;
  std::array<site_memo, memo_ways> memos{};
  std::array<void*, max_stack_depth> ips{};
  std::array<void* const*, max_stack_depth> slots{};

  void empty() noexcept {
    anchor = 0;
    ++generation;
    for (site_memo& memo : memos) { memo.site = no_site; }
  }
};

struct stack_cache {
  std::uintptr_t stack_low = 0;   // the thread's stack, from pthread_getattr_np
  std::uintptr_t stack_high = 0;
  std::size_t next_victim = 0;
  std::uint64_t hits = 0;
  std::uint64_t memo_hits = 0;
  std::array<cached_stack, cache_ways> entries{};
};


// The thread's cache: made on its first capture, freed when the thread ends. After that (captures
// from later thread_local destructors) the thread unwinds without it.
stack_cache* const cache_gone = reinterpret_cast<stack_cache*>(std::uintptr_t{1});  // NOLINT(performance-no-int-to-ptr)
thread_local stack_cache* this_thread_cache = nullptr;

struct cache_owner : immovable {
  cache_owner() = default;
  ~cache_owner() {
    if (this_thread_cache != cache_gone) { delete this_thread_cache; }
    this_thread_cache = cache_gone;
  }
};

stack_cache* thread_cache() noexcept {
  if (this_thread_cache != nullptr) { return this_thread_cache == cache_gone ? nullptr : this_thread_cache; }
  static thread_local cache_owner owner;  // frees the cache when the thread ends
  static_cast<void>(owner);
  const stack_bounds bounds = thread_stack_bounds();
  auto* made = bounds.high != 0 ? new (std::nothrow) stack_cache() : nullptr;
  if (made == nullptr) {
    this_thread_cache = cache_gone;
    return nullptr;
  }
  made->stack_low = bounds.low;
  made->stack_high = bounds.high;
  this_thread_cache = made;
  return made;
}

// ---- the frame-pointer walk, and when its frames are used -----------------------------------------
//
// The cache goes first: a hit checks its slots with loads that do not wait on each other, where a
// walk's loads each wait on the one before. A capture the cache cannot answer (a chain of calls not
// seen at this stack address lately, as an application's many sites are) first walks the
// frame-pointer chain (frame_walk.hpp): gpuguard is
// built with frame pointers, and so may be the program around it, and where every function between
// the capture and `depth` keeps the chain the walk gives the unwinder's frames for a few loads each.
// Where a function does not keep it (vendor libraries, the C library, a program built without frame
// pointers) a walk stops there or skips its caller, so its frames are used only where it is known
// not to: each step of a walk passes a return address, and the function that address returns into
// keeps the chain at that call or does not, every time. The first walk that meets an address it
// knows nothing of unwinds by the tables as well and compares the two, frame by frame (return
// address and the stack slot it lies in): each address at which both still agree on the next frame
// keeps the chain, the address after which they part does not (frame_walk.cpp keeps the verdicts).
// A walk whose every step passed a known-good address is used (and cached: its slots vouch for it as
// an unwound stack's do); one that meets a known-bad address, or one the unwinder could not settle,
// is unwound by the tables, as are all with fast_unwind=0. A walk that ended before `depth` counts
// its last address as a step: only an address after which the unwinder found no frame either (the
// stack's outermost) lets it end early.

// Unwinds by the tables from the capture's own frame. Always inlined, so that the unwinder's first
// frame (which record_frame passes over) is the capture's.
__attribute__((always_inline)) inline unwind_walk unwind_here(void** ips, void* const** slots, std::size_t depth) noexcept {
  unwind_walk walk;
  walk.wanted = depth;
  walk.ips = ips;
  walk.slots = slots;
  _Unwind_Backtrace(record_frame, &walk);
  return walk;
}

// What a walk (ips, slots: `walked` frames) and an unwind of the same stack (`unwound`) say of the
// walk's return addresses, from the frames both agree on.
void learn_verdicts(void* const* ips, void* const* const* slots, std::size_t walked, const unwind_walk& unwound,
                    std::size_t depth) noexcept {
  const auto agree = [&](std::size_t i) {
    return i < walked && i < unwound.count && ips[i] == unwound.ips[i] && slots[i] == unwound.slots[i];
  };
  for (std::size_t i = 0; agree(i); ++i) {
    if (i + 1 < unwound.count) {
      learn_verdict(ips[i], agree(i + 1) ? frame_verdict::chained : frame_verdict::broken);
    } else if (unwound.count < depth) {  // the unwinder's last frame: the walk must end here too
      learn_verdict(ips[i], walked == i + 1 ? frame_verdict::chained : frame_verdict::broken);
    }
  }
  // An address the comparison could not settle (the two parted before it) is not asked about again.
  for (std::size_t i = 0; i < walked; ++i) {
    if (verdict_of(ips[i]) == frame_verdict::unknown) {
      learn_verdict(ips[i], frame_verdict::broken);
      break;
    }
  }
}

// Not inlined: its frame address is the cache's key, the walk and the verification start at its
// return address, and the unwinder's first frame is its own.
// With a probe, a stack the cache answers whose memo answers the probe gives its site, and no
// frames (the probe's site is set, the count returned is 0).
__attribute__((noinline)) std::size_t capture_native(void** frames, std::size_t depth, memo_probe* probe) noexcept {
  const auto anchor = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  stack_cache* cache = thread_cache();
  if (cache == nullptr || anchor < cache->stack_low || anchor >= cache->stack_high) {
    return capture_frames(frames, depth);  // another stack (a fiber's, a signal's): no cache, no walk
  }
  const std::size_t first = ((anchor >> 4) ^ depth) % cache_ways;
  for (std::size_t way = 0; way < 2; ++way) {
    const cached_stack& entry = cache->entries[(first + way) % cache_ways];
    if (entry.anchor != anchor || entry.wanted != depth) { continue; }
    bool same = true;
    for (std::size_t i = 0; i < entry.count && same; ++i) { same = *entry.slots[i] == entry.ips[i]; }
    if (same) {
      ++cache->hits;
      cached_stack& hit = cache->entries[(first + way) % cache_ways];
      if (probe != nullptr) {
        for (const site_memo& memo : hit.memos) {
          if (memo.answers(probe->prefix, probe->prefix_count, probe->depth, probe->ranges)) {
            ++cache->memo_hits;
            probe->site = memo.site;
            return 0;
          }
        }
        probe->entry = &hit;
        probe->generation = hit.generation;
      }
      std::memcpy(frames, hit.ips.data(), hit.count * sizeof(void*));
      return hit.count;
    }
  }
  // The new stack is written straight into the way it will take (an empty one, else one of the
  // two by turns), which is emptied first: no copy of a whole entry per capture the cache missed.
  std::size_t way = first;
  if (cache->entries[way].anchor != 0) {
    way = (first + 1) % cache_ways;
    if (cache->entries[way].anchor != 0) { way = (first + (cache->next_victim++ & 1U)) % cache_ways; }
  }
  cached_stack& fresh = cache->entries[way];
  fresh.empty();
  std::size_t count = 0;
  bool keep = false;
  judged_walk walked{0, frame_verdict::broken};
  if (fast_unwind()) {
    walked = walk_judged(__builtin_frame_address(0), {cache->stack_low, cache->stack_high}, fresh.ips.data(),
                         fresh.slots.data(), depth);
    count = walked.count;
    keep = walked.worst == frame_verdict::chained;
  }
  if (!keep) {
    std::array<void*, max_stack_depth> walk_ips;             // NOLINT(cppcoreguidelines-pro-type-member-init,hicpp-member-init)
    std::array<void* const*, max_stack_depth> walk_slots;    // NOLINT(cppcoreguidelines-pro-type-member-init,hicpp-member-init)
    const bool learn = walked.worst == frame_verdict::unknown && !verdicts_full();
    if (learn) {
      std::memcpy(walk_ips.data(), fresh.ips.data(), walked.count * sizeof(void*));
      std::memcpy(walk_slots.data(), fresh.slots.data(), walked.count * sizeof(void*));
    }
    const unwind_walk unwound = unwind_here(fresh.ips.data(), fresh.slots.data(), depth);
    if (learn) { learn_verdicts(walk_ips.data(), walk_slots.data(), walked.count, unwound, depth); }
    count = unwound.count;
    keep = unwound.consistent;
    for (std::size_t i = 0; i < count && keep; ++i) {
      const auto slot = reinterpret_cast<std::uintptr_t>(fresh.slots[i]);
      keep = slot > anchor && slot + sizeof(void*) <= cache->stack_high;
    }
  }
  std::memcpy(frames, fresh.ips.data(), count * sizeof(void*));
  if (keep && count > 0) {  // a chain the slots can vouch for: keep it
    fresh.wanted = depth;
    fresh.count = count;
    fresh.anchor = anchor;
    if (probe != nullptr) {
      probe->entry = &fresh;
      probe->generation = fresh.generation;
    }
  }
  return count;
}

// Remembers `site` as the probe's in the entry that held its stack, unless that entry was emptied
// or taken for another stack since (a capture made while interning, say).
void remember_site(const memo_probe& probe, site_id site) noexcept {
  cached_stack* entry = probe.entry;
  if (entry == nullptr || site == no_site || entry->generation != probe.generation ||
      probe.prefix_count > max_memo_prefix) {
    return;
  }
  site_memo& memo = entry->memos[entry->next_memo++ % memo_ways];
  memo.site = site;
  memo.depth = static_cast<std::uint32_t>(probe.depth);
  memo.ranges = static_cast<std::uint32_t>(probe.ranges);
  memo.prefix_count = static_cast<std::uint32_t>(probe.prefix_count);
  std::memcpy(memo.prefix.data(), probe.prefix, probe.prefix_count * sizeof(void*));
}

#else

std::size_t capture_native(void** frames, std::size_t depth, memo_probe* /*probe*/) noexcept {
  return capture_frames(frames, depth);
}

void remember_site(const memo_probe& /*probe*/, site_id /*site*/) noexcept {}

#endif

// capture_caller_frames, with the probe passed to the capture: 0 frames and the probe's site set
// when a memo answered.
__attribute__((always_inline)) inline std::size_t capture_skipping(void** frames, std::size_t depth,
                                                                   std::size_t ranges, memo_probe* probe) noexcept {
  if (ranges == 0) { return capture_native(frames, std::min(depth, max_stack_depth), probe); }
  std::array<void*, max_stack_depth> all;  // NOLINT(cppcoreguidelines-pro-type-member-init,hicpp-member-init)
  const std::size_t got = capture_native(all.data(), max_stack_depth, probe);
  std::size_t first = 0;
  while (first < got && in_skipped_module(all[first], ranges)) { ++first; }
  const std::size_t count = std::min(got - first, depth);
  std::memcpy(frames, all.data() + first, count * sizeof(void*));
  return count;
}

}  // namespace

#if defined(__x86_64__)
namespace {

// The calling thread's cache if it has one now (the tests' helpers below make none).
stack_cache* existing_cache() noexcept {
  return this_thread_cache != nullptr && this_thread_cache != cache_gone ? this_thread_cache : nullptr;
}

}  // namespace
#endif

std::uint64_t memoized_sites() noexcept {
#if defined(__x86_64__)
  const stack_cache* cache = existing_cache();
  return cache != nullptr ? cache->memo_hits : 0;
#else
  return 0;
#endif
}

std::uint64_t cached_captures() noexcept {
#if defined(__x86_64__)
  const stack_cache* cache = existing_cache();
  return cache != nullptr ? cache->hits : 0;
#else
  return 0;
#endif
}

void forget_cached_stacks() noexcept {
#if defined(__x86_64__)
  if (stack_cache* cache = existing_cache()) {
    for (cached_stack& entry : cache->entries) { entry.empty(); }
  }
#endif
}

std::size_t capture_caller_frames(void** frames, std::size_t depth) noexcept {
  return capture_skipping(frames, depth, skipped_count.load(std::memory_order_acquire), nullptr);
}

site_id capture_caller_site(void** frames, std::size_t prefix_count, std::size_t depth) noexcept {
  depth = std::min(depth, max_stack_depth);
  memo_probe probe;
  probe.prefix = frames;
  probe.prefix_count = prefix_count;
  probe.depth = depth;
  probe.ranges = skipped_count.load(std::memory_order_acquire);
  const std::size_t count = capture_skipping(frames + prefix_count, depth, probe.ranges, &probe);
  if (probe.site != no_site) { return probe.site; }
  const site_id site = intern_site(frames, prefix_count + count);
  remember_site(probe, site);
  return site;
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

namespace {

#if defined(GPUGUARD_ADDR2LINE_PATH)
// Fills function, file and line of frames the backend left without a file by asking addr2line
// once per module about module-relative addresses. This also covers position-independent programs
// and gpuguard's own hidden symbols, which Boost's header-only modes resolve poorly.
void fill_from_addr2line(std::vector<frame_info>& frames, const std::vector<void*>& raw) {
  std::map<std::string, std::vector<std::size_t>> by_module;
  std::vector<std::uint64_t> offsets(frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (!frames[i].file.empty()) { continue; }
    Dl_info info{};
    if (dladdr(raw[i], &info) == 0 || info.dli_fbase == nullptr) {
      continue;
    }
    std::string module = info.dli_fname != nullptr ? info.dli_fname : "";
    if (module.empty() || module[0] != '/') { module = program_path(); }  // the main program
    // Return addresses point after the call: look up the call itself.
    offsets[i] = frames[i].address - reinterpret_cast<std::uintptr_t>(info.dli_fbase) - 1;
    by_module[module].push_back(i);
  }
  for (const auto& [module, indices] : by_module) {
    std::vector<std::uint64_t> addresses;
    addresses.reserve(indices.size());
    for (const std::size_t i : indices) { addresses.push_back(offsets[i]); }
    const std::vector<addr2line_answer> answers = ask_addr2line(GPUGUARD_ADDR2LINE_PATH, module, addresses, true);
    for (std::size_t k = 0; k < indices.size(); ++k) {
      frame_info& frame = frames[indices[k]];
      if (!answers[k].function.empty()) { frame.function = answers[k].function; }
      const std::string& location = answers[k].location;
      if (const std::size_t colon = location.rfind(':'); colon != std::string::npos) {
        frame.file = location.substr(0, colon);
        frame.line = std::strtoul(location.c_str() + colon + 1, nullptr, 10);
      }
    }
  }
}
#endif

}  // namespace

std::vector<frame_info> resolve_frames(const std::vector<void*>& frames) {
  std::vector<frame_info> all;
  all.reserve(frames.size());
  for (void* address : frames) {
    // Each captured frame is a return address, which points after the call and may belong to the
    // next source line (the closing brace of a block, say): look up the call itself.
    const void* call = address != nullptr ? static_cast<const char*>(address) - 1 : address;
    const boost::stacktrace::frame frame(call);
    frame_info info;
    info.address = reinterpret_cast<std::uintptr_t>(address);
    info.function = frame.name();
    info.file = frame.source_file();
    info.line = frame.source_line();
    all.push_back(std::move(info));
  }
#if defined(GPUGUARD_ADDR2LINE_PATH)
  fill_from_addr2line(all, frames);
#endif
  std::vector<frame_info> resolved;
  for (frame_info& info : all) {
    // Drop gpuguard's and the standard library's frames, and unresolved ones, from the front.
    if (resolved.empty() && (info.function.empty() || is_internal_frame(info.function))) { continue; }
    const bool is_main = info.function == "main";
    resolved.push_back(std::move(info));
    if (is_main) { break; }  // what lies below main (libc start-up) says nothing about the leak
  }
  return resolved;
}

const char* stack_backend() noexcept { return GPUGUARD_STACKTRACE_BACKEND; }

}  // namespace gpuguard::detail

namespace gpuguard {

std::size_t skip_frames_in_modules(std::string_view name_part) noexcept {
  struct search {
    std::string_view name_part;
    std::size_t added = 0;
  } found{name_part};
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t /*size*/, void* data) -> int {
        auto& s = *static_cast<search*>(data);
        // The file's name, not its folders': /opt/libtorch/lib/libmodel.so is not PyTorch's.
        std::string_view name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        name.remove_prefix(name.find_last_of('/') == std::string_view::npos ? 0 : name.find_last_of('/') + 1);
        if (name.empty() || name.find(s.name_part) == std::string_view::npos) { return 0; }
        for (std::size_t i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& segment = info->dlpi_phdr[i];
          if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) { continue; }
          const detail::code_range range{info->dlpi_addr + segment.p_vaddr, info->dlpi_addr + segment.p_vaddr + segment.p_memsz};
          const std::size_t count = detail::skipped_count.load(std::memory_order_relaxed);
          bool known = false;
          for (std::size_t k = 0; k < count; ++k) {
            known = known || (detail::skipped_ranges[k].begin == range.begin && detail::skipped_ranges[k].end == range.end);
          }
          if (known || count == detail::max_skipped_ranges) { continue; }
          detail::skipped_ranges[count] = range;
          detail::skipped_count.store(count + 1, std::memory_order_release);
          ++s.added;
        }
        return 0;
      },
      &found);
  return found.added;
}

}  // namespace gpuguard
