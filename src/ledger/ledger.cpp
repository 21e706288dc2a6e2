// The ledger: recording an allocation or a free into the live table (live_table.hpp) and the live
// counters (live_counter.hpp) inside one shard's lock, and reading them. Its other parts: misuse
// (misuse.hpp), tags (tags.hpp), per-site totals (site_totals.hpp), the state they live in and its
// fork handling (ledger_state.hpp), stacks (stacks.hpp) and the memory-event subscription point
// (memory_events.hpp).
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>

#include "ledger/clock.hpp"
#include "ledger/deferred_source.hpp"
#include "ledger/ledger_state.hpp"
#include "ledger/memory_events.hpp"
#include "ledger/frame_walk.hpp"
#include "ledger/postmortem.hpp"
#include "ledger/python_frames.hpp"
#include "ledger/stacks.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace gpuguard {

namespace {

using detail::all_shards;
using detail::counter_ref;
using detail::device_slot_of;
using detail::device_slots;
using detail::ledger;
using detail::ledger_state;
using detail::live_counter;
using detail::live_shard;
using detail::misuse_report;
using detail::planned_add;
using detail::thread_counts;
using detail::thread_memory;
using detail::thread_state;

// The calling thread's state (ledger_state.hpp says why initial-exec): here, in the file that
// records, so that the hot paths reach it as an offset from the thread pointer.
__attribute__((tls_model("initial-exec"))) thread_local thread_state this_thread;

// A site's frames: the calling thread's Python frames first when it runs Python (python_frames.hpp),
// then, if `native`, its native stack. A site with Python frames begins at the user's Python line.
site_id capture_site_now(bool native) noexcept {
  // Not zeroed (a rep stos per capture): only the frames the captures wrote are read.
  std::array<void*, detail::python_prefix_slots + detail::max_stack_depth> frames;  // NOLINT(cppcoreguidelines-pro-type-member-init,hicpp-member-init)
  const std::size_t count = detail::capture_python_frames(frames.data());
  if (!native) { return detail::intern_site(frames.data(), count); }
  // A stack seen before answers with the site it was interned into (stacks.hpp), the Python part
  // being the same: the frames are neither copied nor looked up again.
  static_assert(detail::python_prefix_slots <= detail::max_memo_prefix, "a Python part the memo cannot key");
  return detail::capture_caller_site(frames.data(), count, ledger().stack_depth.load(std::memory_order_relaxed));
}

// The countdown is in the thread's state, which the caller has already looked up: a thread_local
// of its own would cost another TLS lookup on every allocation.
site_id maybe_capture_site(ledger_state& st, thread_state& mine) noexcept {
  const auto mode = static_cast<stack_mode>(st.stacks.load(std::memory_order_relaxed));
  bool native = mode == stack_mode::all;
  if (mode == stack_mode::sampled) {
    if (mine.sample_countdown != 0) {
      --mine.sample_countdown;
    } else {
      mine.sample_countdown = st.stack_sample.load(std::memory_order_relaxed) - 1;
      native = true;
    }
  }
  if (!native && !detail::python_frames_live.load(std::memory_order_relaxed)) { return no_site; }
  return capture_site_now(native);
}

// Misuse is rare: its report may capture, resolve and write.
void report_misuse(const detail::misuse_report& m) noexcept {
  ledger_state& st = ledger();
  const bool stacks = st.stacks.load(std::memory_order_relaxed) != static_cast<int>(stack_mode::off);
  const bool python = detail::python_frames_live.load(std::memory_order_relaxed);
  detail::write_misuse_report(stderr, m, stacks || python ? capture_site_now(stacks) : no_site);
  if (st.abort_on_error.load(std::memory_order_relaxed)) {
    std::fputs("[gpuguard] abort_on_error=1: aborting\n", stderr);
    std::abort();
  }
}

// Frees a thread makes of shared counters before it next looks at going local, doubled by each
// local stretch of the device that ended in threads taking room from each other (at most 64
// times as many).
constexpr std::uint32_t go_local_wait = 1024;

// After a free of a shared device or tag (outside every lock; `device_live` is the device's live
// bytes after it, unknown_size if the device is local): now and then, if the device or the tag
// has headroom, stops every thread and makes them local.
void maybe_go_local(thread_state& mine, int slot, tag_id tag, std::size_t device_live) noexcept {
  if (mine.go_local_wait > 0) {
    --mine.go_local_wait;
    return;
  }
  ledger_state& st = ledger();
  const counter_ref device = st.device_ref(slot);
  const counter_ref tagged = st.tag_ref(tag);
  const std::uint32_t backoff = device.counter.backoff.load(std::memory_order_relaxed);
  mine.go_local_wait = go_local_wait << std::min<std::uint32_t>(backoff, 6);
  if (st.counters_held_shared()) { return; }
  const bool device_may = device_live != unknown_size && !device.local() && device.counter.has_headroom(device_live);
  const bool tag_may = !tagged.local() && tagged.counter.has_headroom(tagged.counter.current.load(std::memory_order_relaxed));
  if (!device_may && !tag_may) { return; }
  const all_shards stopped;
  go_local(device, false);
  go_local(tagged, false);
}

// ---- recording ----------------------------------------------------------------------------------

// What record_allocation knows before it takes a lock.
struct new_allocation {
  const allocation_event& event;
  tag_id tag;
  std::uint32_t thread;
  std::int64_t coarse_ns;  // the live table's time: the coarse clock
  site_id site;
  std::uint64_t sequence;
  std::uint64_t hash;
};

// Records an allocation into shard `s`, whose lock the caller holds, or with every shard held
// (`stopped`). Without `stopped`, returns false, having recorded nothing, when a local counter
// has no room for it in this thread's ceiling or the pool.
__attribute__((always_inline)) inline
bool record_allocation_in(ledger_state& st, live_shard& s, const new_allocation& a, thread_state& mine,
                          thread_counts& counts, bool stopped) noexcept {
  const allocation_event& event = a.event;
  const int slot = device_slot_of(event.device);
  const counter_ref device = st.device_ref(slot);
  const counter_ref tagged = st.tag_ref(a.tag);
  const std::size_t probed = s.find(event.ptr, a.hash);
  allocation_record* record = s.slots[probed].ptr != nullptr ? &s.slots[probed] : nullptr;
  // The upstream handed out a live address again: the earlier block was freed behind the
  // tracker's back. It is counted as freed so the counters stay true.
  const bool replaces = record != nullptr && !st.inherited(*record);
  if (stopped) {
    make_room_stopped(device, counts, event.bytes);
    make_room_stopped(tagged, counts, event.bytes);
  } else if (replaces && (st.device_ref(device_slot_of(record->device)).local() ||
                          st.tag_ref(record->tag).local())) {
    return false;
  }
  planned_add device_add;
  planned_add tag_add;
  if (!plan_add(device, counts, event.bytes, device_add, stopped) ||
      !plan_add(tagged, counts, event.bytes, tag_add, stopped)) {
    return false;  // only without `stopped`: with every shard held, the room was made above
  }
  if (replaces) {
    detail::postmortem::note_event(false, *record, unknown_size);
    remove_bytes(st.device_ref(device_slot_of(record->device)), counts, record->bytes);
    remove_bytes(st.tag_ref(record->tag), counts, record->bytes);
    count_free(counts, device_slot_of(record->device), record->tag);
  } else if (record == nullptr) {
    record = s.claim(a.hash, probed);
    if (record == nullptr) { return true; }  // out of memory: this allocation goes untracked
  }
  // Field by field into the table: a record built on the stack and copied in whole is read back
  // in 16-byte pieces just after its narrower fields were stored, which stalls the copy.
  record->ptr = event.ptr;
  record->bytes = event.bytes;
  record->device = event.device;
  record->stream = event.stream;
  record->kind = event.kind;
  record->tag = a.tag;
  record->thread = a.thread;
  record->time_ns = a.coarse_ns;  // raw: the snapshot converts
  record->site = a.site;
  record->sequence = a.sequence;
  // Inside the shard's lock, like the table: a snapshot that holds every shard sees the counters
  // and the live table of one instant.
  const std::size_t live = add_planned(device, device_add, event.bytes);
  add_planned(tagged, tag_add, event.bytes);
  // Under the lock and after the counters' change (timeline.hpp). Stamped before the stack
  // capture, as it was, an allocation's time could precede that change by the capture's time, and
  // a memory sample in between read the bytes from before it at a later time.
  detail::note_mem_event(true, *record, live, a.thread);
  detail::postmortem::note_event(true, *record, live);
  count_allocation(counts, slot, a.tag, event.bytes);
  thread_memory& memory = mine.memory;
  memory.allocated_bytes += event.bytes;
  ++memory.allocations;
  memory.net += static_cast<std::int64_t>(event.bytes);
  if (memory.net > memory.peak) { memory.peak = memory.net; }
  return true;
}

// The slow path, out of line so that the fast one stays small: a local counter had no room, so
// every thread is stopped while it is made.
__attribute__((noinline)) void record_allocation_stopped(ledger_state& st, live_shard& s, const new_allocation& a,
                                                         thread_state& mine,
                                                         thread_counts& counts) noexcept {
  const detail::all_shards stopped;
  record_allocation_in(st, s, a, mine, counts, true);
}

}  // namespace

