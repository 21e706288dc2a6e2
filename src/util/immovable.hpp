// A base for an object that stays where it was made: an owner that others find by its address or
// through a thread_local, which neither a copy nor a move may duplicate. Internal to gpuguard.
#pragma once

namespace gpuguard::detail {

struct immovable {
  immovable() = default;
  immovable(const immovable&) = delete;
  immovable& operator=(const immovable&) = delete;
  immovable(immovable&&) = delete;
  immovable& operator=(immovable&&) = delete;
  ~immovable() = default;
};

}  // namespace gpuguard::detail
