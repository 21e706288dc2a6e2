// Recording later, off the program's path: while one thread alone allocates, each wrapped call is
// written to a ring (a few stores) and a drainer thread records it into the ledger. A stream-ordered
// allocation and free cost the program well under a microsecond; recording both at once (hashing,
// a shard lock, the counters) would add a tenth to that (docs/run.md, "What --track costs").
//
// The ledger must see every address's calls in the order they happened. One thread's calls are
// in its ring in order; between threads, the ring has no order to offer, so the first call from a
// second thread ends deferring for good: that thread records everything the ring holds, then its
// own call, and from then on every call is recorded at once, after whatever the ring still held.
// That keeps causal order: a call another thread's call depends on (an allocation whose address
// it frees, a free whose address the driver hands it again) was in the ring before the wrapper it
// depends on returned, so it is recorded first. Deferring also stops once any thread sets a tag
// or opens an operation scope (their figures are read as the calls happen), and never starts with
// stacks on (a stack is the calling thread's), in a process that runs Python with python_frames on
// (so are its Python frames), with the timeline on (the JSONL log or the Chrome
// trace time each event) or with GPUGUARD_TRACK_DEFER=0.
//
// Every reading of the ledger (the leak report, the exit record, the outputs' samples, the exit
// paths) first records what the ring holds (set_ledger_catch_up). A crash record, written inside
// the signal handler, cannot: it may miss the calls not recorded yet (the last millisecond's, or
// up to 50 ms of them after a pause).
#include "preload.hpp"
#include "ring.hpp"

#include "util/quiet_thread.hpp"

#include <gpuguard/core/ledger.hpp>

#include "ledger/deferred_source.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <pthread.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace gpuguard::preload {

hot_state hot;  // preload.hpp: here, with the ring whose tail it holds
ring_state ring;
__thread bool owns_ring __attribute__((tls_model("initial-exec"))) = false;

namespace {

std::atomic<int>& mode = hot.defer_mode;
std::atomic<std::uint64_t>& tail_of_ring = hot.ring_tail;
__attribute__((tls_model("initial-exec"))) thread_local bool draining = false;
// refresh_common's lock: a spin lock, cleared in a forked child (whose other threads are gone).
std::atomic<bool> common_lock{false};

// The drainer's state: never destroyed (it may be waiting while the process exits).
struct drainer_state {
  std::mutex drain;  // its holder is the ring's consumer
  std::condition_variable wake;
};
drainer_state& drainer() {
  static auto* d = new drainer_state();
  return *d;
}

void record_slot(const ring_slot& s, std::uint32_t owner) noexcept {
  if (s.is_free) {
    static_cast<void>(record_interposed_free_as(s.ptr, s.device, owner));
  } else {
    record_allocation_as({s.ptr, s.bytes, s.device, s.stream, static_cast<memory_kind>(s.kind)}, s.tag, owner);
  }
}

// With `drain` held: records everything the ring holds. Returns whether there was anything.
bool drain_locked() noexcept {
  std::uint64_t head = ring.head.load(std::memory_order_relaxed);
  const std::uint64_t tail = tail_of_ring.load(std::memory_order_acquire);
  if (head == tail) { return false; }
  const std::uint32_t owner = ring.owner;
  draining = true;
  for (; head != tail; ++head) {
    record_slot(ring.slots[head % ring_slots], owner);
    ring.head.store(head + 1, std::memory_order_release);
  }
  draining = false;
  return true;
}

// Everything the ring holds, into the ledger, on the calling thread. The ledger's catch-up: also
// called when the process's first tag or operation scope begins, which ends deferring (the owner's
// calls then read only the mode).
void catch_up() noexcept {
  if (draining) { return; }  // a reading made while recording a slot
  if (detail::thread_context_used().load(std::memory_order_seq_cst) && mode.load(std::memory_order_seq_cst) == owned) {
    mode.store(ended, std::memory_order_seq_cst);
    refresh_common();
  }
  if (ring.head.load(std::memory_order_acquire) == tail_of_ring.load(std::memory_order_acquire)) { return; }
  const std::lock_guard<std::mutex> lock(drainer().drain);
  drain_locked();
}

#if defined(GPUGUARD_DEFER_TESTING)
std::atomic<bool> drainer_held{false};  // tests: the drainer leaves the ring to the readers
#endif

void drainer_main() {
  drainer_state& d = drainer();
  std::unique_lock<std::mutex> lock(d.drain);
  for (;;) {
#if defined(GPUGUARD_DEFER_TESTING)
    const bool busy = !drainer_held.load() && drain_locked();
#else
    const bool busy = drain_locked();
#endif
    // Deferring has ended: every later call records the ring's rest before its own.
    if (!busy && mode.load(std::memory_order_relaxed) == ended) { return; }
    d.wake.wait_for(lock, busy ? std::chrono::milliseconds(1) : std::chrono::milliseconds(50));
  }
}

void end_deferring() noexcept {
  if (mode.load(std::memory_order_relaxed) != ended) {
    mode.store(ended, std::memory_order_relaxed);
    refresh_common();
  }
  catch_up();
}

bool claim_ring() noexcept {
  int expected = open;
  if (!mode.compare_exchange_strong(expected, owned, std::memory_order_seq_cst)) { return false; }
  // A tag or scope that began before the claim, whose catch-up saw no owner yet.
  if (detail::thread_context_used().load(std::memory_order_seq_cst)) {
    mode.store(ended, std::memory_order_seq_cst);
    refresh_common();
    return false;
  }
  ring.owner = ledger_thread_id();
  try {
    std::thread* started = detail::start_quiet_thread(drainer_main);
    started->detach();  // it ends when deferring does, or with the process
    delete started;
  } catch (...) {  // no thread: record at once
    mode.store(ended, std::memory_order_relaxed);
    refresh_common();
    return false;
  }
  owns_ring = true;
  refresh_common();
  return true;
}

// PREFETCHW is older than any GPU host's CPU, but not in every x86-64: asked once (CPUID).
bool write_prefetch_known() noexcept {
#if defined(__x86_64__)
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(0x80000001U, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1U << 8U)) != 0;
#else
  return true;
#endif
}

