// The post-mortem region's format, the one seqlock discipline its writers and reader follow, and
// the supervisor's side (making the region, reading it). What a tracked process keeps there, in
// memory it shares with `gpuguard run`, lets the supervisor tell what the process held after a
// death no handler saw (SIGKILL, the OOM killer). The supervisor creates one sealed memfd per job
// (create_region) and hands its descriptor down in GPUGUARD_POSTMORTEM_FD; each process that
// records claims a part of its own on its first allocation or operation scope (a child made by
// fork() claims another; ledger/postmortem.hpp writes it), and keeps in it: live bytes and counts
// by site, device and tag, the frames of each site (its Python lines as text, its native frames
// raw) and the module map that names them, the names of the tags and which of them are exit
// holders, the open operation scopes of each thread, and the last events (a ring). Its exit path marks the part
// closed; a part left open by a dead process is what the post-mortem reads (docs/run.md).
//
// The region is plain data: words that are lock-free std::atomic (address-free, so they work in
// memory two processes map at different addresses), offsets instead of pointers, fixed-size slots.
// Each slot is guarded by a sequence word (a seqlock): writers make it odd, store the payload as
// relaxed atomics, and make it even again; a reader copies with relaxed loads and keeps the copy
// only if the word was even and unchanged. A slot a dead writer left odd is in flight: the live
// slots keep two copies, so the last committed one still reads true; a ring or scope slot is left
// out and counted. The reader never waits on a slot. Shared by the core and the tool.
//
// What the ledger records on every allocation and free goes into slices of the part, so that
// keeping the region current costs a few plain stores and no atomic read-modify-write: a thread
// claims a slice of its own on its first event (one compare-and-swap; it gives the slice back when
// it ends, and a later thread continues it) and is then its only writer: its live table (keyed by
// site, device and tag), its ring of events and its peaks are written under single-writer seqlocks. A
// free recorded by another thread than the allocating one is a negative delta in the freeing
// thread's slice; the reader sums a key over every slice (unsigned, wrapping), so the sum is the
// process's figure. Threads beyond the owned slices share slice 0, whose writers take each slot by
// compare-and-swap and the ring's next index by fetch_add, as every writer once did. Each slice's
// ring numbers its own events; the reader merges the rings by time (the coarse clock), then by
// slice and number, which is each thread's own order and, across threads, the order to within a
// clock tick.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gpuguard::detail::postmortem {

using word = std::atomic<std::uint64_t>;
static_assert(word::is_always_lock_free, "the region's words must be address-free: lock-free");
static_assert(sizeof(word) == 8);

/// The environment variable that names the region's descriptor, inherited from the supervisor.
inline constexpr const char* environment_variable = "GPUGUARD_POSTMORTEM_FD";

inline constexpr std::uint64_t region_magic = 0x314d505244524747ULL;  // "GGRDRPM1"
inline constexpr std::uint64_t format_version = 3;
inline constexpr std::size_t part_count = 64;        // tracked processes per job
inline constexpr std::size_t slice_count = 16;       // slice 0 shared, 1..15 one thread's each
inline constexpr std::size_t live_slots = 2048;      // (site, device, tag) keys per slice
inline constexpr std::size_t live_probes = 64;
inline constexpr std::size_t site_slots = 1024;      // sites whose frames are kept
inline constexpr std::size_t frame_depth = 16;       // native frames of a site
inline constexpr std::size_t python_text_words = 32768;  // 256 KiB of the sites' Python lines, per part
inline constexpr std::size_t python_file_bytes = 160;    // the tail of a Python frame's file name kept
inline constexpr std::size_t python_function_bytes = 96; // the head of its function's name kept
inline constexpr std::size_t tag_slots = 256;         // the ledger's tag ids (max_tags)
inline constexpr std::size_t tag_name_words = 8;      // 63 bytes: the ledger's longest tag name
inline constexpr std::size_t ring_slots = 256;       // the last events, per slice
inline constexpr std::size_t scope_threads = 32;
inline constexpr std::size_t scope_depth = 8;        // open scopes kept per thread, outermost first
inline constexpr std::size_t scope_name_words = 6;   // 47 bytes of a scope's name
inline constexpr std::size_t module_slots = 256;
inline constexpr std::size_t module_path_words = 28;
inline constexpr std::size_t text_words = 64;        // the log's path, the program's

