// scope_exit and scope_fail: when cleanups run, and in which order.
#include <gpuguard/scope_exit.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace {

TEST(scope_exit, runs_in_reverse_order_of_declaration) {
  std::string order;
  {
    auto first = gpuguard::scope_exit([&] { order += "1"; });
    auto second = gpuguard::scope_exit([&] { order += "2"; });
    auto third = gpuguard::scope_exit([&] { order += "3"; });
    EXPECT_EQ(order, "");
  }
  EXPECT_EQ(order, "321");
}

TEST(scope_exit, runs_when_the_scope_ends_by_exception) {
  int runs = 0;
  try {
    auto cleanup = gpuguard::scope_exit([&] { ++runs; });
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(runs, 1);
}

TEST(scope_exit, release_disarms) {
  int runs = 0;
  {
    auto cleanup = gpuguard::scope_exit([&] { ++runs; });
    cleanup.release();
  }
  EXPECT_EQ(runs, 0);
}

TEST(scope_exit, moved_guard_runs_once) {
  int runs = 0;
  {
    auto outer = gpuguard::scope_exit([&] { ++runs; });
    {
      auto inner = std::move(outer);
    }
    EXPECT_EQ(runs, 1);
  }
  EXPECT_EQ(runs, 1);
}

TEST(scope_fail, skipped_on_normal_exit) {
  int runs = 0;
  { auto rollback = gpuguard::scope_fail([&] { ++runs; }); }
  EXPECT_EQ(runs, 0);
}

TEST(scope_fail, runs_on_exception) {
  int runs = 0;
  try {
    auto rollback = gpuguard::scope_fail([&] { ++runs; });
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(runs, 1);
}

struct fails_in_destructor_scope {
  int* runs;
  ~fails_in_destructor_scope() {
    // A scope_fail made while an exception is already in flight runs only for a *new* failure.
    auto rollback = gpuguard::scope_fail([this] { ++*runs; });
  }
};

TEST(scope_fail, counts_only_exceptions_raised_after_it_was_made) {
  int runs = 0;
  try {
    const fails_in_destructor_scope during_unwind{&runs};
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(runs, 0);
}

}  // namespace
