// A bounded multi-producer, single-consumer queue of fixed-size events: producers claim a cell with
// one compare-and-swap and never wait (a full queue refuses, and the caller counts the drop); the
// one consumer (the writer thread) takes cells in order. Each cell carries a sequence number that
// says whose turn it is, in the manner of Dmitry Vyukov's bounded queue. Internal to libgpuguard.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

namespace gpuguard::detail {

template <class T>
class event_queue {
  static constexpr std::size_t cache_line = 64;

 public:
  /// `capacity` is rounded up to a power of two (at least 2).
  explicit event_queue(std::size_t capacity) {
    std::size_t size = 2;
    while (size < capacity) { size *= 2; }
    mask_ = size - 1;
    cells_ = std::make_unique<cell[]>(size);
    for (std::size_t i = 0; i < size; ++i) { cells_[i].sequence.store(i, std::memory_order_relaxed); }
  }

  [[nodiscard]] std::size_t capacity() const noexcept { return mask_ + 1; }

  /// Bytes of memory each place in the queue takes.
  static constexpr std::size_t cell_bytes() noexcept { return sizeof(cell); }

  /// Copies `value` in. Returns false, changing nothing, when the queue is full. On success,
  /// `position` is the value's place in the order of all pushes (0, 1, ...).
  bool try_push(const T& value, std::size_t& position) noexcept {
    return try_push_with([&](T& slot) { slot = value; }, position);
  }

  /// As try_push, but `fill(T&)` writes the value straight into its cell (no copy through the
  /// stack). `fill` must not throw.
  template <class Fill>
  bool try_push_with(Fill&& fill, std::size_t& position) noexcept {
    std::size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      cell& c = cells_[pos & mask_];
      const std::size_t sequence = c.sequence.load(std::memory_order_acquire);
      const auto difference = static_cast<std::ptrdiff_t>(sequence) - static_cast<std::ptrdiff_t>(pos);
      if (difference == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          prefetch_for_write(cells_[(pos + prefetch_distance) & mask_]);
          fill(c.value);
          c.sequence.store(pos + 1, std::memory_order_release);
          position = pos;
          return true;
        }
      } else if (difference < 0) {
        return false;  // the consumer has not freed this cell yet: full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  /// Single consumer: takes the next value if it has been published.
  bool try_pop(T& out) noexcept {
    cell& c = cells_[head_ & mask_];
    const std::size_t sequence = c.sequence.load(std::memory_order_acquire);
    if (sequence != head_ + 1) { return false; }  // empty, or claimed but not yet written
    out = c.value;
    c.sequence.store(head_ + mask_ + 1, std::memory_order_release);
    ++head_;
    consumed_.store(head_, std::memory_order_release);
    return true;
  }

  /// Pushes claimed so far (some may still be being written).
  [[nodiscard]] std::size_t claimed() const noexcept { return tail_.load(std::memory_order_acquire); }
  /// Values the consumer has taken so far.
  [[nodiscard]] std::size_t consumed() const noexcept { return consumed_.load(std::memory_order_acquire); }

 private:
  // Each cell starts a cache line: a producer writing one cell shares no line with the consumer
  // reading the one before it.
  struct alignas(cache_line) cell {
    std::atomic<std::size_t> sequence{0};
    T value{};
  };
  // A push also asks for the lines of the cell two places on, for writing. The consumer read them
  // last, so taking each back is a trip to the consumer's core, and the next push's
  // compare-and-swap, a locked instruction, waits until the stores before it have their lines.
  // Asked for early, the trips overlap the producer's own work.
  static constexpr std::size_t prefetch_distance = 2;
  static void prefetch_for_write(const cell& c) noexcept {
    const char* begin = reinterpret_cast<const char*>(&c);
    for (std::size_t offset = 0; offset < sizeof(cell); offset += cache_line) {
      __builtin_prefetch(begin + offset, 1, 3);
    }
  }
  std::unique_ptr<cell[]> cells_;
  std::size_t mask_ = 0;
  alignas(64) std::atomic<std::size_t> tail_{0};
  alignas(64) std::size_t head_ = 0;  // the consumer's alone
  std::atomic<std::size_t> consumed_{0};
};

}  // namespace gpuguard::detail