// fork(): no thread of the parent's but the caller exists in the child. The ring is recorded
// before the fork, so that the child's ledger knows the parent's blocks it inherits (and frees
// quietly); the child records at once.
void before_fork() noexcept {
  drainer_state& d = drainer();
  d.drain.lock();
  drain_locked();
}
void after_fork_parent() noexcept {
  drainer_state& d = drainer();
  d.drain.unlock();
}
void after_fork_child() noexcept {
  drainer_state& d = drainer();
  ring.head.store(tail_of_ring.load(std::memory_order_relaxed), std::memory_order_relaxed);
  d.drain.unlock();
  if (mode.load(std::memory_order_relaxed) != off) { mode.store(ended, std::memory_order_relaxed); }
  owns_ring = false;
  common_lock.store(false, std::memory_order_relaxed);  // a parent's thread may have held it
  hot.common.store(false, std::memory_order_relaxed);
}

}  // namespace

void start_deferring(const options& opts) noexcept {
  const char* env = std::getenv("GPUGUARD_TRACK_DEFER");
  // A stack is the calling thread's, and so are its Python frames (python_frames; the ledger is
  // configured by now); the timeline (JSONL log, Chrome trace) times each event.
  if (opts.stacks != stack_mode::off || python_frames_expected() || !opts.jsonl_log.empty() ||
      !opts.trace_file.empty() || (env != nullptr && std::strcmp(env, "0") == 0)) {
    return;
  }
  static std::once_flag once;
  std::call_once(once, [] {
    // The ledger's state, and so its fork handlers, first: ours must run before its handlers (a
    // drainer inside the ledger holds our lock and waits for the ledger's).
    static_cast<void>(untracked_frees());
    set_ledger_catch_up(catch_up);
    hot.write_prefetch.store(write_prefetch_known(), std::memory_order_relaxed);
    static_cast<void>(::pthread_atfork(before_fork, after_fork_parent, after_fork_child));
    int expected = off;
    mode.compare_exchange_strong(expected, open, std::memory_order_acq_rel);
  });
}

bool defer(const call_record& call) noexcept {
  if (owner_deferring() || (!owns_ring && mode.load(std::memory_order_relaxed) == open && claim_ring())) {
    push(call);
    return true;
  }
  if (mode.load(std::memory_order_relaxed) != off) { end_deferring(); }
  return false;
}

void ring_full() noexcept { catch_up(); }

void wake_drainer() noexcept { drainer().wake.notify_one(); }

// Under a lock, so that the last of two refreshes at once, each after its own change, sees both
// changes: without it, one that read before the other's change could store its answer last.
void refresh_common() noexcept {
  while (common_lock.exchange(true, std::memory_order_acquire)) {
    while (common_lock.load(std::memory_order_relaxed)) {}
  }
  const bool common = mode.load(std::memory_order_relaxed) == owned &&
                      hot.one_device.load(std::memory_order_relaxed) == 1 &&
                      (hot.async_devices.load(std::memory_order_relaxed) & 1U) != 0 &&
                      !hot.torch_loaded.load(std::memory_order_relaxed) &&
                      !hot.recheck_frameworks.load(std::memory_order_relaxed);
  hot.common.store(common, std::memory_order_relaxed);
  common_lock.store(false, std::memory_order_release);
}

#if defined(GPUGUARD_DEFER_TESTING)
void hold_drainer(bool hold) noexcept { drainer_held.store(hold); }
#endif

const char* recording_mode() noexcept {
  return mode.load(std::memory_order_relaxed) == owned ? "deferred" : "at_once";
}

}  // namespace gpuguard::preload
