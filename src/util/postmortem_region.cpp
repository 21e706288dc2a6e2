// The post-mortem region (postmortem_region.hpp): making it, and reading a dead process's part.
#include "util/postmortem_region.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <type_traits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gpuguard::detail::postmortem {

static_assert(std::is_standard_layout_v<part> && std::is_standard_layout_v<region_header>);
static_assert(sizeof(region_header) <= parts_offset);
static_assert(sizeof(event_slot) == 64 && sizeof(scope_entry) == 64, "slots of one cache line");
static_assert(sizeof(slice_header) % 64 == 0 && sizeof(live_slot) % 32 == 0, "slices in whole cache lines");

// ---- the supervisor's side ----------------------------------------------------------------------

int create_region(std::string* error) {
  const int fd = static_cast<int>(::syscall(SYS_memfd_create, "gpuguard-postmortem", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0) {
    *error = std::string("memfd_create: ") + std::strerror(errno);
    return -1;
  }
  const auto fail = [&](const char* what) {
    *error = std::string(what) + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  };
  if (::ftruncate(fd, static_cast<off_t>(region_bytes)) != 0) { return fail("ftruncate"); }
  void* base = ::mmap(nullptr, parts_offset, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) { return fail("mmap"); }
  auto* header = static_cast<region_header*>(base);
  store(header->version, format_version);
  store(header->parts, part_count);
  store(header->part_size, sizeof(part));
  store(header->parts_offset, parts_offset);
  header->magic.store(region_magic, std::memory_order_release);
  ::munmap(base, parts_offset);
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) { return fail("F_ADD_SEALS"); }
  return fd;
}

bool set_inherited(int fd, bool inherited) noexcept {
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags < 0) { return false; }
  return ::fcntl(fd, F_SETFD, inherited ? (flags & ~FD_CLOEXEC) : (flags | FD_CLOEXEC)) == 0;
}

region_reader::region_reader(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    error_ = std::string("fstat: ") + std::strerror(errno);
    return;
  }
  if (static_cast<std::size_t>(st.st_size) != region_bytes) {
    error_ = "the region is " + std::to_string(st.st_size) + " bytes, not " + std::to_string(region_bytes);
    return;
  }
  // Sealed against shrinking: the mapping cannot turn into SIGBUS under the reader.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    error_ = "the region is not sealed against shrinking";
    return;
  }
  void* base = ::mmap(nullptr, region_bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    error_ = std::string("mmap: ") + std::strerror(errno);
    return;
  }
  const auto* header = static_cast<const region_header*>(base);
  const std::uint64_t version = load(header->version);
  if (header->magic.load(std::memory_order_acquire) != region_magic) {
    error_ = "the region's header is not a gpuguard post-mortem region's";
  } else if (version != format_version) {
    // A job whose processes run another gpuguard than the supervisor's.
    error_ = "the region is format " + std::to_string(version) + ", and this gpuguard reads format " +
             std::to_string(format_version) + " only";
  } else if (load(header->part_size) != sizeof(part) || load(header->parts) != part_count) {
    error_ = "the region's header is format " + std::to_string(format_version) + " with other part sizes";
  }
  if (!error_.empty()) {
    ::munmap(base, region_bytes);
    return;
  }
  base_ = base;
  size_ = region_bytes;
}

region_reader::~region_reader() {
  if (base_ != nullptr) { ::munmap(base_, size_); }
}

namespace {

// A site's Python lines: `bytes` of the part's text area from word `offset`, bounded by the area.
std::string python_text_of(const part& p, std::uint64_t offset, std::uint64_t bytes) {
  if (offset >= python_text_words) { return {}; }
  bytes = std::min<std::uint64_t>(bytes, (python_text_words - offset) * 8);
  std::string text;
  text.reserve(static_cast<std::size_t>(bytes));
  for (std::uint64_t at = 0; at < bytes; ++at) {
    const std::uint64_t w = load(p.python_text[offset + at / 8]);
    text += static_cast<char>((w >> (8 * (at % 8))) & 0xFFU);
  }
  return text;
}

// "file\tline\tfunction\n" per frame (format_python_frame); a malformed line is left out.
std::vector<read_python_frame> parse_python_text(const std::string& text) {
  std::vector<read_python_frame> frames;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) { end = text.size(); }
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const std::size_t tab1 = line.find('\t');
    const std::size_t tab2 = tab1 == std::string::npos ? std::string::npos : line.find('\t', tab1 + 1);
    if (tab2 == std::string::npos) { continue; }
    read_python_frame f;
    f.file = line.substr(0, tab1);
    f.line = static_cast<std::uint32_t>(std::strtoul(line.substr(tab1 + 1, tab2 - tab1 - 1).c_str(), nullptr, 10));
    f.function = line.substr(tab2 + 1);
    frames.push_back(std::move(f));
  }
  return frames;
}