void record_allocation(const allocation_event& event) noexcept {
  if (event.ptr == nullptr) { return; }
  ledger_state& st = ledger();
  detail::postmortem::prepare();  // outside every lock: the first claims the post-mortem part
  thread_state& mine = this_thread;
  const std::uint32_t thread = detail::thread_id(mine);
  // The coarse clock: the exact one costs the most of anything here right after a driver call,
  // and only the timeline's events need it.
#if defined(GPUGUARD_VARIANT_NO_CLOCK)  // a measurement build only (benchmarks/ledger_cost_parts.sh)
  const std::int64_t coarse_ns = 0;
#else
  const std::int64_t coarse_ns = detail::coarse_monotonic_ns();
#endif
  const site_id site = maybe_capture_site(st, mine);
  const new_allocation a{event, mine.tag, thread, coarse_ns, site, next_sequence(mine),
                         detail::pointer_hash(event.ptr)};
  if (site != no_site) {
    st.sites.count(site, event.bytes);
    detail::postmortem::note_site(site);
  }
  thread_counts& counts = counts_of(mine);
  live_shard& s = st.table.shard_for(a.hash);
  {
    const std::lock_guard<detail::spin_mutex> lock(s.mutex);
    if (record_allocation_in(st, s, a, mine, counts, false)) { return; }
  }
  record_allocation_stopped(st, s, a, mine, counts);
}

