// The caching pool: size classes, best-fit free sets per stream, splitting and merging, the
// stream rule, giving segments back, statistics, and the registry the exit report reads.
#include <gpuguard/core/pool_memory_resource.hpp>

#include <gpuguard/detail/teardown.hpp>
#include <gpuguard/error.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/tracking.hpp>

#include "util/format.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace gpuguard {

namespace {

struct segment;

// A stretch of a segment: handed out, or free in its pool's set. Blocks of one segment form a
// list in address order; the first never changes (a merge removes the later block), so the
// segment keeps it as its head.
struct block {
  char* ptr = nullptr;
  std::size_t size = 0;
  std::size_t requested = 0;  // what was asked for, while handed out
  cudaStream_t stream = nullptr;
  segment* owner = nullptr;
  block* prev = nullptr;
  block* next = nullptr;
  bool free = true;
};

struct segment {
  block* head = nullptr;
  std::size_t size = 0;
  bool small = false;
};

// Free blocks by (stream, size, address): lower_bound of (stream, n) is the stream's best fit.
struct by_stream_size_address {
  bool operator()(const block* a, const block* b) const noexcept {
    const auto sa = reinterpret_cast<std::uintptr_t>(a->stream);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
    const auto sb = reinterpret_cast<std::uintptr_t>(b->stream);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
    if (sa != sb) { return sa < sb; }
    if (a->size != b->size) { return a->size < b->size; }
    return std::less<const char*>{}(a->ptr, b->ptr);
  }
};
using free_set = std::set<block*, by_stream_size_address>;

// A request larger than this is refused before any rounding could overflow.
constexpr std::size_t largest_request = std::numeric_limits<std::size_t>::max() / 2;

void event_wait(stream_view waiter, stream_view freed_on) noexcept {
  cudaEvent_t event = nullptr;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
    // Without an event, the safe fallback is to wait for the freeing stream on the host.
    detail::report_teardown(cudaStreamSynchronize(freed_on.get()), "pool free (wait for the freeing stream)");
    return;
  }
  detail::report_teardown(cudaEventRecord(event, freed_on.get()), "pool free (cudaEventRecord)");
  detail::report_teardown(cudaStreamWaitEvent(waiter.get(), event, 0), "pool free (cudaStreamWaitEvent)");
  detail::report_teardown(cudaEventDestroy(event), "pool free (cudaEventDestroy)");
}
void no_wait(stream_view /*waiter*/, stream_view /*freed_on*/) noexcept {}

void device_synchronize(int /*device*/) noexcept {
  detail::report_teardown(cudaDeviceSynchronize(), "pool (cudaDeviceSynchronize)");
}
void no_synchronize(int /*device*/) noexcept {}

// Every pool alive, for the exit report. Never destroyed: pools in static objects may end after it.
struct registry {
  std::mutex mutex;
  std::vector<const pool_memory_resource*> pools;
};
registry& alive() {
  static auto* pools = new registry();  // NOLINT(cppcoreguidelines-owning-memory): kept for the whole process
  return *pools;
}

std::string device_words(int device) {
  return device == host_device_id ? std::string("host") : "device " + std::to_string(device);
}

}  // namespace

struct pool_memory_resource::state {
  pool_options options;
  memory_resource* upstream = nullptr;
  int device = host_device_id;
  tag_id segment_tag = untagged;
  mutable std::mutex mutex;
  free_set small;
  free_set large;
  std::unordered_map<const void*, block*> live;
  std::unordered_set<segment*> segments;
  pool_statistics stats;

  free_set& set_of(const segment& s) { return s.small ? small : large; }

  [[nodiscard]] std::string describe(std::size_t bytes, const std::string& why) const {
    return options.name + ": allocate(" + std::to_string(bytes) + " bytes) on " + device_words(device) + ": " + why;
  }
  [[nodiscard]] std::string figures() const {
    return detail::format_bytes(stats.reserved_bytes) + " reserved, " + detail::format_bytes(stats.allocated_bytes) +
           " handed out";
  }

