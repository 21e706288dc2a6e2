// The post-mortem region (src/util/postmortem_region.hpp, src/ledger/postmortem.hpp): a child that
// records through the library is SIGKILLed at random points, and what the region says after its
// death is checked against what the child had committed (it tells the test through a pipe after
// each operation; the operations follow a seed, so the test knows the one after the last it heard
// of too). The region may hold that next one too, or half of it, never a figure of neither.
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/options.hpp>
#include <gpuguard/core/tracking.hpp>

#include "util/postmortem_region.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

// A made-up address as a pointer: the ledger keys on it and never touches the memory.
void* as_pointer(std::uintptr_t address) {
  return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr)
}

namespace pm = gpuguard::detail::postmortem;

constexpr int op_limit = 3000;
const char* const scope_names[] = {"step", "forward", "backward", "optimizer"};

// The child's operations, from a seed: allocations at three sites on three devices (the host,
// 0, 1), frees of live ones, scopes entered and left.
struct model {
  struct block {
    std::uintptr_t address;
    int site;
    int device;
    std::size_t bytes;
  };
  struct op {
    enum kind_t { alloc, free, enter, leave } kind = alloc;
    block b{};
  };
  explicit model(unsigned seed) : rng(seed) {}
  std::mt19937_64 rng;
  std::vector<block> live;
  std::vector<std::string> scopes;
  std::vector<op> memory_ops;  // allocations and frees, in order
  std::uintptr_t next_address = 0x10000;

  op next() {
    op o;
    const unsigned roll = static_cast<unsigned>(rng() % 100);
    if (roll < 10 && scopes.size() < 3) {
      o.kind = op::enter;
      scopes.emplace_back(scope_names[rng() % 4]);
    } else if (roll < 20 && !scopes.empty()) {
      o.kind = op::leave;
      scopes.pop_back();
    } else if (roll < 60 || live.empty()) {
      o.kind = op::alloc;
      o.b = {next_address, static_cast<int>(rng() % 3), static_cast<int>(rng() % 3) - 1, 64 + (rng() % 4096) * 16};
      next_address += 0x100000;
      live.push_back(o.b);
      memory_ops.push_back(o);
    } else {
      o.kind = op::free;
      const std::size_t victim = rng() % live.size();
      o.b = live[victim];
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
      memory_ops.push_back(o);
    }
    return o;
  }

  // (device, bytes, count) of each site and device with live bytes, sorted.
  [[nodiscard]] std::vector<std::tuple<int, std::int64_t, std::int64_t>> by_site() const {
    std::map<std::pair<int, int>, std::pair<std::int64_t, std::int64_t>> sums;
    for (const block& b : live) {
      auto& s = sums[{b.site, b.device}];
      s.first += static_cast<std::int64_t>(b.bytes);
      ++s.second;
    }
    std::vector<std::tuple<int, std::int64_t, std::int64_t>> out;
    out.reserve(sums.size());
    for (const auto& [key, v] : sums) { out.emplace_back(key.second, v.first, v.second); }
    std::sort(out.begin(), out.end());
    return out;
  }
};

// Three sites: three functions, each its own frame above record_allocation.
__attribute__((noinline)) void allocate_a(const gpuguard::allocation_event& e) {
  gpuguard::record_allocation(e);
  asm volatile("" ::: "memory");
}
__attribute__((noinline)) void allocate_b(const gpuguard::allocation_event& e) {
  gpuguard::record_allocation(e);
  asm volatile("" ::: "memory");
}
__attribute__((noinline)) void allocate_c(const gpuguard::allocation_event& e) {
  gpuguard::record_allocation(e);
  asm volatile("" ::: "memory");
}

