// The tracked process's side of the post-mortem region (postmortem.hpp): its part, claimed once, and
// what the ledger, the scopes and the outputs keep in it.
#include "ledger/postmortem.hpp"

#include <gpuguard/core/allocation_source.hpp>

#include "ledger/ledger_internal.hpp"
#include "ledger/python_frames.hpp"
#include "ledger/stacks.hpp"
#include "ledger/tags.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gpuguard::detail::postmortem {


static_assert(device_slots <= static_cast<int>(device_words), "a peak word per device slot");
static_assert(max_tags <= static_cast<int>(tag_slots) && max_tag_length < tag_name_words * 8, "a slot per tag, its whole name");

std::atomic<part*> current_part{nullptr};
std::atomic<bool> region_possible{true};

namespace {

std::int64_t coarse_now_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

std::int64_t unix_now_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

// ---- the writer's state ---------------------------------------------------------------------------

std::mutex& claim_mutex() {
  static std::mutex* m = new std::mutex;  // never destroyed: frees come after static destructors
  return *m;
}

part* mapped_parts = nullptr;  // the region's first part, once attached (under claim_mutex)
std::atomic<std::uint64_t> fork_generation{0};
std::uint64_t modules_seen = 0;  // dlpi_adds + dlpi_subs when the module map was last written

void in_forked_child() noexcept {
  // The child records into a part of its own, claimed on its first record; the parent's part and
  // its mapping are inherited as they are.
  current_part.store(nullptr, std::memory_order_relaxed);
  region_possible.store(mapped_parts != nullptr, std::memory_order_relaxed);
  fork_generation.fetch_add(1, std::memory_order_relaxed);
  new (&claim_mutex()) std::mutex;  // another thread may have held it at the fork
}

struct module_walk {
  part* into = nullptr;
  std::size_t count = 0;
  std::uint64_t changes = 0;
};

int write_module(dl_phdr_info* info, std::size_t /*size*/, void* data) {
  auto& walk = *static_cast<module_walk*>(data);
  walk.changes = info->dlpi_adds + info->dlpi_subs;
  if (walk.count >= module_slots) { return 0; }
  std::uint64_t low = UINT64_MAX;
  std::uint64_t high = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) { continue; }
    low = std::min<std::uint64_t>(low, info->dlpi_addr + ph.p_vaddr);
    high = std::max<std::uint64_t>(high, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
  }
  if (high == 0) { return 0; }
  char exe[PATH_MAX];
  const char* path = info->dlpi_name;
  if (path == nullptr || *path == '\0') {  // the main program
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) { return 0; }
    exe[n] = '\0';
    path = exe;
  }
  module_slot& m = walk.into->modules[walk.count++];
  const std::uint64_t s = begin_own_write(m.seq);
  store(m.base, info->dlpi_addr);
  store(m.low, low);
  store(m.high, high);
  store_text(m.path, module_path_words, path, std::strlen(path));
  end_write(m.seq, s);
  return 0;
}

// Under claim_mutex.
void write_modules(part& p) noexcept {
  module_walk walk{&p, 0, 0};
  ::dl_iterate_phdr(write_module, &walk);
  modules_seen = walk.changes;
  p.header.modules.store(walk.count, std::memory_order_release);
}

int changes_only(dl_phdr_info* info, std::size_t /*size*/, void* data) {
  *static_cast<std::uint64_t*>(data) = info->dlpi_adds + info->dlpi_subs;
  return 1;
}

// Which tags are exit holders', process-wide: declared before a part is claimed, they are written
// into it when it is.
std::array<std::atomic<std::uint64_t>, (tag_slots + 63) / 64> holder_tags{};

// Under claim_mutex.
void write_tag(part& p, tag_id tag, std::string_view name) noexcept {
  if (tag == untagged || tag >= tag_slots) { return; }
  tag_slot& slot = p.tags[tag];
  const bool holder = (holder_tags[tag / 64].load(std::memory_order_relaxed) >> (tag % 64) & 1U) != 0;
  const std::uint64_t s = begin_own_write(slot.seq);
  if (!name.empty()) { store_text(slot.name, tag_name_words, name.data(), name.size()); }
  store(slot.flags, load(slot.flags) | (name.empty() ? 0 : tag_named) | (holder ? tag_holder : 0));
  end_write(slot.seq, s);
}

