// Operation scopes over host memory: deltas, peaks, nesting, exceptions, threads, and the hysteresis
// of alerts. ctest runs each test in its own process, so the outputs each test starts are its own.
#include <gpuguard/device_buffer.hpp>
#include <gpuguard/host_memory_resource.hpp>
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/outputs.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include "outputs/alert_gate.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using gpuguard::device_buffer;
using gpuguard::op_result;
using gpuguard::op_scope;

class op_scopes : public testing::Test {
 protected:
  void SetUp() override {
    gpuguard::options quiet;
    quiet.text_log = "off";
    gpuguard::start_outputs(quiet);
  }
  void TearDown() override { gpuguard::stop_outputs("test"); }

  device_buffer make(std::size_t bytes) { return device_buffer(bytes, {}, tracked_); }

  gpuguard::host_memory_resource host_;
  gpuguard::tracking_resource tracked_{host_, 30};
};

TEST_F(op_scopes, records_allocated_freed_net_and_peak) {
  std::optional<device_buffer> before_scope = make(100);
  op_result result;
  {
    op_scope scope("step");
    const device_buffer kept = make(1000);
    { const device_buffer temporary = make(4000); }
    before_scope.reset();  // freed inside, allocated outside
    result = scope.end();
  }
  EXPECT_STREQ(result.name, "step");
  EXPECT_EQ(result.alloc_bytes, 5000U);
  EXPECT_EQ(result.free_bytes, 4100U);
  EXPECT_EQ(result.net_bytes, 900);
  EXPECT_EQ(result.peak_bytes, 5000U);
  EXPECT_EQ(result.allocs, 2U);
  EXPECT_EQ(result.frees, 2U);
  EXPECT_FALSE(result.exception);
  EXPECT_EQ(result.depth, 0U);
  EXPECT_GE(result.duration_ns, 0);
}

// A framework's own figures (the LibTorch adapter's probe), faked: the scope records their deltas
// and the JSONL log carries them.
std::uint64_t fake_allocated = 0;
bool fake_answers = true;
bool fake_probe(int /*device*/, gpuguard::framework_memory& out) noexcept {
  out.allocated = fake_allocated;
  out.reserved = fake_allocated * 2;
  return fake_answers;
}

TEST(op_scope_probe, scopes_record_a_framework_probes_deltas_and_the_log_carries_them) {
  const std::string log = testing::TempDir() + "gpuguard_probe_test.jsonl";
  gpuguard::options opts;
  opts.text_log = "off";
  opts.jsonl_log = log;
  gpuguard::start_outputs(opts);
  gpuguard::set_framework_probe(fake_probe, "fake");
  fake_allocated = 1000;
  op_result answered;
  {
    op_scope scope("probed");
    fake_allocated = 1500;
    answered = scope.end();
  }
  fake_answers = false;
  op_result silent;
  {
    op_scope scope("unanswered");
    silent = scope.end();
  }
  gpuguard::set_framework_probe(nullptr, nullptr);
  fake_answers = true;
  op_result removed;
  {
    op_scope scope("no probe");
    removed = scope.end();
  }
  gpuguard::stop_outputs("test");

  ASSERT_NE(answered.framework, nullptr);
  EXPECT_STREQ(answered.framework, "fake");
  EXPECT_EQ(answered.framework_allocated_delta, 500);
  EXPECT_EQ(answered.framework_reserved_delta, 1000);
  EXPECT_EQ(silent.framework, nullptr) << "a probe that cannot say leaves the scope without figures";
  EXPECT_EQ(removed.framework, nullptr);

  std::ifstream in(log);
  std::string line;
  bool found = false;
  while (std::getline(in, line)) {
    if (line.find("\"name\":\"probed\"") == std::string::npos) { continue; }
    found = true;
    EXPECT_NE(line.find("\"framework\":\"fake\""), std::string::npos) << line;
    EXPECT_NE(line.find("\"framework_allocated_delta\":500"), std::string::npos) << line;
    EXPECT_NE(line.find("\"framework_reserved_delta\":1000"), std::string::npos) << line;
  }
  EXPECT_TRUE(found) << "no op event for the probed scope in " << log;
  std::remove(log.c_str());
}