/// One (site, device, tag): live bytes and count, in two copies. The sequence word's half (seq / 2)
/// says which copy is current when it is even; a writer writes the other copy, so a writer that
/// dies mid-update leaves the last committed copy whole.
struct live_slot {
  word key;  // 0: free; else live_key(site, device slot, tag)
  word seq;
  word bytes[2];        // live
  word count[2];        // live
  word allocations[2];  // since the part was claimed
  word frees[2];
  word total_bytes[2];  // allocated since the part was claimed
};

inline constexpr std::size_t device_words = 66;  // the host, then devices 0..64

/// A site, written once: its Python lines (innermost first) as text in the part's python_text,
/// `python_frames` lines of "file\tline\tfunction\n" from word `python_offset`, `python_bytes`
/// long (0 with frames: the text area was full), resolved by the process when it first recorded
/// the site, since the table that names them dies with it; then its native frames' raw return
/// addresses, innermost first, for addr2line over the module map.
struct site_slot {
  word seq;
  word site;
  word depth;           // native frames
  word python_frames;
  word python_offset;   // in words
  word python_bytes;
  word frames[frame_depth];
};

/// A tag's name and whether it is an exit holder's (a cache kept until the process ends, such as
/// PyTorch's caching allocator), written when the process interns it or declares it.
struct tag_slot {
  word seq;
  word flags;  // tag_named | tag_holder
  word name[tag_name_words];
};
inline constexpr std::uint64_t tag_named = 1;
inline constexpr std::uint64_t tag_holder = 2;

/// One allocation or free, in the ring.
struct event_slot {
  word seq;
  word index;        // 1 + the event's number in the process
  word time_ns;      // CLOCK_MONOTONIC_COARSE
  word address;
  word bytes;
  word live_bytes;   // the device's live bytes right after it (unknown_size if not known)
  word site_thread;  // site << 32 | gpuguard's thread id
  word device_kind;  // (device + 2) << 1 | alloc
};

struct scope_entry {
  word seq;
  word start_ns;     // CLOCK_MONOTONIC_COARSE
  word name[scope_name_words];
};

/// One thread's open scopes: `depth` of them, the first scope_depth kept.
struct scope_thread {
  word tid;          // the OS thread id; 0: free
  word depth;
  word thread;       // gpuguard's thread id
  word unused;
  scope_entry entries[scope_depth];
};

/// A loaded module: its file, its load bias, and the addresses its segments span.
struct module_slot {
  word seq;
  word base;
  word low;
  word high;
  word path[module_path_words];
};

inline constexpr std::uint64_t part_free = 0;
inline constexpr std::uint64_t part_live = 1;
inline constexpr std::uint64_t part_closed = 2;  // its exit path ran: no post-mortem

/// What one thread (or, slice 0, the threads without one of their own) recorded.
struct slice_header {
  word owner;       // the OS thread id of the thread writing it; 0: none now
  word used;        // 1 once written: its figures count after its thread ended too
  word event_head;  // events recorded here (the ring keeps the last ring_slots)
  word device_peak[device_words];  // the highest live bytes the ledger reported (host, device 0, ...)
  word unused[3];   // to a whole number of cache lines
};

struct slice {
  slice_header header;
  live_slot live[live_slots];
  event_slot events[ring_slots];
};

inline constexpr std::size_t shared_slice = 0;

struct part_header {
  word pid;                // claimed by compare-and-swap from 0
  word state;              // part_live, part_closed
  word start_unix_ns;
  word modules;            // module slots in use
  word dropped_sites;      // events whose (site, device, tag) found no slot in their slice
  word dropped_threads;    // scopes of threads that found no slot
  word log_seq;            // guards the log's fields
  word log_start_unix_ns;  // the JSONL log's t=0 in wall time
  word python_text_used;   // words of python_text taken (by sites, under the writer's mutex)
  word log_path[text_words];
  word program[text_words];
};

struct part {
  part_header header;
  slice slices[slice_count];
  site_slot sites[site_slots];
  scope_thread scopes[scope_threads];
  module_slot modules[module_slots];
  tag_slot tags[tag_slots];
  word python_text[python_text_words];  // plain bytes, each site's written before its slot is published
};

struct region_header {
  word magic;
  word version;
  word parts;
  word part_size;
  word parts_offset;
};