// The child: the region is handed down as `gpuguard run` hands it (the environment variable);
// after each operation it writes how many it has done. Never returns.
[[noreturn]] void run_child(int region_fd, int report_fd, unsigned seed, bool exit_at_end) {
  setenv(pm::environment_variable, std::to_string(region_fd).c_str(), 1);
  gpuguard::options opts;
  opts.stacks = gpuguard::stack_mode::all;
  gpuguard::configure_ledger(opts);
  model m(seed);
  std::vector<std::unique_ptr<gpuguard::op_scope>> open;
  for (std::uint32_t done = 1; done <= op_limit; ++done) {
    const model::op o = m.next();
    if (o.kind == model::op::enter) {
      open.push_back(std::make_unique<gpuguard::op_scope>(m.scopes.back()));
    } else if (o.kind == model::op::leave) {
      open.pop_back();
    } else if (o.kind == model::op::alloc) {
      gpuguard::allocation_event e;
      e.ptr = as_pointer(o.b.address);
      e.bytes = o.b.bytes;
      e.device = o.b.device;
      e.kind = o.b.device < 0 ? gpuguard::memory_kind::host : gpuguard::memory_kind::device;
      (o.b.site == 0 ? allocate_a : o.b.site == 1 ? allocate_b : allocate_c)(e);
    } else {
      static_cast<void>(gpuguard::record_free(as_pointer(o.b.address), o.b.bytes, gpuguard::unknown_device, nullptr));
    }
    if (::write(report_fd, &done, sizeof done) != static_cast<ssize_t>(sizeof done)) { ::_exit(3); }
    if (exit_at_end && done == 200) {
      open.clear();
      std::exit(0);  // the normal exit path: atexit, the library's end of run
    }
  }
  for (;;) { ::pause(); }
}

struct child_run {
  pid_t pid = -1;
  int wait_status = 0;
  std::uint32_t done = 0;  // operations the child said it completed
};