TEST_F(op_scopes, a_scope_that_only_frees_has_negative_net_and_no_peak) {
  std::optional<device_buffer> old = make(2048);
  op_scope scope("cleanup");
  old.reset();
  const op_result& result = scope.end();
  EXPECT_EQ(result.net_bytes, -2048);
  EXPECT_EQ(result.peak_bytes, 0U);
  EXPECT_EQ(result.alloc_bytes, 0U);
  EXPECT_EQ(result.frees, 1U);
}

TEST_F(op_scopes, nested_scopes_fold_into_their_parents) {
  op_result outer_result;
  op_result inner_result;
  op_result second_result;
  std::vector<device_buffer> kept;
  {
    op_scope outer("train_step");
    kept.push_back(make(1000));
    {
      op_scope inner("forward");
      kept.push_back(make(500));
      { const device_buffer activations = make(3000); }
      inner_result = inner.end();
    }
    {
      op_scope second("backward");
      { const device_buffer gradients = make(200); }
      second_result = second.end();
    }
    outer_result = outer.end();
  }
  EXPECT_EQ(inner_result.depth, 1U);
  EXPECT_EQ(inner_result.net_bytes, 500);
  EXPECT_EQ(inner_result.peak_bytes, 3500U);
  EXPECT_EQ(second_result.depth, 1U);
  EXPECT_EQ(second_result.peak_bytes, 200U);
  EXPECT_EQ(second_result.net_bytes, 0);
  // The outer scope sees its own and its children's memory; its peak is the inner one's on top
  // of the 1000 it held then.
  EXPECT_EQ(outer_result.depth, 0U);
  EXPECT_EQ(outer_result.alloc_bytes, 4700U);
  EXPECT_EQ(outer_result.net_bytes, 1500);
  EXPECT_EQ(outer_result.peak_bytes, 4500U);
  EXPECT_EQ(outer_result.allocs, 4U);
  EXPECT_EQ(outer_result.thread, inner_result.thread);
}

TEST_F(op_scopes, a_later_smaller_child_does_not_lower_the_parents_peak) {
  op_scope outer("outer");
  { op_scope big("big"); const device_buffer b = make(9000); }
  { op_scope small("small"); const device_buffer s = make(10); }
  EXPECT_EQ(outer.end().peak_bytes, 9000U);
}

TEST_F(op_scopes, a_scope_ended_by_an_exception_is_marked) {
  op_result thrown;
  op_result caught;
  try {
    op_scope scope("failing_step");
    const device_buffer b = make(64);
    struct on_unwind {
      op_scope& s;
      op_result& out;
      ~on_unwind() { out = s.end(); }
    } capture{scope, thrown};
    throw std::runtime_error("NaN loss");
  } catch (const std::runtime_error&) {
    op_scope in_handler("recovery");  // no exception is in flight inside a handler
    caught = in_handler.end();
  }
  EXPECT_STREQ(thrown.name, "failing_step");
  EXPECT_TRUE(thrown.exception);
  EXPECT_EQ(thrown.net_bytes, 64);  // the buffer was not yet unwound when the scope ended
  EXPECT_FALSE(caught.exception);
}

TEST_F(op_scopes, scopes_are_per_thread) {
  op_result mine;
  op_result theirs;
  {
    op_scope scope("main_thread");
    const device_buffer here = make(100);
    std::thread other([&] {
      op_scope their_scope("worker");
      const device_buffer there = make(7000);
      theirs = their_scope.end();
    });
    other.join();
    mine = scope.end();
  }
  EXPECT_EQ(mine.alloc_bytes, 100U);
  EXPECT_EQ(mine.peak_bytes, 100U);
  EXPECT_EQ(theirs.alloc_bytes, 7000U);
  EXPECT_EQ(theirs.depth, 0U);
  EXPECT_NE(mine.thread, theirs.thread);
}

TEST_F(op_scopes, reads_any_source_that_records_into_the_ledger) {
  // What the LibTorch adapter or the preload interposer do: record events directly.
  alignas(64) static unsigned char block[4096];
  op_scope scope("adapter");
  gpuguard::record_allocation({block, sizeof block, 31, nullptr, gpuguard::memory_kind::device});
  const auto freed = gpuguard::record_free(block, sizeof block, 31, nullptr);
  EXPECT_TRUE(freed.known);
  const op_result& result = scope.end();
  EXPECT_EQ(result.alloc_bytes, 4096U);
  EXPECT_EQ(result.peak_bytes, 4096U);
  EXPECT_EQ(result.net_bytes, 0);
}