inline constexpr std::size_t parts_offset = 4096;
inline constexpr std::size_t region_bytes = parts_offset + part_count * sizeof(part);

// ---- the supervisor's side ----------------------------------------------------------------------

/// A new region: a memfd of region_bytes, its header written, sealed against shrinking and
/// growing (a truncated mapping would end the reader with SIGBUS). Returns the descriptor (not
/// close-on-exec, so that the job inherits it), or -1 with `error` set.
int create_region(std::string* error);

/// Close-on-exec on or off for `fd`: the supervisor keeps the region from everything it runs but
/// the job.
bool set_inherited(int fd, bool inherited) noexcept;

/// What a dead process left in its part.
struct read_live {
  std::uint32_t site = 0;
  int device = -1;  // -1: host
  std::uint16_t tag = 0;  // 0: untagged
  std::int64_t bytes = 0;
  std::int64_t count = 0;
  std::int64_t allocations = 0;
  std::int64_t frees = 0;
  std::int64_t total_bytes = 0;
  bool in_flight = false;  // a writer died mid-update: its slice's last committed figures
};
struct read_event {
  std::uint64_t index = 0;  // 1 + the event's number in its slice
  std::uint32_t slice = 0;
  std::int64_t time_ns = 0;
  bool alloc = true;
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t live_bytes = 0;
  int device = -1;  // -1: host
  std::uint32_t site = 0;
  std::uint32_t thread = 0;
};
struct read_scope {
  std::string name;
  std::int64_t start_ns = 0;
};
struct read_thread {
  std::int64_t tid = 0;
  std::uint32_t thread = 0;
  std::uint64_t depth = 0;          // open scopes, including those past scope_depth
  std::vector<read_scope> scopes;   // outermost first
  std::uint64_t in_flight = 0;      // slots left out: a scope being entered when it died
};
struct read_python_frame {
  std::string file;
  std::uint32_t line = 0;
  std::string function;
};
struct read_site {
  std::uint32_t site = 0;
  std::vector<read_python_frame> python;  // innermost first
  std::uint64_t python_lost = 0;          // Python frames whose text the full text area could not keep
  std::vector<std::uint64_t> frames;      // native return addresses, innermost first
};
struct read_tag {
  std::uint16_t tag = 0;
  std::string name;
  bool holder = false;  // an exit holder's: kept until the process ends, not a leak
};
struct read_module {
  std::string path;
  std::uint64_t base = 0;
  std::uint64_t low = 0;
  std::uint64_t high = 0;
};
struct read_part {
  std::size_t index = 0;
  pid_t pid = 0;
  bool closed = false;
  std::int64_t start_unix_ns = 0;
  std::string program;
  std::string log_path;
  std::int64_t log_start_unix_ns = 0;
  std::vector<read_live> live;      // (site, device, tag) with live bytes or allocations, summed over slices, by key
  std::vector<read_site> sites;
  std::vector<read_tag> tags;       // the named ones, by id
  std::vector<read_event> events;   // every slice's ring merged, oldest first
  std::uint64_t events_total = 0;
  std::uint64_t events_in_flight = 0;
  std::vector<read_thread> threads; // threads with open scopes
  std::vector<read_module> modules;
  std::uint64_t dropped_sites = 0;
  std::uint64_t dropped_threads = 0;
  std::vector<std::pair<int, std::uint64_t>> device_peaks;  // device (-1: host), peak live bytes
};

/// A read-only view of a region (by descriptor), checked against the format.
class region_reader {
 public:
  /// Maps `fd`; on a region of another size or format, valid() is false and error() says why.
  explicit region_reader(int fd);
  region_reader(const region_reader&) = delete;
  region_reader& operator=(const region_reader&) = delete;
  region_reader(region_reader&&) = delete;
  region_reader& operator=(region_reader&&) = delete;
  ~region_reader();
  [[nodiscard]] bool valid() const noexcept { return base_ != nullptr; }
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  /// Every claimed part. Meant for parts whose process is gone: a live writer's slot that is
  /// mid-update reads as in flight, like a dead one's.
  [[nodiscard]] std::vector<read_part> parts() const;

 private:
  void* base_ = nullptr;
  std::size_t size_ = 0;
  std::string error_;
};

// ---- the seqlock ----------------------------------------------------------------------------------