// Starts the child, lets it run until it has reported `kill_after` operations (0: until it exits),
// SIGKILLs it, and collects every report it sent.
child_run run_and_kill(int region_fd, unsigned seed, std::uint32_t kill_after, bool exit_at_end) {
  int p[2];
  EXPECT_EQ(::pipe(p), 0);
  child_run r;
  r.pid = ::fork();
  if (r.pid == 0) {
    ::close(p[0]);
    run_child(region_fd, p[1], seed, exit_at_end);
  }
  ::close(p[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::uint32_t got = 0;
  bool killed = false;
  for (;;) {
    if (!killed && kill_after != 0 && r.done >= kill_after) {
      ::kill(r.pid, SIGKILL);
      killed = true;
    }
    if (std::chrono::steady_clock::now() > deadline && !killed) {
      ::kill(r.pid, SIGKILL);
      killed = true;
      ADD_FAILURE() << "the child did not get to " << kill_after << " operations within 10 s";
    }
    pollfd pf{p[0], POLLIN, 0};
    if (::poll(&pf, 1, 100) <= 0) { continue; }
    const ssize_t n = ::read(p[0], &got, sizeof got);
    if (n <= 0) { break; }  // the child is gone and every report is read
    if (n == static_cast<ssize_t>(sizeof got)) { r.done = got; }
  }
  ::close(p[0]);
  ::waitpid(r.pid, &r.wait_status, 0);
  return r;
}

int new_region() {
  std::string error;
  const int fd = pm::create_region(&error);
  EXPECT_GE(fd, 0) << error;
  return fd;
}

std::vector<std::tuple<int, std::int64_t, std::int64_t>> region_by_site(const pm::read_part& part) {
  std::vector<std::tuple<int, std::int64_t, std::int64_t>> out;
  for (const pm::read_live& l : part.live) {
    if (l.bytes != 0 || l.count != 0) { out.emplace_back(l.device, l.bytes, l.count); }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> region_scopes(const pm::read_part& part) {
  std::vector<std::string> names;
  for (const pm::read_thread& t : part.threads) {
    for (const pm::read_scope& s : t.scopes) { names.push_back(s.name); }
  }
  return names;
}

// Forks a child that records into the region `fd` (handed down as `gpuguard run` hands it) with
// default options: it runs `record`, says so through a pipe and waits; the parent SIGKILLs it
// then (or after 20 s) and reaps it. Returns whether the child said it had recorded.
template <class Record>
bool record_in_child_then_kill(int fd, Record&& record) {
  int p[2];
  if (::pipe(p) != 0) { return false; }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    setenv(pm::environment_variable, std::to_string(fd).c_str(), 1);
    gpuguard::configure_ledger(gpuguard::options{});
    record();
    const char done = 1;
    if (::write(p[1], &done, 1) != 1) { ::_exit(3); }
    for (;;) { ::pause(); }
  }
  ::close(p[1]);
  pollfd pf{p[0], POLLIN, 0};
  char done = 0;
  const bool ready = ::poll(&pf, 1, 20000) == 1 && ::read(p[0], &done, 1) == 1;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(p[0]);
  return ready;
}

TEST(Postmortem, RegionIsSealedAndOfItsFormat) {
  const int fd = new_region();
  const int seals = ::fcntl(fd, F_GET_SEALS);
  EXPECT_NE(seals & F_SEAL_SHRINK, 0);
  EXPECT_NE(seals & F_SEAL_GROW, 0);
  EXPECT_NE(::ftruncate(fd, 4096), 0) << "a sealed region cannot be shrunk";
  const pm::region_reader reader(fd);
  ASSERT_TRUE(reader.valid()) << reader.error();
  EXPECT_TRUE(reader.parts().empty());
  ::close(fd);
  const int plain = static_cast<int>(::memfd_create("not-a-region", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(plain, 4096), 0);
  const pm::region_reader refused(plain);
  EXPECT_FALSE(refused.valid());
  EXPECT_NE(refused.error().find("bytes"), std::string::npos) << refused.error();
  ::close(plain);
}

// A region made by another gpuguard (another format version) is refused, the versions named.
TEST(Postmortem, RegionOfAnotherVersionIsRefused) {
  const int fd = new_region();
  void* base = ::mmap(nullptr, pm::parts_offset, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(base, MAP_FAILED);
  static_cast<pm::region_header*>(base)->version.store(pm::format_version - 1);
  const pm::region_reader refused(fd);
  EXPECT_FALSE(refused.valid());
  EXPECT_NE(refused.error().find("format " + std::to_string(pm::format_version - 1)), std::string::npos) << refused.error();
  EXPECT_NE(refused.error().find("reads format " + std::to_string(pm::format_version)), std::string::npos) << refused.error();
  static_cast<pm::region_header*>(base)->magic.store(0);
  const pm::region_reader not_one(fd);
  EXPECT_FALSE(not_one.valid());
  EXPECT_NE(not_one.error().find("not a gpuguard post-mortem region"), std::string::npos) << not_one.error();
  ::munmap(base, pm::parts_offset);
  ::close(fd);
}

// A site's Python lines, as the process left them in the part's text area, read back in order;
// a site whose lines found the area full says how many it lost; a malformed line is left out.
TEST(Postmortem, SitePythonLinesReadBack) {
  const int fd = new_region();
  void* base = ::mmap(nullptr, pm::region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(base, MAP_FAILED);
  auto* part = reinterpret_cast<pm::part*>(static_cast<char*>(base) + pm::parts_offset);
  part->header.pid.store(4243);
  std::string text;
  pm::append_python_frame(text, "/job/train.py", 42, "step");
  pm::append_python_frame(text, std::string(300, 'd') + "/main.py", 7, "with\ttab");
  text += "no tabs here\n";
  const std::size_t words = text.size() / 8 + 1;
  pm::store_text(part->python_text + 3, words, text.data(), text.size());
  pm::site_slot& with = part->sites[1];
  const std::uint64_t s = pm::begin_own_write(with.seq);
  with.site.store(9);
  with.python_frames.store(2);
  with.python_offset.store(3);
  with.python_bytes.store(text.size());
  with.depth.store(1);
  with.frames[0].store(0x401000);
  pm::end_write(with.seq, s);
  pm::site_slot& full = part->sites[2];
  full.site.store(10);
  full.python_frames.store(4);
  const pm::region_reader reader(fd);
  ASSERT_TRUE(reader.valid()) << reader.error();
  const std::vector<pm::read_part> parts = reader.parts();
  ASSERT_EQ(parts.size(), 1U);
  ASSERT_EQ(parts[0].sites.size(), 2U);
  const pm::read_site& got = parts[0].sites[0];
  EXPECT_EQ(got.site, 9U);
  ASSERT_EQ(got.python.size(), 2U);
  EXPECT_EQ(got.python[0].file, "/job/train.py");
  EXPECT_EQ(got.python[0].line, 42U);
  EXPECT_EQ(got.python[0].function, "step");
  EXPECT_EQ(got.python[1].file.size(), pm::python_file_bytes) << "the file name's tail is kept";
  EXPECT_EQ(got.python[1].file.substr(got.python[1].file.size() - 8), "/main.py");
  EXPECT_EQ(got.python[1].function, "with tab");
  EXPECT_EQ(got.python_lost, 0U);
  EXPECT_EQ(got.frames, std::vector<std::uint64_t>{0x401000});
  EXPECT_EQ(parts[0].sites[1].site, 10U);
  EXPECT_TRUE(parts[0].sites[1].python.empty());
  EXPECT_EQ(parts[0].sites[1].python_lost, 4U);
  ::munmap(base, pm::region_bytes);
  ::close(fd);
}

// Allocations are kept by (site, device, tag), and the part names its tags and their holders: a
// holder declared before the part was claimed, a tag interned after it, and untagged ones.
TEST(Postmortem, TagsAndExitHoldersNamed) {
  const int fd = new_region();
  const bool ready = record_in_child_then_kill(fd, [] {
    const gpuguard::tag_id cache = gpuguard::intern_tag("postmortem test cache");
    gpuguard::declare_exit_holder(cache);  // before any part is claimed
    const auto allocate = [](std::uintptr_t address, std::size_t bytes) {
      gpuguard::allocation_event e;
      e.ptr = as_pointer(address);
      e.bytes = bytes;
      e.device = 0;
      e.kind = gpuguard::memory_kind::device;
      gpuguard::record_allocation(e);
    };
    allocate(0x100000, 100);  // untagged: claims the part
    {
      const gpuguard::scoped_tag held("postmortem test cache");
      allocate(0x200000, 2000);
      allocate(0x300000, 3000);
    }
    {
      const gpuguard::scoped_tag late("interned after the claim");
      allocate(0x400000, 40);
    }
  });
  ASSERT_TRUE(ready) << "the child did not record within 20 s";
  const pm::region_reader reader(fd);
  ASSERT_TRUE(reader.valid()) << reader.error();
  const std::vector<pm::read_part> parts = reader.parts();
  ASSERT_EQ(parts.size(), 1U);
  std::map<std::string, std::pair<bool, std::uint16_t>> tags;  // name: holder, id
  for (const pm::read_tag& t : parts[0].tags) { tags[t.name] = {t.holder, t.tag}; }
  ASSERT_EQ(tags.count("postmortem test cache"), 1U);
  ASSERT_EQ(tags.count("interned after the claim"), 1U);
  EXPECT_TRUE(tags["postmortem test cache"].first);
  EXPECT_FALSE(tags["interned after the claim"].first);
  std::map<std::string, std::int64_t> bytes_by_tag;
  for (const pm::read_live& l : parts[0].live) {
    std::string name;
    for (const auto& [n, t] : tags) {
      if (t.second == l.tag) { name = n; }
    }
    EXPECT_TRUE(l.tag == 0 || !name.empty()) << "tag " << l.tag << " unnamed";
    bytes_by_tag[name] += l.bytes;
  }
  const std::map<std::string, std::int64_t> expected = {
      {"", 100}, {"postmortem test cache", 5000}, {"interned after the claim", 40}};
  EXPECT_EQ(bytes_by_tag, expected);
  ::close(fd);
}

// A slot whose writer died mid-update (its word odd) reads as its last committed copy, marked in
// flight; a ring slot in the same state is left out and counted.
TEST(Postmortem, OddSlotReadsAsLastCommittedCopy) {
  const int fd = new_region();
  void* base = ::mmap(nullptr, pm::region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(base, MAP_FAILED);
  auto* part = reinterpret_cast<pm::part*>(static_cast<char*>(base) + pm::parts_offset);
  part->header.pid.store(4242);
  pm::slice& sl = part->slices[1];
  sl.header.used.store(1);
  pm::live_slot& slot = sl.live[7];
  slot.key.store(pm::live_key(5, 1, 0));
  const std::uint64_t s = pm::begin_write(slot.seq);
  slot.bytes[1].store(1000);
  slot.count[1].store(2);
  pm::end_write(slot.seq, s);  // committed: copy 1 holds 1000 bytes in 2
  static_cast<void>(pm::begin_write(slot.seq));
  slot.bytes[0].store(999999);  // the writer died here
  pm::event_slot& e = sl.events[0];
  static_cast<void>(pm::begin_write(e.seq));
  e.index.store(1);
  const pm::region_reader reader(fd);
  ASSERT_TRUE(reader.valid()) << reader.error();
  const std::vector<pm::read_part> parts = reader.parts();
  ASSERT_EQ(parts.size(), 1U);
  ASSERT_EQ(parts[0].live.size(), 1U);
  EXPECT_EQ(parts[0].live[0].bytes, 1000);
  EXPECT_EQ(parts[0].live[0].count, 2);
  EXPECT_EQ(parts[0].live[0].site, 5U);
  EXPECT_EQ(parts[0].live[0].device, 0);
  EXPECT_TRUE(parts[0].live[0].in_flight);
  EXPECT_TRUE(parts[0].events.empty());
  EXPECT_EQ(parts[0].events_in_flight, 1U);
  ::munmap(base, pm::region_bytes);
  ::close(fd);
}

// 200 children, each SIGKILLed after a random number of operations: the region holds the state
// the child had committed, or that and the one operation it was in, never anything else.
TEST(Postmortem, SigkilledChildLeavesItsCommittedState) {
  const auto started = std::chrono::steady_clock::now();
  std::mt19937 kill_points(12345);
  int next_included = 0;
  int in_flight_slots = 0;
  for (unsigned trial = 0; trial < 200; ++trial) {
    const int fd = new_region();
    const auto kill_after = static_cast<std::uint32_t>(1 + kill_points() % 1500);
    const child_run r = run_and_kill(fd, trial, kill_after, false);
    ASSERT_TRUE(WIFSIGNALED(r.wait_status) && WTERMSIG(r.wait_status) == SIGKILL) << "trial " << trial;
    const pm::region_reader reader(fd);
    ASSERT_TRUE(reader.valid()) << reader.error();
    const std::vector<pm::read_part> parts = reader.parts();
    ASSERT_EQ(parts.size(), 1U) << "trial " << trial;
    const pm::read_part& part = parts[0];
    EXPECT_EQ(part.pid, r.pid);
    EXPECT_FALSE(part.closed);
    EXPECT_EQ(part.dropped_sites, 0U);
    EXPECT_FALSE(part.modules.empty());
    // The committed state, and the one after the next operation.
    model m(trial);
    for (std::uint32_t i = 0; i < r.done; ++i) { static_cast<void>(m.next()); }
    const auto sites_k = m.by_site();
    const auto scopes_k = m.scopes;
    const std::size_t memory_k = m.memory_ops.size();
    static_cast<void>(m.next());
    const auto sites_next = m.by_site();
    const auto scopes_next = m.scopes;
    const auto got = region_by_site(part);
    const bool is_k = got == sites_k;
    EXPECT_TRUE(is_k || got == sites_next) << "trial " << trial << ": live bytes by site and device are neither the "
                                           << r.done << " committed operations' nor those and the next";
    if (!is_k) { ++next_included; }
    for (const pm::read_live& l : part.live) {
      if (l.in_flight) { ++in_flight_slots; }
    }
    const auto scopes = region_scopes(part);
    EXPECT_TRUE(scopes == scopes_k || scopes == scopes_next) << "trial " << trial << ": open scopes";
    // The ring: the last events, in order, are the last allocations and frees.
    ASSERT_FALSE(part.events.empty()) << "trial " << trial;
    const std::size_t last = static_cast<std::size_t>(part.events.back().index);
    EXPECT_TRUE(last == memory_k || last == memory_k + 1) << "trial " << trial;
    for (std::size_t i = 0; i < part.events.size(); ++i) {
      const pm::read_event& e = part.events[i];
      ASSERT_LE(e.index, m.memory_ops.size());
      const model::op& o = m.memory_ops[e.index - 1];
      EXPECT_EQ(e.address, o.b.address);
      EXPECT_EQ(e.bytes, o.b.bytes);
      EXPECT_EQ(e.alloc, o.kind == model::op::alloc);
      EXPECT_EQ(e.device, o.b.device);
      if (i > 0) { EXPECT_EQ(e.index, part.events[i - 1].index + 1); }
    }
    EXPECT_LE(part.events_in_flight, 1U);
    ::close(fd);
    if (HasFailure()) { break; }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("200 SIGKILLed children in %.1f s; %d died with the next operation (part of it) in the region, "
              "%d slots in flight\n", seconds, next_included, in_flight_slots);
  EXPECT_LT(seconds, 60.0);
}

// Threads record into slices of their own, and a free by another thread than the allocating one
// is a negative delta in the freeing thread's slice: a child runs more threads at once than there
// are owned slices (the rest share slice 0), each frees half of another thread's blocks, and is
// SIGKILLed once all is committed. The region's sums are the child's live figures exactly.
TEST(Postmortem, ThreadSlicesSumToTheProcessFigures) {
  constexpr int threads = static_cast<int>(pm::slice_count) + 4;
  constexpr int per_thread = 40;
  const auto address = [](int t, int i) { return static_cast<std::uintptr_t>(t * per_thread + i + 1) << 20; };
  const auto bytes_of = [](int i) { return std::size_t{64} * static_cast<std::size_t>(i + 1); };
  const auto device_of = [](int i) { return i % 2 == 0 ? -1 : 0; };
  const int fd = new_region();
  const bool ready = record_in_child_then_kill(fd, [&] {
    const auto in_threads = [&](auto&& work) {
      std::atomic<int> arrived{0};
      std::atomic<int> finished{0};
      std::vector<std::thread> running;
      running.reserve(threads);
      for (int t = 0; t < threads; ++t) {
        running.emplace_back([&, t] {
          arrived.fetch_add(1);
          while (arrived.load() < threads) { std::this_thread::yield(); }  // all alive at once
          work(t);
          // Each keeps its slice until every thread has recorded: none hands one on to another.
          finished.fetch_add(1);
          while (finished.load() < threads) { std::this_thread::yield(); }
        });
      }
      for (std::thread& r : running) { r.join(); }
    };
    in_threads([&](int t) {
      for (int i = 0; i < per_thread; ++i) {
        gpuguard::allocation_event e;
        e.ptr = as_pointer(address(t, i));
        e.bytes = bytes_of(i);
        e.device = device_of(i);
        e.kind = e.device < 0 ? gpuguard::memory_kind::host : gpuguard::memory_kind::device;
        gpuguard::record_allocation(e);
      }
    });
    in_threads([&](int t) {  // the first half of the next thread's blocks
      for (int i = 0; i < per_thread / 2; ++i) {
        static_cast<void>(gpuguard::record_free(as_pointer(address((t + 1) % threads, i)), bytes_of(i),
                                                gpuguard::unknown_device, nullptr));
      }
    });
  });
  ASSERT_TRUE(ready) << "the child did not finish its threads within 20 s";
  std::map<int, std::pair<std::int64_t, std::int64_t>> expected;  // device: bytes, count
  for (int i = per_thread / 2; i < per_thread; ++i) {
    expected[device_of(i)].first += static_cast<std::int64_t>(bytes_of(i)) * threads;
    expected[device_of(i)].second += threads;
  }
  const pm::region_reader reader(fd);
  ASSERT_TRUE(reader.valid()) << reader.error();
  const std::vector<pm::read_part> parts = reader.parts();
  ASSERT_EQ(parts.size(), 1U);
  const pm::read_part& part = parts[0];
  std::map<int, std::pair<std::int64_t, std::int64_t>> got;
  for (const pm::read_live& l : part.live) {
    EXPECT_FALSE(l.in_flight);
    got[l.device].first += l.bytes;
    got[l.device].second += l.count;
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(part.dropped_sites, 0U);
  EXPECT_EQ(part.events_total, static_cast<std::uint64_t>(threads * per_thread * 3 / 2));
  EXPECT_EQ(part.events_in_flight, 0U);
  // Every slice was written (more threads than owned slices), and each owned slice's events keep
  // their thread's order in the merged ring.
  std::map<std::uint32_t, std::uint64_t> last_index;
  for (const pm::read_event& e : part.events) {
    if (e.slice != pm::shared_slice) {
      EXPECT_GT(e.index, last_index[e.slice]) << "slice " << e.slice;
    }
    last_index[e.slice] = e.index;
  }
  void* raw = ::mmap(nullptr, pm::region_bytes, PROT_READ, MAP_SHARED, fd, 0);
  const auto* raw_part = reinterpret_cast<const pm::part*>(static_cast<const char*>(raw) + pm::parts_offset);
  std::string used;
  for (const pm::slice& sl : raw_part->slices) { used += std::to_string(sl.header.used.load()) + ":" + std::to_string(sl.header.event_head.load()) + " "; }
  ::munmap(raw, pm::region_bytes);
  EXPECT_EQ(last_index.size(), pm::slice_count) << used << "first slice " << last_index.begin()->first << ", " << part.events.size() << " events";
  ::close(fd);
}

// A child that exits normally closes its part: the supervisor writes no post-mortem for it.
TEST(Postmortem, NormalExitClosesThePart) {
  const int fd = new_region();
  const child_run r = run_and_kill(fd, 7, 0, true);
  ASSERT_TRUE(WIFEXITED(r.wait_status)) << r.wait_status;
  EXPECT_EQ(WEXITSTATUS(r.wait_status), 0);
  const pm::region_reader reader(fd);
  const std::vector<pm::read_part> parts = reader.parts();
  ASSERT_EQ(parts.size(), 1U);
  EXPECT_TRUE(parts[0].closed);
  ::close(fd);
}

}  // namespace