TEST_F(op_scopes, end_is_idempotent_and_long_names_are_cut) {
  const std::string name(100, 'n');
  op_scope scope(name);
  const device_buffer b = make(10);
  const op_result first = scope.end();
  const device_buffer after = make(10);
  const op_result& second = scope.end();
  EXPECT_EQ(second.alloc_bytes, first.alloc_bytes);
  EXPECT_EQ(std::string(second.name), std::string(op_result::max_name, 'n'));
}

TEST_F(op_scopes, durations_are_wall_time_in_nanoseconds) {
  // The ledger's clock may read the TSC: its scale must agree with steady_clock.
  const auto before = std::chrono::steady_clock::now();
  op_scope scope("sleep");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const op_result& result = scope.end();
  const auto outside = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - before).count();
  EXPECT_GE(result.duration_ns, 50'000'000);
  EXPECT_LE(result.duration_ns, outside + 1'000'000) << "outside " << outside;
}

TEST_F(op_scopes, the_start_read_during_the_scope_is_its_recorded_start) {
  EXPECT_EQ(gpuguard::current_op(), nullptr);
  op_scope outer("outer");
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  op_scope inner("inner");
  const op_result* open = gpuguard::current_op();
  ASSERT_NE(open, nullptr);
  EXPECT_STREQ(open->name, "inner");
  const std::int64_t inner_start = open->start_ns;
  const std::int64_t outer_start = outer.result().start_ns;
  EXPECT_GE(inner_start - outer_start, 2'000'000) << "the inner scope began 2 ms after the outer one";
  const op_result& inner_end = inner.end();
  EXPECT_EQ(inner_end.start_ns, inner_start);
  EXPECT_STREQ(gpuguard::current_op()->name, "outer");
  EXPECT_EQ(outer.end().start_ns, outer_start);
  EXPECT_EQ(gpuguard::current_op(), nullptr);
}

TEST_F(op_scopes, the_macro_declares_a_named_scope_for_the_block) {
  const gpuguard::output_stats before = gpuguard::output_statistics();
  {
    GPUGUARD_OP("macro_scope");
    const device_buffer b = make(10);
  }
  ASSERT_TRUE(gpuguard::flush_outputs());
  EXPECT_EQ(gpuguard::output_statistics().written, before.written + 1);
}

// ---- alert hysteresis ---------------------------------------------------------------------------

using gpuguard::detail::alert_gate;

TEST(alert_gate, fires_once_while_the_value_hovers_at_the_line) {
  alert_gate gate;
  EXPECT_EQ(gate.update(0.5, 0.8, 0.75), alert_gate::change::none);
  EXPECT_EQ(gate.update(0.81, 0.8, 0.75), alert_gate::change::fired);
  // Hovering around the threshold, never below the re-arm level: no new alert.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(gate.update(0.79, 0.8, 0.75), alert_gate::change::none);
    EXPECT_EQ(gate.update(0.80, 0.8, 0.75), alert_gate::change::none);
  }
  EXPECT_EQ(gate.take_held_back(), 10U);
  EXPECT_EQ(gate.update(0.74, 0.8, 0.75), alert_gate::change::rearmed);
  EXPECT_EQ(gate.update(0.76, 0.8, 0.75), alert_gate::change::none);
  EXPECT_EQ(gate.update(0.9, 0.8, 0.75), alert_gate::change::fired);
  EXPECT_EQ(gate.take_held_back(), 0U);
}

TEST(alert_gate, staying_above_is_one_alert_and_no_held_back_crossings) {
  alert_gate gate;
  EXPECT_EQ(gate.update(0.95, 0.8, 0.75), alert_gate::change::fired);
  for (int i = 0; i < 100; ++i) { EXPECT_EQ(gate.update(0.95, 0.8, 0.75), alert_gate::change::none); }
  EXPECT_EQ(gate.take_held_back(), 0U);
  EXPECT_FALSE(gate.armed());
}

TEST(alert_gate, a_value_exactly_at_the_rearm_level_does_not_rearm) {
  alert_gate gate;
  EXPECT_EQ(gate.update(1.0, 0.8, 0.75), alert_gate::change::fired);
  EXPECT_EQ(gate.update(0.75, 0.8, 0.75), alert_gate::change::none);
  EXPECT_EQ(gate.update(0.7499, 0.8, 0.75), alert_gate::change::rearmed);
}

}  // namespace