// Under claim_mutex: every tag interned so far (the process's table; a forked child's too).
void write_tags(part& p) noexcept {
  for (std::size_t tag = 1; tag < static_cast<std::size_t>(max_tags); ++tag) {
    try {
      const std::string name = process_tags().name(static_cast<tag_id>(tag));
      if (!name.empty()) { write_tag(p, static_cast<tag_id>(tag), name); }
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: this tag stays unnamed
    }
  }
}

bool map_region(int fd) noexcept {
  struct stat st{};
  if (fd < 0 || ::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != region_bytes) { return false; }
  void* base = ::mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) { return false; }
  const auto* header = static_cast<const region_header*>(base);
  if (load(header->magic) != region_magic || load(header->version) != format_version ||
      load(header->part_size) != sizeof(part) || load(header->parts) != part_count ||
      load(header->parts_offset) != parts_offset) {
    ::munmap(base, region_bytes);
    return false;
  }
  mapped_parts = reinterpret_cast<part*>(static_cast<char*>(base) + parts_offset);
  return true;
}

// Under claim_mutex, with the region mapped.
part* claim_part() noexcept {
  const auto pid = static_cast<std::uint64_t>(::getpid());
  for (std::size_t i = 0; i < part_count; ++i) {
    part& p = mapped_parts[i];
    std::uint64_t expected = 0;
    if (!p.header.pid.compare_exchange_strong(expected, pid, std::memory_order_acq_rel)) { continue; }
    store(p.header.start_unix_ns, static_cast<std::uint64_t>(unix_now_ns()));
    char exe[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    store_text(p.header.program, text_words, exe, n > 0 ? static_cast<std::size_t>(n) : 0);
    write_modules(p);
    write_tags(p);
    p.header.state.store(part_live, std::memory_order_release);
    return &p;
  }
  return nullptr;  // every part taken: this process keeps none
}

thread_local scope_thread* my_scopes = nullptr;
thread_local std::uint64_t my_scopes_generation = 0;

scope_thread* scopes_of_this_thread(part& p, std::uint32_t thread) noexcept {
  const std::uint64_t generation = fork_generation.load(std::memory_order_relaxed);
  if (my_scopes != nullptr && my_scopes_generation == generation) { return my_scopes; }
  const auto tid = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  const std::size_t start = hash_index(tid, scope_threads);
  for (std::size_t probe = 0; probe < scope_threads; ++probe) {
    scope_thread& t = p.scopes[(start + probe) & (scope_threads - 1)];
    std::uint64_t expected = 0;
    if (t.tid.compare_exchange_strong(expected, tid, std::memory_order_relaxed) || expected == tid) {
      if (thread != 0) { store(t.thread, thread); }
      my_scopes = &t;
      my_scopes_generation = generation;
      return &t;
    }
  }
  p.header.dropped_threads.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

}  // namespace

// ---- the tracked process's side -----------------------------------------------------------------

bool attach(int fd) noexcept {
  const std::lock_guard<std::mutex> lock(claim_mutex());
  static const bool fork_handler = ::pthread_atfork(nullptr, nullptr, in_forked_child) == 0;
  static_cast<void>(fork_handler);
  if (mapped_parts == nullptr && !map_region(fd)) { return false; }
  if (current_part.load(std::memory_order_relaxed) == nullptr) {
    part* p = claim_part();
    current_part.store(p, std::memory_order_release);
    if (p == nullptr) { region_possible.store(false, std::memory_order_relaxed); }
  }
  return current_part.load(std::memory_order_relaxed) != nullptr;
}

void detach() noexcept {
  const std::lock_guard<std::mutex> lock(claim_mutex());
  close_part();
  current_part.store(nullptr, std::memory_order_relaxed);
  region_possible.store(false, std::memory_order_relaxed);
}

void claim_slow() noexcept {
  {
    const std::lock_guard<std::mutex> lock(claim_mutex());
    if (current_part.load(std::memory_order_relaxed) != nullptr || !region_possible.load(std::memory_order_relaxed)) {
      return;
    }
    if (mapped_parts == nullptr) {
      // First look: the inherited descriptor. It stays open for the process's own children.
      const char* value = std::getenv(environment_variable);
      char* end = nullptr;
      const long fd = value != nullptr ? std::strtol(value, &end, 10) : -1;
      if (value == nullptr || end == value || *end != '\0' || fd < 0 || fd > INT_MAX ||
          !map_region(static_cast<int>(fd))) {
        region_possible.store(false, std::memory_order_relaxed);
        return;
      }
    }
  }
  static_cast<void>(attach(-1));
}

namespace {

// The calling thread's slice of the part it writes: one of its own (its only writer), or the
// shared one. Checked against the part on every event, so that a part claimed anew (after a
// fork, or detach and attach) sends the thread to claim again.
__attribute__((tls_model("initial-exec"))) thread_local slice* my_slice = nullptr;

// Gives the thread's own slice back when the thread ends; a later thread continues it (the
// reader sums every slice's deltas). Events the thread records after this, from other
// thread_locals' destructors, go to the shared slice.
struct slice_owner {
  part* of = nullptr;
  slice* owned = nullptr;
  slice_owner() = default;
  slice_owner(const slice_owner&) = delete;
  slice_owner& operator=(const slice_owner&) = delete;
  slice_owner(slice_owner&&) = delete;
  slice_owner& operator=(slice_owner&&) = delete;
  ~slice_owner() {
    if (owned == nullptr) { return; }
    my_slice = &of->slices[shared_slice];
    of->slices[shared_slice].header.used.store(1, std::memory_order_release);
    owned->header.owner.store(0, std::memory_order_release);  // after its last store: the next owner sees them all
  }
};

bool in_part(const part& p, const slice* s) noexcept {
  return static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(s) - reinterpret_cast<std::uintptr_t>(&p.slices[0])) <
         sizeof p.slices;
}

// Out of line: once per thread (and part).
__attribute__((noinline)) slice* claim_slice(part& p) noexcept {
  const auto tid = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  slice* chosen = &p.slices[shared_slice];
  for (std::size_t i = shared_slice + 1; i < slice_count; ++i) {
    std::uint64_t expected = 0;
    // Acquire: a slice an ended thread gave back is continued from its last stores.
    if (p.slices[i].header.owner.compare_exchange_strong(expected, tid, std::memory_order_acq_rel)) {
      chosen = &p.slices[i];
      static thread_local slice_owner owner;  // registers the thread's exit hook
      owner.of = &p;
      owner.owned = chosen;
      break;
    }
  }
  chosen->header.used.store(1, std::memory_order_release);
  my_slice = chosen;
  return chosen;
}

// The live slot of `key` in slice `sl`, inserted if new (a free in another thread's slice than
// its allocation's is inserted too: a negative delta). The shared slice's writers insert by
// compare-and-swap; an owned slice's one writer stores.
live_slot* live_slot_of(slice& sl, std::uint64_t key, bool shared) noexcept {
  const std::size_t start = hash_index(key, live_slots);
  for (std::size_t probe = 0; probe < live_probes; ++probe) {
    live_slot& s = sl.live[(start + probe) & (live_slots - 1)];
    std::uint64_t k = s.key.load(std::memory_order_relaxed);
    if (k == key) { return &s; }
    if (k != 0) { continue; }
    if (!shared) {
      s.key.store(key, std::memory_order_release);
      return &s;
    }
    if (s.key.compare_exchange_strong(k, key, std::memory_order_relaxed) || k == key) { return &s; }
  }
  return nullptr;
}

}  // namespace

