// The cleanup registry. Ordinary cleanups live in a vector under a mutex; they are taken out under
// the lock and run outside it, so a cleanup may register or unregister others, and each runs at
// most once even when two exit paths race (a signal's watcher thread and exit() on another thread).
// Signal-safe cleanups live in a fixed table of atomics that the crash handler can walk without a
// lock or an allocation; each slot is claimed by whoever runs it first.
#include <gpuguard/core/cleanup.hpp>

#include "exit/exit_paths.hpp"
#include "util/kept_for_process.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdio>
#include <exception>
#include <mutex>
#include <new>
#include <stdexcept>
#include <vector>

#include <pthread.h>

namespace gpuguard {

namespace {

struct entry {
  std::uint64_t id = 0;
  std::string name;
  std::function<void()> fn;
  int priority = 0;
};

struct registry {
  std::mutex mutex;
  std::vector<entry> entries;  // in registration order
  std::uint64_t next_id = 1;
};

registry& cleanups() {
  static auto* r = new registry();  // exit paths use it after ordinary statics are gone
  return *r;
}

void forget_parent_cleanups_in_forked_child() noexcept;

// Registers (once) what a child made by fork() does with the parent's cleanups.
void watch_forks() noexcept {
  static const bool registered =
      ::pthread_atfork(nullptr, nullptr, forget_parent_cleanups_in_forked_child) == 0;
  static_cast<void>(registered);
}

// ---- signal-safe slots --------------------------------------------------------------------------

constexpr std::size_t safe_slots = 64;
constexpr std::uint64_t safe_id_bit = std::uint64_t{1} << 63;  // marks handle ids of slots

enum slot_state : int { slot_free = 0, slot_writing = 1, slot_pending = 2, slot_taken = 3 };

struct safe_slot {
  std::atomic<int> state{slot_free};
  std::atomic<std::uint64_t> sequence{0};  // registration order, for ties
  signal_safe_cleanup fn = nullptr;
  void* context = nullptr;
  int priority = 0;
  const char* name = "";
};

// The name of the cleanup run_cleanups is running, for the exit watchdog: a copy, so the watchdog
// never reads a name that is being freed.
struct running_name {
  std::mutex mutex;
  std::array<char, 128> text{};
};

running_name& running() {
  static auto* r = new running_name();  // exit paths use it after ordinary statics are gone
  return *r;
}

void set_running(const char* name) noexcept {
  running_name& r = running();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::size_t n = 0;
  for (; name != nullptr && name[n] != '\0' && n + 1 < r.text.size(); ++n) { r.text[n] = name[n]; }
  r.text[n] = '\0';
}

std::array<safe_slot, safe_slots> safe_table;
std::atomic<std::uint64_t> safe_sequence{1};

// The pending slot that should run next (highest priority, latest registered), or nullptr.
safe_slot* next_safe() noexcept {
  safe_slot* best = nullptr;
  for (safe_slot& slot : safe_table) {
    if (slot.state.load(std::memory_order_acquire) != slot_pending) { continue; }
    if (best == nullptr || slot.priority > best->priority ||
        (slot.priority == best->priority &&
         slot.sequence.load(std::memory_order_relaxed) > best->sequence.load(std::memory_order_relaxed))) {
      best = &slot;
    }
  }
  return best;
}

// Claims and runs one slot; false if another path claimed it first.
bool run_safe(safe_slot& slot) noexcept {
  int expected = slot_pending;
  if (!slot.state.compare_exchange_strong(expected, slot_taken, std::memory_order_acq_rel)) { return false; }
  slot.fn(slot.context);
  slot.state.store(slot_free, std::memory_order_release);
  return true;
}

bool take_ordinary(entry& out, int at_least) {
  registry& r = cleanups();
  const std::lock_guard<std::mutex> lock(r.mutex);
  if (r.entries.empty()) { return false; }
  // Highest priority first; among equals, the latest registered first.
  auto best = r.entries.begin();
  for (auto it = r.entries.begin(); it != r.entries.end(); ++it) {
    if (it->priority >= best->priority) { best = it; }
  }
  if (best->priority < at_least) { return false; }
  out = std::move(*best);
  r.entries.erase(best);
  return true;
}

// In a child made by fork() the parent's cleanups are the parent's: they free its memory, end
// its servers, write its checkpoints. The child starts with none (it may register its own). The
// entries are dropped without being destroyed (what they captured is the parent's too, and its
// destructors could act on it), and the lock is made anew: another thread may have held it at the
// fork.
void forget_parent_cleanups_in_forked_child() noexcept {
  registry& r = cleanups();
  new (&r.mutex) std::mutex();  // NOLINT(cppcoreguidelines-owning-memory): see above
  detail::kept_for_process(r.entries.data());  // the parent's entries: never destroyed here
  new (&r.entries) std::vector<entry>();  // NOLINT(cppcoreguidelines-owning-memory): the old buffer is left alone
  for (safe_slot& slot : safe_table) { slot.state.store(slot_free, std::memory_order_relaxed); }
  new (&running().mutex) std::mutex();  // NOLINT(cppcoreguidelines-owning-memory): see above
  running().text[0] = '\0';
}

}  // namespace

void cleanup_handle::reset() noexcept {
  if (id_ == 0) { return; }
  if ((id_ & safe_id_bit) != 0) {
    safe_slot& slot = safe_table[static_cast<std::size_t>(id_ & 0xFF)];
    int expected = slot_pending;
    if (slot.sequence.load(std::memory_order_relaxed) == ((id_ & ~safe_id_bit) >> 8)) {
      static_cast<void>(slot.state.compare_exchange_strong(expected, slot_free, std::memory_order_acq_rel));
    }
    id_ = 0;
    return;
  }
  registry& r = cleanups();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = std::find_if(r.entries.begin(), r.entries.end(), [&](const entry& e) { return e.id == id_; });
  if (it != r.entries.end()) { r.entries.erase(it); }
  id_ = 0;
}

bool cleanup_handle::pending() const noexcept {
  if (id_ == 0) { return false; }
  if ((id_ & safe_id_bit) != 0) {
    const safe_slot& slot = safe_table[static_cast<std::size_t>(id_ & 0xFF)];
    return slot.state.load(std::memory_order_acquire) == slot_pending &&
           slot.sequence.load(std::memory_order_relaxed) == ((id_ & ~safe_id_bit) >> 8);
  }
  registry& r = cleanups();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return std::any_of(r.entries.begin(), r.entries.end(), [&](const entry& e) { return e.id == id_; });
}

cleanup_handle register_cleanup(std::string name, std::function<void()> fn, int priority) {
  watch_forks();
  registry& r = cleanups();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const std::uint64_t id = r.next_id++;
  r.entries.push_back(entry{id, std::move(name), std::move(fn), priority});
  return cleanup_handle(id);
}

cleanup_handle register_signal_safe_cleanup(const char* name, signal_safe_cleanup fn, void* context, int priority) {
  watch_forks();
  for (std::size_t i = 0; i < safe_table.size(); ++i) {
    safe_slot& slot = safe_table[i];
    int expected = slot_free;
    if (!slot.state.compare_exchange_strong(expected, slot_writing, std::memory_order_acq_rel)) { continue; }
    const std::uint64_t sequence = safe_sequence.fetch_add(1, std::memory_order_relaxed);
    slot.fn = fn;
    slot.context = context;
    slot.priority = priority;
    slot.name = name != nullptr ? name : "";
    slot.sequence.store(sequence, std::memory_order_relaxed);
    slot.state.store(fn != nullptr ? slot_pending : slot_free, std::memory_order_release);
    return cleanup_handle(fn != nullptr ? (safe_id_bit | (sequence << 8) | i) : 0);
  }
  throw std::length_error("gpuguard::register_signal_safe_cleanup: all 64 slots are taken");
}

std::size_t run_cleanups(const char* reason) noexcept {
  std::size_t ran = 0;
  for (;;) {
    // Whichever kind has the higher priority next goes first.
    safe_slot* safe = next_safe();
    entry next;
    const int floor = safe != nullptr ? safe->priority : INT_MIN;
    if (!take_ordinary(next, floor)) {
      if (safe == nullptr) { break; }
      set_running(safe->name);
      ran += run_safe(*safe) ? 1 : 0;
      set_running("");
      continue;
    }
    ++ran;
    set_running(next.name.c_str());
    try {
      if (next.fn) { next.fn(); }
    } catch (const std::exception& error) {
      std::fprintf(stderr, "[gpuguard] cleanup '%s' (%s) threw %s; the other cleanups still run\n",
                   next.name.c_str(), reason, error.what());
    } catch (...) {
      std::fprintf(stderr, "[gpuguard] cleanup '%s' (%s) threw a non-standard exception; the other "
                   "cleanups still run\n", next.name.c_str(), reason);
    }
  }
  set_running("");
  return ran;
}

void detail::running_cleanup_name(char* out, std::size_t size) noexcept {
  if (size == 0) { return; }
  running_name& r = running();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::size_t n = 0;
  for (; r.text[n] != '\0' && n + 1 < size; ++n) { out[n] = r.text[n]; }
  out[n] = '\0';
}

void detail::run_signal_safe_cleanups() noexcept {
  while (safe_slot* slot = next_safe()) { static_cast<void>(run_safe(*slot)); }
}

std::size_t pending_cleanups() noexcept {
  std::size_t count = 0;
  for (const safe_slot& slot : safe_table) {
    count += slot.state.load(std::memory_order_acquire) == slot_pending ? 1 : 0;
  }
  registry& r = cleanups();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return count + r.entries.size();
}

}  // namespace gpuguard