  // The stream's best-fit free block for `rounded` bytes, taken out of its set; nullptr if none.
  block* take_free(std::size_t rounded, cudaStream_t stream) {
    free_set& set = rounded <= small_request_limit ? small : large;
    block probe;
    probe.stream = stream;
    probe.size = rounded;
    const auto it = set.lower_bound(&probe);
    if (it == set.end() || (*it)->stream != stream) { return nullptr; }
    block* found = *it;
    const std::size_t max_split = options.max_split_bytes;
    if (rounded < max_split && found->size >= max_split) { return nullptr; }       // an unsplittable block serves large requests only
    if (rounded >= max_split && found->size - rounded >= large_segment_bytes) { return nullptr; }  // too much of it would go unused
    set.erase(it);
    return found;
  }

  void synchronize() const {
    const detail::teardown_device_guard on(device, "pool (enter its device to synchronize)");
    if (on.entered()) { options.synchronize(device); }
  }

  // Gives wholly free segments back, largest first, until at most `keep` bytes are reserved.
  std::size_t release(std::size_t keep) {
    std::vector<segment*> idle;
    for (segment* s : segments) {
      if (s->head->free && s->head->next == nullptr) { idle.push_back(s); }
    }
    if (idle.empty() || stats.reserved_bytes <= keep) { return 0; }
    synchronize();
    std::sort(idle.begin(), idle.end(), [](const segment* a, const segment* b) { return a->size > b->size; });
    const detail::teardown_device_guard on(device, "pool (enter its device to give memory back)");
    if (!on.entered()) { return 0; }
    std::size_t released = 0;
    for (segment* s : idle) {
      if (stats.reserved_bytes <= keep) { break; }
      set_of(*s).erase(s->head);
      segments.erase(s);
      // After the synchronization no stream uses it: the default stream frees it, so a stream the
      // program has destroyed since is never named.
      upstream->deallocate(s->head->ptr, s->size, stream_view{});
      stats.reserved_bytes -= s->size;
      --stats.segments;
      ++stats.segment_releases;
      released += s->size;
      delete s->head;  // NOLINT(cppcoreguidelines-owning-memory)
      delete s;        // NOLINT(cppcoreguidelines-owning-memory)
    }
    return released;
  }

  // A new segment of `size` bytes for `stream` from the upstream, its whole as one free block (not
  // in a set). Past the reserve limit, or when the upstream runs out, the cache goes back first.
  block* new_segment(std::size_t bytes, std::size_t rounded, cudaStream_t stream) {
    const std::size_t size = segment_size(rounded);
    auto owner = std::make_unique<segment>();
    auto whole = std::make_unique<block>();
    segments.reserve(segments.size() + 1);
    if (size > options.reserve_limit - stats.reserved_bytes) {
      ++stats.cache_flushes;
      release(0);
      if (size > options.reserve_limit - stats.reserved_bytes) {
        throw out_of_memory(describe(bytes, "over the pool's reserve limit of " + std::to_string(options.reserve_limit) +
                                                " bytes (a segment of " + std::to_string(size) + " bytes; " + figures() + ")"));
      }
    }
    void* base = nullptr;
    {
      // Segments are the pool's cache: a tracking resource under the pool records them under the
      // pool's name, which the exit report names as a holder, not as a leak.
      const tag_id previous = current_tag();
      set_current_tag(segment_tag);
      try {
        try {
          base = upstream->allocate(size, stream_view{stream});
        } catch (const out_of_memory&) {
          ++stats.cache_flushes;
          release(0);
          base = upstream->allocate(size, stream_view{stream});
        }
      } catch (const out_of_memory& failure) {
        set_current_tag(previous);
        throw out_of_memory(describe(bytes, std::string("the upstream is out of memory after the pool gave back its cache (") +
                                                figures() + "): " + failure.what()));
      } catch (...) {
        set_current_tag(previous);
        throw;
      }
      set_current_tag(previous);
    }
    whole->ptr = static_cast<char*>(base);
    whole->size = size;
    whole->stream = stream;
    whole->owner = owner.get();
    owner->head = whole.get();
    owner->size = size;
    owner->small = rounded <= small_request_limit;
    segments.insert(owner.get());  // cannot throw: reserved above
    stats.reserved_bytes += size;
    stats.peak_reserved_bytes = std::max(stats.peak_reserved_bytes, stats.reserved_bytes);
    ++stats.segments;
    ++stats.segment_allocations;
    static_cast<void>(owner.release());  // the segment set owns it from here
    return whole.release();
  }