void note_event_slow(part& p, bool alloc, const allocation_record& record, std::uint64_t live_bytes) noexcept {
  slice* sl = my_slice;
  if (!in_part(p, sl)) [[unlikely]] { sl = claim_slice(p); }
  // Slice 0 has several writers: each slot is taken by compare-and-swap, as before slices. Every
  // other slice has one: plain stores under its sequence words.
  const bool shared = sl == &p.slices[shared_slice];
  const int device_slot = device_slot_of(record.device);
  if (live_slot* slot = live_slot_of(*sl, live_key(record.site, device_slot, record.tag), shared)) {
    const std::uint64_t s = shared ? begin_write(slot->seq) : begin_own_write(slot->seq);
    const std::size_t current = (s >> 1) & 1U;
    const std::size_t n = current ^ 1U;
    const std::uint64_t bytes = load(slot->bytes[current]);
    const std::uint64_t count = load(slot->count[current]);
    store(slot->bytes[n], alloc ? bytes + record.bytes : bytes - record.bytes);
    store(slot->count[n], alloc ? count + 1 : count - 1);
    store(slot->allocations[n], load(slot->allocations[current]) + (alloc ? 1 : 0));
    store(slot->frees[n], load(slot->frees[current]) + (alloc ? 0 : 1));
    store(slot->total_bytes[n], load(slot->total_bytes[current]) + (alloc ? record.bytes : 0));
    end_write(slot->seq, s);
  } else {
    p.header.dropped_sites.fetch_add(1, std::memory_order_relaxed);  // a full neighbourhood: seldom
  }
  // The peak: only when it rises (seldom), and only where the ledger knows the device's live
  // bytes (its counter shared). Each slice keeps the highest it saw; the reader takes the highest.
  if (alloc && live_bytes != unknown_size && static_cast<std::size_t>(device_slot) < device_words) {
    word& peak = sl->header.device_peak[device_slot];
    std::uint64_t seen = load(peak);
    if (live_bytes > seen) [[unlikely]] {
      if (!shared) {
        store(peak, live_bytes);
      } else {
        while (live_bytes > seen && !peak.compare_exchange_weak(seen, live_bytes, std::memory_order_relaxed)) {}
      }
    }
  }
  std::uint64_t index = 0;
  if (shared) {
    index = sl->header.event_head.fetch_add(1, std::memory_order_relaxed);
  } else {
    index = load(sl->header.event_head);
    store(sl->header.event_head, index + 1);
  }
  event_slot& e = sl->events[index & (ring_slots - 1)];
  const std::uint64_t s = shared ? begin_write(e.seq) : begin_own_write(e.seq);
  store(e.index, index + 1);
  // An allocation's record holds its own time; a free's holds its allocation's.
  store(e.time_ns, static_cast<std::uint64_t>(alloc ? record.time_ns : coarse_now_ns()));
  store(e.address, reinterpret_cast<std::uintptr_t>(record.ptr));
  store(e.bytes, record.bytes);
  store(e.live_bytes, live_bytes);
  store(e.site_thread, (static_cast<std::uint64_t>(record.site) << 32) | record.thread);
  store(e.device_kind, (static_cast<std::uint64_t>(record.device + 2) << 1) | (alloc ? 1U : 0U));
  end_write(e.seq, s);
}
static_assert((ring_slots & (ring_slots - 1)) == 0);