read_part read_one(const part& p, std::size_t at) {
  read_part r;
  r.index = at;
  r.pid = static_cast<pid_t>(p.header.pid.load(std::memory_order_acquire));
  r.closed = p.header.state.load(std::memory_order_acquire) == part_closed;
  r.start_unix_ns = static_cast<std::int64_t>(load(p.header.start_unix_ns));
  r.program = load_text(p.header.program, text_words);
  r.dropped_sites = load(p.header.dropped_sites);
  r.dropped_threads = load(p.header.dropped_threads);
  std::string log_path;
  std::int64_t log_start = 0;
  if (stable_copy(p.header.log_seq, [&] {
        log_path = load_text(p.header.log_path, text_words);
        log_start = static_cast<std::int64_t>(load(p.header.log_start_unix_ns));
      }) != 1) {
    r.log_path = log_path;
    r.log_start_unix_ns = log_start;
  }
  // Each slice holds its threads' deltas of a (site, device): the sum over the slices, unsigned
  // and wrapping (a free in another thread's slice than its allocation's is negative there), is
  // the process's figure.
  std::map<std::uint64_t, read_live> live;
  std::uint64_t peaks[device_words] = {};
  for (std::size_t at_slice = 0; at_slice < slice_count; ++at_slice) {
    const slice& sl = p.slices[at_slice];
    if (sl.header.used.load(std::memory_order_acquire) == 0) { continue; }
    r.events_total += load(sl.header.event_head);
    for (std::size_t d = 0; d < device_words; ++d) { peaks[d] = std::max(peaks[d], load(sl.header.device_peak[d])); }
    for (const live_slot& slot : sl.live) {
      const std::uint64_t key = slot.key.load(std::memory_order_acquire);
      if (key == 0) { continue; }
      // A dead writer's odd word: the copy it was not writing is the last committed one.
      const std::uint64_t seq = slot.seq.load(std::memory_order_acquire);
      const bool odd = (seq & 1U) != 0;
      const std::size_t current = ((odd ? seq - 1 : seq) >> 1) & 1U;
      const std::uint64_t bytes = load(slot.bytes[current]);
      const std::uint64_t count = load(slot.count[current]);
      const std::uint64_t allocations = load(slot.allocations[current]);
      const std::uint64_t frees = load(slot.frees[current]);
      const std::uint64_t total_bytes = load(slot.total_bytes[current]);
      std::atomic_thread_fence(std::memory_order_acquire);
      const bool in_flight = odd || slot.seq.load(std::memory_order_relaxed) != seq;
      read_live& l = live[key];
      l.site = static_cast<std::uint32_t>((key - 1) >> 32);
      l.tag = static_cast<std::uint16_t>(((key - 1) >> 16) & 0xFFFFU);
      const int device_slot = static_cast<int>((key - 1) & 0xFFFFU);
      l.device = device_slot == 0 ? -1 : device_slot - 1;
      const auto add = [](std::int64_t& to, std::uint64_t delta) {
        to = static_cast<std::int64_t>(static_cast<std::uint64_t>(to) + delta);
      };
      add(l.bytes, bytes);
      add(l.count, count);
      add(l.allocations, allocations);
      add(l.frees, frees);
      add(l.total_bytes, total_bytes);
      l.in_flight = l.in_flight || in_flight;
    }
  }
  for (std::size_t d = 0; d < device_words; ++d) {
    if (peaks[d] != 0) { r.device_peaks.emplace_back(static_cast<int>(d) - 1, peaks[d]); }
  }
  for (const auto& [key, l] : live) {
    if (l.bytes != 0 || l.count != 0 || l.allocations != 0 || l.in_flight) { r.live.push_back(l); }
  }
  for (const site_slot& slot : p.sites) {
    std::uint64_t site = 0;
    read_site rs;
    std::string text;
    if (stable_copy(slot.seq, [&] {
          site = load(slot.site);
          const std::uint64_t depth = std::min<std::uint64_t>(load(slot.depth), frame_depth);
          rs.frames.clear();
          for (std::uint64_t i = 0; i < depth; ++i) { rs.frames.push_back(load(slot.frames[i])); }
          rs.python_lost = load(slot.python_frames);
          text = python_text_of(p, load(slot.python_offset), load(slot.python_bytes));
        }) == 1 || site == 0) {
      continue;
    }
    rs.site = static_cast<std::uint32_t>(site);
    rs.python = parse_python_text(text);
    rs.python_lost -= std::min<std::uint64_t>(rs.python_lost, rs.python.size());
    r.sites.push_back(std::move(rs));
  }
  for (std::size_t id = 1; id < tag_slots; ++id) {
    const tag_slot& slot = p.tags[id];
    read_tag t;
    std::uint64_t flags = 0;
    if (stable_copy(slot.seq, [&] {
          flags = load(slot.flags);
          t.name = load_text(slot.name, tag_name_words);
        }) == 1 || (flags & tag_named) == 0) {
      continue;
    }
    t.tag = static_cast<std::uint16_t>(id);
    t.holder = (flags & tag_holder) != 0;
    r.tags.push_back(std::move(t));
  }
  for (std::size_t at_slice = 0; at_slice < slice_count; ++at_slice) {
    const slice& sl = p.slices[at_slice];
    if (sl.header.used.load(std::memory_order_acquire) == 0) { continue; }
    for (const event_slot& slot : sl.events) {
      read_event e;
      std::uint64_t index = 0;
      std::uint64_t site_thread = 0;
      std::uint64_t device_kind = 0;
      if (stable_copy(slot.seq, [&] {
            index = load(slot.index);
            e.time_ns = static_cast<std::int64_t>(load(slot.time_ns));
            e.address = load(slot.address);
            e.bytes = load(slot.bytes);
            e.live_bytes = load(slot.live_bytes);
            site_thread = load(slot.site_thread);
            device_kind = load(slot.device_kind);
          }) == 1) {
        ++r.events_in_flight;
        continue;
      }
      if (index == 0) { continue; }
      e.index = index;
      e.slice = static_cast<std::uint32_t>(at_slice);
      e.site = static_cast<std::uint32_t>(site_thread >> 32);
      e.thread = static_cast<std::uint32_t>(site_thread & 0xFFFFFFFFU);
      e.alloc = (device_kind & 1U) != 0;
      e.device = static_cast<int>(device_kind >> 1) - 2;
      r.events.push_back(e);
    }
  }
  // By time, then each slice's own order: a thread's events keep theirs (its clock readings do
  // not go back), and threads' events interleave to within a tick of the coarse clock.
  std::sort(r.events.begin(), r.events.end(), [](const read_event& a, const read_event& b) {
    return std::tie(a.time_ns, a.slice, a.index) < std::tie(b.time_ns, b.slice, b.index);
  });
  for (const scope_thread& t : p.scopes) {
    const std::uint64_t tid = load(t.tid);
    const std::uint64_t depth = t.depth.load(std::memory_order_acquire);
    if (tid == 0 || depth == 0) { continue; }
    read_thread rt;
    rt.tid = static_cast<std::int64_t>(tid);
    rt.thread = static_cast<std::uint32_t>(load(t.thread));
    rt.depth = depth;
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(depth, scope_depth); ++i) {
      read_scope s;
      if (stable_copy(t.entries[i].seq, [&] {
            s.start_ns = static_cast<std::int64_t>(load(t.entries[i].start_ns));
            s.name = load_text(t.entries[i].name, scope_name_words);
          }) == 1) {
        ++rt.in_flight;
        continue;
      }
      rt.scopes.push_back(std::move(s));
    }
    r.threads.push_back(std::move(rt));
  }
  const std::uint64_t modules = std::min<std::uint64_t>(p.header.modules.load(std::memory_order_acquire), module_slots);
  for (std::uint64_t i = 0; i < modules; ++i) {
    const module_slot& slot = p.modules[i];
    read_module m;
    if (stable_copy(slot.seq, [&] {
          m.base = load(slot.base);
          m.low = load(slot.low);
          m.high = load(slot.high);
          m.path = load_text(slot.path, module_path_words);
        }) == 1) {
      continue;
    }
    r.modules.push_back(std::move(m));
  }
  return r;
}

}  // namespace

std::vector<read_part> region_reader::parts() const {
  std::vector<read_part> out;
  if (base_ == nullptr) { return out; }
  const auto* first = reinterpret_cast<const part*>(static_cast<const char*>(base_) + parts_offset);
  for (std::size_t i = 0; i < part_count; ++i) {
    if (first[i].header.pid.load(std::memory_order_acquire) == 0) { continue; }
    out.push_back(read_one(first[i], i));
  }
  return out;
}

}  // namespace gpuguard::detail::postmortem