  [[nodiscard]] bool should_split(const block& b, std::size_t rounded) const noexcept {
    const std::size_t rest = b.size - rounded;
    if (b.owner->small) { return rest >= round_bytes; }
    return rounded < options.max_split_bytes && rest > small_request_limit;
  }

  // Hands `b` out for a request of `bytes` (rounded: `rounded`), splitting off the rest.
  void* hand_out(block* b, std::size_t rounded, std::size_t bytes) {
    try {
      std::unique_ptr<block> rest;
      if (should_split(*b, rounded)) { rest = std::make_unique<block>(); }
      live.emplace(b->ptr, b);
      if (rest) {
        rest->ptr = b->ptr + rounded;
        rest->size = b->size - rounded;
        rest->stream = b->stream;
        rest->owner = b->owner;
        rest->prev = b;
        rest->next = b->next;
        try {
          set_of(*b->owner).insert(rest.get());
        } catch (...) {
          live.erase(b->ptr);
          throw;
        }
        if (b->next != nullptr) { b->next->prev = rest.get(); }
        b->next = rest.release();
        b->size = rounded;
      }
    } catch (...) {
      set_of(*b->owner).insert(b);  // back where it was: nothing lost
      throw;
    }
    b->free = false;
    b->requested = bytes;
    stats.allocated_bytes += b->size;
    stats.requested_bytes += bytes;
    stats.peak_allocated_bytes = std::max(stats.peak_allocated_bytes, stats.allocated_bytes);
    ++stats.live_blocks;
    ++stats.allocations;
    return b->ptr;
  }

  // Takes `b` back (no longer in `live`), merging it with free neighbours.
  void take_back(block* b) {
    stats.allocated_bytes -= b->size;
    stats.requested_bytes -= b->requested;
    --stats.live_blocks;
    ++stats.frees;
    b->free = true;
    b->requested = 0;
    free_set& set = set_of(*b->owner);
    if (block* before = b->prev; before != nullptr && before->free) {
      set.erase(before);
      before->size += b->size;
      before->next = b->next;
      if (b->next != nullptr) { b->next->prev = before; }
      delete b;  // NOLINT(cppcoreguidelines-owning-memory)
      b = before;
    }
    if (block* after = b->next; after != nullptr && after->free) {
      set.erase(after);
      b->size += after->size;
      b->next = after->next;
      if (after->next != nullptr) { after->next->prev = b; }
      delete after;  // NOLINT(cppcoreguidelines-owning-memory)
    }
    set.insert(b);
  }
};

std::size_t pool_memory_resource::rounded_size(std::size_t bytes) noexcept {
  if (bytes < round_bytes) { return round_bytes; }
  return (bytes + round_bytes - 1) / round_bytes * round_bytes;
}

std::size_t pool_memory_resource::segment_size(std::size_t rounded) noexcept {
  if (rounded <= small_request_limit) { return small_segment_bytes; }
  if (rounded < own_segment_from) { return large_segment_bytes; }
  return (rounded + own_segment_round - 1) / own_segment_round * own_segment_round;
}

pool_memory_resource::pool_memory_resource(memory_resource& upstream, int device, pool_options options)
    : upstream_(&upstream), device_(device), kind_(upstream.kind()), state_(std::make_unique<state>()) {
  if (options.reserve_limit < round_bytes) {
    throw std::invalid_argument("gpuguard::pool_memory_resource: reserve_limit " + std::to_string(options.reserve_limit) +
                                " is under the smallest block (" + std::to_string(round_bytes) + " bytes)");
  }
  const bool host = kind_ == memory_kind::host;
  if (options.wait == nullptr) { options.wait = host ? no_wait : event_wait; }
  if (options.synchronize == nullptr) { options.synchronize = host ? no_synchronize : device_synchronize; }
  state_->options = std::move(options);
  state_->upstream = upstream_;
  state_->device = device;
  state_->segment_tag = intern_tag(state_->options.name);
  declare_exit_holder(state_->segment_tag);
  registry& r = alive();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.pools.push_back(this);
}