bool site_known(const part& p, site_id site) noexcept {
  const std::size_t start = hash_index(site, site_slots);
  for (std::size_t probe = 0; probe < 8; ++probe) {
    const std::uint64_t s = load(p.sites[(start + probe) & (site_slots - 1)].site);
    if (s == site) { return true; }
    if (s == 0) { return false; }
  }
  return true;  // a crowded neighbourhood: this site's frames are not kept
}

void note_site_slow(part& p, site_id site) noexcept {
  std::vector<void*> frames;
  std::size_t python_slots = 0;
  std::size_t python_frames = 0;
  std::string python_text;
  try {
    frames = site_frames(site);
    // The Python part's text now: the table that names its words dies with the process. Neither
    // the GIL nor Python is needed (python_frames.hpp); once per site.
    python_slots = python_prefix_length(frames.data(), frames.size());
    const std::vector<frame_info> python = resolve_python_frames(frames.data(), frames.size());
    python_frames = python.size();
    for (const frame_info& f : python) { append_python_frame(python_text, f.file, f.line, f.function); }
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: the site stays unnamed
    return;
  }
  const std::lock_guard<std::mutex> lock(claim_mutex());
  std::uint64_t changes = 0;
  ::dl_iterate_phdr(changes_only, &changes);
  if (changes != modules_seen) { write_modules(p); }
  const std::size_t start = hash_index(site, site_slots);
  for (std::size_t probe = 0; probe < 8; ++probe) {
    site_slot& slot = p.sites[(start + probe) & (site_slots - 1)];
    const std::uint64_t s = load(slot.site);
    if (s == site) { return; }
    if (s != 0) { continue; }
    // The text first, in words no one else takes (under claim_mutex): published with the slot.
    const std::uint64_t used = load(p.header.python_text_used);
    const std::size_t words = python_text.empty() ? 0 : python_text.size() / 8 + 1;  // with its NUL
    const bool fits = used + words <= python_text_words;
    if (fits && words != 0) {
      store_text(p.python_text + used, words, python_text.data(), python_text.size());
      store(p.header.python_text_used, used + words);
    }
    const std::uint64_t seq = begin_own_write(slot.seq);
    store(slot.site, site);
    store(slot.python_frames, python_frames);
    store(slot.python_offset, fits ? used : 0);
    store(slot.python_bytes, fits ? python_text.size() : 0);
    const std::size_t depth = std::min(frames.size() - python_slots, frame_depth);
    store(slot.depth, depth);
    for (std::size_t i = 0; i < depth; ++i) {
      store(slot.frames[i], reinterpret_cast<std::uintptr_t>(frames[python_slots + i]));
    }
    end_write(slot.seq, seq);
    return;
  }
}