// A writer takes the slot: even -> odd by compare-and-swap (several threads of the process may
// write one slot; a writer only ever waits for another live writer of its own process), then a
// release fence, so that the odd word is seen before any payload store.
inline std::uint64_t begin_write(word& seq) noexcept {
  std::uint64_t s = seq.load(std::memory_order_relaxed);
  for (;;) {
    if ((s & 1U) == 0 && seq.compare_exchange_weak(s, s + 1, std::memory_order_relaxed)) { break; }
    if ((s & 1U) != 0) {
#if defined(__x86_64__)
      _mm_pause();
#endif
      s = seq.load(std::memory_order_relaxed);
    }
  }
  std::atomic_thread_fence(std::memory_order_release);
  return s;
}

inline void end_write(word& seq, std::uint64_t s) noexcept { seq.store(s + 2, std::memory_order_release); }

// A single writer's slot (a thread's own slice, its scope entry, a module slot under the module
// mutex): plain stores, no read-modify-write.
inline std::uint64_t begin_own_write(word& seq) noexcept {
  const std::uint64_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  return s;
}

inline void store(word& w, std::uint64_t v) noexcept { w.store(v, std::memory_order_relaxed); }
inline std::uint64_t load(const word& w) noexcept { return w.load(std::memory_order_relaxed); }

// The reader's copy: `copy` loads the payload with relaxed loads; it is kept only if the sequence
// word was even before and unchanged after. Returns the word's first value, or 1 (odd) for a slot
// that was mid-write.
template <class Copy>
[[nodiscard]]
std::uint64_t stable_copy(const word& seq, Copy&& copy) {
  const std::uint64_t s1 = seq.load(std::memory_order_acquire);
  copy();
  std::atomic_thread_fence(std::memory_order_acquire);
  const std::uint64_t s2 = seq.load(std::memory_order_relaxed);
  return s1 == s2 && (s1 & 1U) == 0 ? s1 : 1;
}

inline void store_text(word* words, std::size_t count, const char* text, std::size_t length) noexcept {
  length = std::min(length, count * 8 - 1);
  for (std::size_t w = 0; w < count; ++w) {
    std::uint64_t v = 0;
    for (std::size_t b = 0; b < 8; ++b) {
      const std::size_t at = w * 8 + b;
      const auto c = at < length ? static_cast<unsigned char>(text[at]) : 0U;
      v |= static_cast<std::uint64_t>(c) << (8 * b);
    }
    store(words[w], v);
    if (w * 8 + 8 > length) {
      for (std::size_t rest = w + 1; rest < count; ++rest) { store(words[rest], 0); }
      break;
    }
  }
}

inline std::string load_text(const word* words, std::size_t count) {
  std::string text;
  for (std::size_t w = 0; w < count; ++w) {
    const std::uint64_t v = load(words[w]);
    for (std::size_t b = 0; b < 8; ++b) {
      const char c = static_cast<char>((v >> (8 * b)) & 0xFFU);
      if (c == '\0') { return text; }
      text += c;
    }
  }
  return text;
}

/// Appends one Python frame as the region keeps it: "file\tline\tfunction\n", the file's last
/// python_file_bytes and the function's first python_function_bytes, tabs and newlines in them
/// made spaces (the reader's parse_python_text reads it back).
inline void append_python_frame(std::string& out, const std::string& file, std::size_t line, const std::string& function) {
  const auto put = [&out](const std::string& text, std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) { out += text[i] == '\t' || text[i] == '\n' ? ' ' : text[i]; }
  };
  put(file, file.size() > python_file_bytes ? file.size() - python_file_bytes : 0, file.size());
  out += '\t';
  out += std::to_string(line);
  out += '\t';
  put(function, 0, std::min(function.size(), python_function_bytes));
  out += '\n';
}

inline std::uint64_t live_key(std::uint32_t site, int device_slot, std::uint16_t tag) noexcept {
  return ((static_cast<std::uint64_t>(site) << 32) | (static_cast<std::uint64_t>(tag) << 16) |
          static_cast<std::uint64_t>(device_slot)) + 1;
}

inline std::size_t hash_index(std::uint64_t key, std::size_t slots) noexcept {
  return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> 40) & (slots - 1);
}
static_assert((live_slots & (live_slots - 1)) == 0 && (site_slots & (site_slots - 1)) == 0 &&
              (scope_threads & (scope_threads - 1)) == 0);

}  // namespace gpuguard::detail::postmortem