pool_memory_resource::~pool_memory_resource() {
  {
    registry& r = alive();
    const std::lock_guard<std::mutex> lock(r.mutex);
    r.pools.erase(std::remove(r.pools.begin(), r.pools.end(), this), r.pools.end());
  }
  state& s = *state_;
  const std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.live.empty()) {
    std::size_t held = 0;
    for (const segment* seg : s.segments) {
      if (!(seg->head->free && seg->head->next == nullptr)) { ++held; }
    }
    std::fprintf(stderr,
                 "[gpuguard] %s on %s destroyed with %llu block(s) (%s) still handed out: their %zu segment(s) "
                 "are left to the process, not freed under their users\n",
                 s.options.name.c_str(), device_words(device_).c_str(),
                 static_cast<unsigned long long>(s.stats.live_blocks), detail::format_bytes(s.stats.allocated_bytes).c_str(),
                 held);
  }
  try {
    s.release(0);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor never throws; what stays is the process's
  }
  // The bookkeeping goes; the memory of segments still in use stays with the process.
  for (segment* seg : s.segments) {
    for (block* b = seg->head; b != nullptr;) {
      block* next = b->next;
      delete b;  // NOLINT(cppcoreguidelines-owning-memory)
      b = next;
    }
    delete seg;  // NOLINT(cppcoreguidelines-owning-memory)
  }
}

const std::string& pool_memory_resource::name() const noexcept { return state_->options.name; }

void* pool_memory_resource::do_allocate(std::size_t bytes, stream_view stream) {
  state& s = *state_;
  if (bytes > largest_request) {
    throw out_of_memory(s.describe(bytes, "larger than any memory the pool can ask for"));
  }
  const std::size_t rounded = rounded_size(bytes);
  const std::lock_guard<std::mutex> lock(s.mutex);
  block* found = s.take_free(rounded, stream.get());
  if (found == nullptr) { found = s.new_segment(bytes, rounded, stream.get()); }
  return s.hand_out(found, rounded, bytes);
}

void pool_memory_resource::do_deallocate(void* ptr, std::size_t /*bytes*/, stream_view stream) noexcept {
  state& s = *state_;
  const std::lock_guard<std::mutex> lock(s.mutex);
  const auto it = s.live.find(ptr);
  if (it == s.live.end()) {
    if (s.stats.unknown_frees++ < 10) {
      std::fprintf(stderr, "[gpuguard] %s on %s: free of %p, which it did not hand out: ignored\n", s.options.name.c_str(),
                   device_words(device_).c_str(), ptr);
    }
    return;
  }
  block* b = it->second;
  s.live.erase(it);
  // The block's stream reuses it at once: it must first wait for what the freeing stream queued.
  if (stream.get() != b->stream) { s.options.wait(stream_view{b->stream}, stream); }
  s.take_back(b);
}

pool_statistics pool_memory_resource::statistics() const noexcept {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

void pool_memory_resource::reset_peaks() noexcept {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stats.peak_allocated_bytes = state_->stats.allocated_bytes;
  state_->stats.peak_reserved_bytes = state_->stats.reserved_bytes;
}

std::size_t pool_memory_resource::empty() noexcept { return trim(0); }

std::size_t pool_memory_resource::trim(std::size_t keep_bytes) noexcept {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  try {
    return state_->release(keep_bytes);
  } catch (...) {  // a full host heap while sorting: nothing was given back
    return 0;
  }
}

std::vector<pool_holding> pool_holdings() {
  std::vector<pool_holding> out;
  registry& r = alive();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (const pool_memory_resource* pool : r.pools) {
    // At exit another thread may be inside the pool, or may have been when the process forked:
    // such a pool is left out rather than waited for.
    std::unique_lock<std::mutex> busy(pool->state_->mutex, std::try_to_lock);
    if (!busy.owns_lock() || pool->state_->stats.reserved_bytes == 0) { continue; }
    out.push_back(pool_holding{pool->name(), pool->device(), pool->state_->stats});
  }
  return out;
}

}  // namespace gpuguard