namespace {

free_result record_free_impl(const void* ptr, std::size_t bytes, int current_device, bool interposed) noexcept {
  free_result result;
  if (ptr == nullptr) { return result; }
  ledger_state& st = ledger();
  const std::uint64_t hash = detail::pointer_hash(ptr);
  live_shard& s = st.table.shard_for(hash);
  // Filled only when misuse is found: zeroing it on every free (a rep stos) was measurable.
  misuse_report misuses[2];  // NOLINT(cppcoreguidelines-pro-type-member-init,hicpp-member-init)
  int misuse_count = 0;
  // Where each free happened is kept (for "first freed at" in a double-free report) only with
  // stacks=all: a capture per free would undo what sampling saves.
  const bool capture = st.stacks.load(std::memory_order_relaxed) == static_cast<int>(stack_mode::all);
  const site_id freed_at = capture ? capture_site_now(true) : no_site;
  thread_state& mine = this_thread;
  thread_counts& counts = counts_of(mine);  // before the lock: a thread's first may allocate
  int freed_slot = 0;
  tag_id freed_tag = untagged;
  std::size_t freed_live = unknown_size;  // the device's live bytes after the free, if it was shared
  bool look_at_local = false;             // the device or the tag was shared
  {
    const std::lock_guard<detail::spin_mutex> lock(s.mutex);
    const std::size_t at = s.find(ptr, hash);
    if (allocation_record* slot = s.slots[at].ptr != nullptr ? &s.slots[at] : nullptr) {
      result.known = true;
      result.bytes = slot->bytes;
      result.device = slot->device;
      if (st.inherited(*slot)) {
        s.erase(at);  // the parent's, freed in a forked child: not in the child's counters
        return result;
      }
      if (bytes != unknown_size && bytes != slot->bytes) {
        misuses[misuse_count++] = {interposed, misuse_kind::wrong_size, ptr, bytes, slot->bytes, current_device,
                                   slot->device, slot->site, no_site};
        st.misuse.count(misuse_kind::wrong_size);
      }
      if (slot->kind == memory_kind::device && current_device != unknown_device && current_device != slot->device) {
        misuses[misuse_count++] = {interposed, misuse_kind::wrong_device, ptr, bytes, slot->bytes,
                                   current_device, slot->device, slot->site, no_site};
        st.misuse.count(misuse_kind::wrong_device);
      }
      s.remember_free({ptr, slot->bytes, slot->device, slot->site, freed_at});
      freed_slot = device_slot_of(slot->device);
      freed_tag = slot->tag;
      const std::size_t live = remove_bytes(st.device_ref(freed_slot), counts, slot->bytes);
      const std::size_t tag_live = remove_bytes(st.tag_ref(freed_tag), counts, slot->bytes);
      freed_live = live;
      look_at_local = live != unknown_size || tag_live != unknown_size;
      count_free(counts, freed_slot, freed_tag);
      detail::note_mem_event(false, *slot, live, detail::thread_id(mine));
      detail::postmortem::note_event(false, *slot, live);
      thread_memory& memory = mine.memory;
      memory.freed_bytes += slot->bytes;
      ++memory.frees;
      memory.net -= static_cast<std::int64_t>(slot->bytes);
      s.erase(at);
    } else {
      if (const detail::recent_free* earlier = s.recent_free_of(ptr)) {
        result.double_free = true;
        misuses[misuse_count++] = {interposed, misuse_kind::double_free, ptr, bytes, earlier->bytes,
                                   current_device, earlier->device, earlier->allocated_at,
                                   earlier->freed_at};
        st.misuse.count(misuse_kind::double_free);
      } else if (interposed) {
        // Memory from before tracking began, or from an API the interposer does not see.
        st.misuse.untracked_frees.fetch_add(1, std::memory_order_relaxed);
      } else {
        misuses[misuse_count++] = {interposed, misuse_kind::unknown_pointer, ptr, bytes, 0, current_device,
                                   host_device_id, no_site, no_site};
        st.misuse.count(misuse_kind::unknown_pointer);
      }
    }
  }
  for (int i = 0; i < misuse_count; ++i) { report_misuse(misuses[i]); }
  if (look_at_local) { maybe_go_local(mine, freed_slot, freed_tag, freed_live); }
  return result;
}

}  // namespace