void note_tag(tag_id tag, std::string_view name) noexcept {
  const std::lock_guard<std::mutex> lock(claim_mutex());
  if (part* p = current_part.load(std::memory_order_relaxed)) { write_tag(*p, tag, name); }
}

void note_exit_holder(tag_id tag) noexcept {
  if (tag == untagged || tag >= tag_slots) { return; }
  const std::lock_guard<std::mutex> lock(claim_mutex());
  holder_tags[tag / 64].fetch_or(std::uint64_t{1} << (tag % 64), std::memory_order_relaxed);
  if (part* p = current_part.load(std::memory_order_relaxed)) { write_tag(*p, tag, {}); }
}

void scope_entered(std::uint32_t depth, const char* name, std::uint32_t thread) noexcept {
  prepare();
  part* p = current_part.load(std::memory_order_relaxed);
  if (p == nullptr) { return; }
  scope_thread* t = scopes_of_this_thread(*p, thread);
  if (t == nullptr) { return; }
  if (depth < scope_depth) {
    scope_entry& e = t->entries[depth];
    const std::uint64_t s = begin_own_write(e.seq);
    store(e.start_ns, static_cast<std::uint64_t>(coarse_now_ns()));
    store_text(e.name, scope_name_words, name, std::strlen(name));
    end_write(e.seq, s);
  }
  // Published after the entry: a reader that sees the depth sees the entry whole.
  t->depth.store(depth + 1, std::memory_order_release);
}

void scope_left(std::uint32_t depth) noexcept {
  part* p = current_part.load(std::memory_order_relaxed);
  if (p == nullptr) { return; }
  if (scope_thread* t = scopes_of_this_thread(*p, 0)) { t->depth.store(depth, std::memory_order_release); }
}

void note_log(const std::string& path, std::int64_t start_unix_ns) noexcept {
  prepare();
  part* p = current_part.load(std::memory_order_relaxed);
  if (p == nullptr) { return; }
  char resolved[PATH_MAX];
  const char* absolute = ::realpath(path.c_str(), resolved) != nullptr ? resolved : path.c_str();
  const std::lock_guard<std::mutex> lock(claim_mutex());
  const std::uint64_t s = begin_own_write(p->header.log_seq);
  store_text(p->header.log_path, text_words, absolute, std::strlen(absolute));
  store(p->header.log_start_unix_ns, static_cast<std::uint64_t>(start_unix_ns));
  end_write(p->header.log_seq, s);
}

void close_part() noexcept {
  if (part* p = current_part.load(std::memory_order_relaxed)) {
    p->header.state.store(part_closed, std::memory_order_release);
  }
}

}  // namespace gpuguard::detail::postmortem