free_result record_free(const void* ptr, std::size_t bytes, int current_device, cudaStream_t /*stream*/) noexcept {
  return record_free_impl(ptr, bytes, current_device, false);
}

free_result record_interposed_free(const void* ptr, int current_device, cudaStream_t /*stream*/) noexcept {
  return record_free_impl(ptr, unknown_size, current_device, true);
}

std::uint32_t ledger_thread_id() noexcept { return detail::thread_id(this_thread); }

namespace {

// Runs `record` with the calling thread's id and tag standing in for another thread's. The
// calling thread's own figures (what its operation scopes read) count the record only when the
// thread is itself.
template <class F>
auto as_thread(std::uint32_t thread, tag_id tag, F&& record) noexcept {
  thread_state& mine = this_thread;
  const std::uint32_t own_id = detail::thread_id(mine);
  const tag_id own_tag = mine.tag;
  const thread_memory own_memory = mine.memory;
  mine.id = thread;
  mine.tag = tag < max_tags ? tag : untagged;
  auto result = record();
  mine.id = own_id;
  mine.tag = own_tag;
  if (thread != own_id) { mine.memory = own_memory; }
  return result;
}

}  // namespace

void record_allocation_as(const allocation_event& event, tag_id tag, std::uint32_t thread) noexcept {
  static_cast<void>(as_thread(thread, tag, [&event] {
    record_allocation(event);
    return true;
  }));
}

free_result record_interposed_free_as(const void* ptr, int current_device, std::uint32_t thread) noexcept {
  return as_thread(thread, this_thread.tag, [&] { return record_free_impl(ptr, unknown_size, current_device, true); });
}

std::uint64_t untracked_frees() noexcept { return ledger().misuse.untracked_frees.load(std::memory_order_relaxed); }

// ---- reading ------------------------------------------------------------------------------------

namespace {

std::atomic<void (*)() noexcept> catch_up_source{nullptr};

// What a source holds back, into the ledger before a reading.
void catch_up() noexcept {
  if (void (*const f)() noexcept = catch_up_source.load(std::memory_order_acquire)) { f(); }
}

}  // namespace

bool python_frames_expected() noexcept { return detail::python_frames_possible(); }

void set_ledger_catch_up(void (*catch_up)() noexcept) noexcept {
  catch_up_source.store(catch_up, std::memory_order_release);
}

ledger_snapshot snapshot(bool with_live) {
  catch_up();
  ledger_state& st = ledger();
  ledger_snapshot snap;
  std::vector<allocation_record> live;
  std::array<counters, device_slots> devices{};
  std::array<counters, max_tags> tag_values{};
  std::array<bool, device_slots> device_used{};
  std::array<bool, max_tags> tag_used{};
  if (with_live) {
    std::size_t estimate = 0;  // from the atomic counters: the shards' own sizes need their locks
    for (int i = 0; i < device_slots; ++i) {
      if (st.devices[static_cast<std::size_t>(i)].ever_used()) { estimate += read_counters(st.device_ref(i)).live_count(); }
    }
    live.reserve(estimate + estimate / 4 + 16);  // allocate before taking the locks
  }
  bool live_complete = true;
  {
    const detail::all_shards stopped;
    for (int i = 0; i < device_slots; ++i) {
      device_used[i] = st.devices[i].ever_used();
      if (device_used[i]) { devices[i] = read_counters(st.device_ref(i)); }
    }
    for (int i = 0; i < max_tags; ++i) {
      tag_used[i] = st.tag_counters[i].ever_used();
      if (tag_used[i]) { tag_values[i] = read_counters(st.tag_ref(static_cast<std::size_t>(i))); }
    }
    snap.misuse = st.misuse.read();  // every shard is held: no catch-up here
    if (with_live) {
      for (const detail::live_shard& s : st.table.shards) {
        for (const allocation_record& record : s.slots) {
          if (record.ptr == nullptr || st.inherited(record)) { continue; }
          if (live.size() == live.capacity()) {
            live_complete = false;  // never reallocate under the locks
            break;
          }
          live.push_back(record);
        }
      }
    }
  }
  if (!live_complete) { return snapshot(true); }  // the live set grew between estimate and lock
  for (allocation_record& record : live) { record.time_ns = detail::coarse_to_ns(record.time_ns); }

  for (int i = 0; i < device_slots; ++i) {
    if (device_used[i]) { snap.devices.emplace_back(i == 0 ? host_device_id : i - 1, devices[i]); }
  }
  for (int i = 0; i < max_tags; ++i) {
    if (tag_used[i]) { snap.tags.emplace_back(tag_name(static_cast<tag_id>(i)), tag_values[i]); }
  }
  std::sort(live.begin(), live.end(), [](const allocation_record& a, const allocation_record& b) {
    return a.sequence < b.sequence;
  });
  snap.live = std::move(live);
  return snap;
}

counters device_counters(int device) noexcept {
  catch_up();
  const counter_ref r = ledger().device_ref(device_slot_of(device));
  // A shared counter's live bytes are one atomic: read as they are, unless the mode changed
  // meanwhile. A local one's are a sum of every thread's part, exact only with everyone stopped.
  const std::uint32_t before = r.counter.mode.load(std::memory_order_acquire);
  if ((before & 1U) == 0) {
    const counters c = read_counters(r);
    if (r.counter.mode.load(std::memory_order_acquire) == before) { return c; }
  }
  const detail::all_shards stopped;
  return read_counters(r);
}

void reset_phase_peak() noexcept {
  catch_up();  // what came before the new phase is in the old one
  const detail::all_shards stopped;
  // A phase peak set to the live bytes leaves no headroom: every counter goes shared.
  ledger().share_every_counter(&detail::live_counter::phase_peak);
}

misuse_counts misuse() noexcept {
  catch_up();
  return ledger().misuse.read();
}

void configure_ledger(const options& opts) noexcept {
  ledger_state& st = ledger();
  st.stack_sample.store(std::max<std::uint32_t>(opts.stack_sample, 1), std::memory_order_relaxed);
  st.stack_depth.store(std::clamp<std::uint32_t>(opts.stack_depth, 1, detail::max_stack_depth),
                       std::memory_order_relaxed);
  st.abort_on_error.store(opts.abort_on_error, std::memory_order_relaxed);
  st.stacks.store(static_cast<int>(opts.stacks), std::memory_order_relaxed);
  detail::set_fast_unwind(opts.fast_unwind);
  detail::set_python_frames(opts.python_frames);
}

// ---- tags and the rest of the core ---------------------------------------------------------------

tag_id current_tag() noexcept { return this_thread.tag; }
void set_current_tag(tag_id tag) noexcept {
  if (tag != untagged && !detail::thread_context_used().load(std::memory_order_relaxed)) {
    detail::note_thread_context();
  }
  this_thread.tag = tag < max_tags ? tag : untagged;
}

void detail::note_thread_context() noexcept {
  // The first time: what a source held back was made before this tag or scope, so it is recorded
  // now, outside them. Sequentially consistent, like the source's claim that reads the flag after
  // taking its ring: one of the two sees the other.
  if (!thread_context_used().exchange(true, std::memory_order_seq_cst)) { catch_up(); }
}

detail::thread_state& detail::this_thread_state() noexcept { return this_thread; }

std::vector<int> detail::active_devices() {
  catch_up();
  std::vector<int> devices;
  const ledger_state& st = ledger();
  for (int i = 0; i < device_slots; ++i) {
    if (st.devices[i].ever_used()) { devices.push_back(i == 0 ? host_device_id : i - 1); }
  }
  return devices;
}

std::vector<frame_info> resolve_site(site_id site) {
  return detail::resolve_site_frames(detail::site_frames(site));
}

}  // namespace gpuguard
