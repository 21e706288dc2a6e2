// What operation scopes and the outputs cost. Every scope benchmark comes as a pair measured in
// the same run, the same work with and without GPUGUARD_OP around it, so the results are read as
// differences (benchmarks/run_benchmarks.py writes them into docs/benchmarks.md).
//
// The outputs run during every benchmark, started with the built-in defaults (GPUGUARD_OPTIONS
// does not change them) except text_log=off, queue_capacity=16384 and a JSONL sink, so the writer
// thread formats and writes every event while the producer runs. The scope benchmarks write the
// JSONL log to /dev/null, so that gigabytes of events do not go to the disk; the writer's rate is
// measured into a real file in the temp directory (removed after each run), and into /dev/null
// for comparison.
//
//   BM_op_scope/{baseline,scoped,scoped_nvtx_off,scoped_no_sink}/manual_time
//       body: benchmark::DoNotOptimize on a counter. One iteration is a batch of 8192 bodies
//       (half the queue), timed alone; the writer is woken a quarter of the queue in, so it drains
//       and formats while the batch runs. Between batches, outside the timed part, the benchmark
//       waits for flush_outputs(), so no batch meets a full queue. baseline: no scope; scoped: each
//       body in GPUGUARD_OP with nvtx=1 (the default); scoped_nvtx_off: nvtx=0; scoped_no_sink:
//       nvtx=1 and no sink at all (the writer drains and writes nothing).
//   BM_op_scope/scoped_no_outputs/manual_time
//       the scoped body with the outputs stopped: no queue, no NVTX range; the clock reads and the
//       counters alone. scoped minus this is what the queue and the NVTX range cost.
//   BM_op_scope_pair/{baseline,scoped}/manual_time
//       the same, with one allocate+deallocate of 256 bytes through gpuguard::tracking_resource
//       on host memory as the body, so that the scope has allocations to count.
//   BM_op_scope_alternating/{nvtx_on,nvtx_off,pair}/manual_time
//       the empty body (nvtx=1, nvtx=0) or the pair body (nvtx=1), plain and in a scope, in one
//       loop with the JSONL writer running: each iteration times a batch of plain bodies and a
//       batch of scoped ones, in turn first, with flush_outputs() after the scoped batch, untimed.
//       Counters baseline_ns and scoped_ns (the median batch of each, per body) and added_ns with
//       added_p25 and added_p75 (the median of the iterations' own differences per body, and its
//       quartiles). The benchmarks above compare two benchmarks run at different moments; a
//       difference taken within one iteration sees both under the same state of the machine.
//   BM_op_scope_latency/{baseline,scoped}/manual_time
//       as BM_op_scope/{baseline,scoped}, but each body is timed on its own with two
//       steady_clock reads: counters p50_ns, p99_ns, p999_ns and max_ns over all bodies of the run
//       show whether a producer ever waits while the writer works (the clock reads are in both).
//   BM_jsonl_sink/{file,dev_null}/real_time
//       the writer's sustained rate: one iteration queues 65536 empty scopes (nvtx=0) and waits
//       for flush_outputs(). The producer keeps at most half the queue in flight (it checks every
//       1024 scopes and sleeps 20 us while the writer is behind), so no event is dropped and the
//       writer, not the producer, sets the pace; items/s is events written per second. Counter
//       bytes_per_event is the file's size over the events.
//
// Each benchmark runs for at least 0.2 s (--benchmark_min_time overrides that), so the whole
// program takes well under a minute with 5 repetitions on 2 cores.
//
// Every outputs benchmark checks output_statistics() at the end: a dropped event, a failed sink,
// a flush that timed out or an event queued but not written fails the benchmark (SkipWithError),
// so a number is only reported when every event reached the writer. Counter dropped is always 0
// in a reported result.
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/options.hpp>
#include <gpuguard/core/outputs.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include "bench_stats.hpp"
#include "malloc_resource.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

namespace {

using bench_clock = std::chrono::steady_clock;

// A device id of the benchmark's own, so its counters touch nothing else in the ledger.
constexpr int bench_device = 60;
constexpr std::size_t host_bytes = 256;
constexpr std::uint32_t queue_capacity = 16384;            // the default, stated explicitly
constexpr std::size_t batch = queue_capacity / 2;          // scopes per timed batch
constexpr std::size_t writer_events = std::size_t{4} * queue_capacity;  // per BM_jsonl_sink iteration
constexpr std::size_t check_every = 1024;                  // BM_jsonl_sink's producer looks this often
constexpr std::size_t max_in_flight = queue_capacity / 2;  // queued but not yet written
// Run before the command line's flags, so that --benchmark_min_time still overrides it. Set per
// benchmark (MinTime) it would become part of every name.
constexpr const char* default_min_time = "--benchmark_min_time=0.2";

gpuguard_bench::malloc_resource& host() {
  static gpuguard_bench::malloc_resource resource;
  return resource;
}
gpuguard::tracking_resource& tracked_host() {
  static gpuguard::tracking_resource resource(host(), bench_device);
  return resource;
}

const std::string& jsonl_path() {
  static const std::string path = [] {
    std::error_code error;
    std::filesystem::path dir = std::filesystem::temp_directory_path(error);
    if (error) { dir = "/tmp"; }
    return (dir / ("gpuguard_ops_bench_" + std::to_string(::getpid()) + ".jsonl")).string();
  }();
  return path;
}

/// Where the JSONL sink writes: a file in the temp directory, /dev/null, or no sink at all.
enum class sink_mode { jsonl_file, jsonl_dev_null, none };

std::string jsonl_target(sink_mode sinks) {
  switch (sinks) {
    case sink_mode::jsonl_file: return jsonl_path();
    case sink_mode::jsonl_dev_null: return "/dev/null";
    case sink_mode::none: break;
  }
  return {};
}

/// Starts the outputs for one run of a benchmark function and stops them (removing the file) at
/// the end. A failure to start, or a later failed check, fails the benchmark with SkipWithError.
class outputs_run {
 public:
  outputs_run(benchmark::State& state, sink_mode sinks, bool nvtx) : state_(state), sinks_(sinks) {
    gpuguard::options opts;  // the defaults, whatever GPUGUARD_OPTIONS says
    opts.text_log = "off";
    opts.jsonl_log = jsonl_target(sinks);
    opts.nvtx = nvtx;
    opts.queue_capacity = queue_capacity;
    gpuguard::start_outputs(opts);
    std::error_code error;
    if (!gpuguard::outputs_running()) {
      fail("the outputs did not start");
    } else if (sinks != sink_mode::none && !std::filesystem::exists(opts.jsonl_log, error)) {
      fail("the JSONL sink did not open its file");
    }
  }
  outputs_run(const outputs_run&) = delete;
  outputs_run& operator=(const outputs_run&) = delete;
  outputs_run(outputs_run&&) = delete;
  outputs_run& operator=(outputs_run&&) = delete;
  ~outputs_run() {
    gpuguard::stop_outputs("benchmark");
    if (sinks_ == sink_mode::jsonl_file) { static_cast<void>(std::remove(jsonl_path().c_str())); }
  }

  [[nodiscard]] bool ok() const noexcept { return ok_; }

  /// Waits until the writer has handled and written everything queued so far.
  bool flush() {
    if (ok_ && !gpuguard::flush_outputs(std::chrono::seconds(30))) { fail("flush_outputs timed out"); }
    return ok_;
  }

  /// After the loop: every one of `expected` events was queued and written, none dropped. Sets
  /// the counters dropped and, with the JSONL file, bytes_per_event.
  void check(std::uint64_t expected) {
    if (!flush()) { return; }
    const gpuguard::output_stats stats = gpuguard::output_statistics();
    state_.counters["dropped"] = static_cast<double>(stats.dropped);
    if (sinks_ == sink_mode::jsonl_file && stats.written != 0) {
      std::error_code error;
      const std::uintmax_t bytes = std::filesystem::file_size(jsonl_path(), error);
      if (!error) {
        state_.counters["bytes_per_event"] = static_cast<double>(bytes) / static_cast<double>(stats.written);
      }
    }
    if (stats.dropped != 0) {
      fail("events were dropped: the output queue was full");
    } else if (stats.sink_failures != 0) {
      fail("a sink failed to write");
    } else if (stats.queued != expected || stats.written != expected) {
      fail("not every scope was queued and written");
    }
  }

 private:
  void fail(const char* why) {
    if (ok_) { state_.SkipWithError(why); }
    ok_ = false;
  }

  benchmark::State& state_;
  sink_mode sinks_;
  bool ok_ = true;
};

std::uint64_t scopes_in(const benchmark::State& state, std::size_t per_iteration) {
  return static_cast<std::uint64_t>(state.iterations()) * per_iteration;
}

// ---- the bodies ----------------------------------------------------------------------------------
struct empty_body {
  std::uint64_t count = 0;
  void operator()() { benchmark::DoNotOptimize(++count); }
};

struct pair_body {
  void operator()() {
    void* ptr = tracked_host().allocate(host_bytes);
    benchmark::DoNotOptimize(ptr);
    tracked_host().deallocate(ptr, host_bytes);
    benchmark::ClobberMemory();
  }
};

template <class Body>
struct scoped {
  Body body;
  void operator()() {
    GPUGUARD_OP("bench_op");
    body();
  }
};

/// CPU time of the calling thread: what it ran, not the time it waited for a core.
std::int64_t thread_cpu_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return std::int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

/// Context switches of the calling thread so far: voluntary ones (it waited for something) and
/// involuntary ones (it was runnable but lost its core).
struct switches {
  std::int64_t voluntary = 0;
  std::int64_t involuntary = 0;
};
switches thread_switches() {
  rusage usage{};
  ::getrusage(RUSAGE_THREAD, &usage);
  return {usage.ru_nvcsw, usage.ru_nivcsw};
}

/// What the producer thread did during the timed batches: its CPU time, and its context switches.
class producer_meter {
 public:
  void start() {
    cpu_start_ = thread_cpu_ns();
    switches_start_ = thread_switches();
  }
  void stop() {
    const switches now = thread_switches();
    cpu_ns_ += thread_cpu_ns() - cpu_start_;
    voluntary_ += now.voluntary - switches_start_.voluntary;
    involuntary_ += now.involuntary - switches_start_.involuntary;
  }
  /// Counters cpu_ns_per_op (the producer's CPU time per body, which leaves out the time it was off
  /// its core), waits_per_batch and preemptions_per_batch (voluntary and involuntary switches).
  void report(benchmark::State& state) const {
    const double bodies = static_cast<double>(std::max<std::uint64_t>(scopes_in(state, batch), 1));
    const double iterations = static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
    state.counters["cpu_ns_per_op"] = static_cast<double>(cpu_ns_) / bodies;
    state.counters["waits_per_batch"] = static_cast<double>(voluntary_) / iterations;
    state.counters["preemptions_per_batch"] = static_cast<double>(involuntary_) / iterations;
  }

 private:
  std::int64_t cpu_start_ = 0;
  switches switches_start_;
  std::int64_t cpu_ns_ = 0;
  std::int64_t voluntary_ = 0;
  std::int64_t involuntary_ = 0;
};

/// Nanoseconds per body of one batch of `batch` bodies.
template <class Body>
double batch_ns(Body& body) {
  const bench_clock::time_point start = bench_clock::now();
  for (std::size_t i = 0; i < batch; ++i) { body(); }
  const std::chrono::duration<double, std::nano> took = bench_clock::now() - start;
  return took.count() / static_cast<double>(batch);
}

/// One batch of `batch` bodies: the iteration time is the batch's wall time; producer_meter adds
/// what the thread did.
template <class Body>
void time_batch(benchmark::State& state, producer_meter& meter, Body& body) {
  meter.start();
  const double per_body = batch_ns(body);
  meter.stop();
  state.SetIterationTime(per_body * static_cast<double>(batch) * 1e-9);
}

/// Batches of bodies with the outputs running, each batch timed alone; flush_outputs() between
/// batches, untimed.
template <class Body>
void batches(benchmark::State& state, sink_mode sinks, bool nvtx, bool queues, Body body) {
  outputs_run run(state, sinks, nvtx);
  producer_meter meter;
  for (auto _ : state) {
    time_batch(state, meter, body);
    if (!run.flush()) { break; }
  }
  if (!run.ok()) { return; }
  state.SetItemsProcessed(static_cast<std::int64_t>(scopes_in(state, batch)));
  meter.report(state);
  run.check(queues ? scopes_in(state, batch) : 0);
}

// ---- 1. the cost of a scope ----------------------------------------------------------------------
void BM_op_scope_baseline(benchmark::State& state) {
  batches(state, sink_mode::jsonl_dev_null, true, false, empty_body{});
}
void BM_op_scope_scoped(benchmark::State& state) {
  batches(state, sink_mode::jsonl_dev_null, true, true, scoped<empty_body>{});
}
void BM_op_scope_scoped_nvtx_off(benchmark::State& state) {
  batches(state, sink_mode::jsonl_dev_null, false, true, scoped<empty_body>{});
}
void BM_op_scope_scoped_no_sink(benchmark::State& state) {
  batches(state, sink_mode::none, true, true, scoped<empty_body>{});
}
/// With the outputs stopped, a scope neither queues its result nor pushes an NVTX range: what is
/// left is its clock reads and counters. The outputs run once first, so that the first scope does
/// not start them itself.
void BM_op_scope_scoped_no_outputs(benchmark::State& state) {
  { const outputs_run started(state, sink_mode::none, true); }
  if (gpuguard::outputs_running()) {
    state.SkipWithError("the outputs did not stop");
    return;
  }
  scoped<empty_body> body;
  producer_meter meter;
  for (auto _ : state) { time_batch(state, meter, body); }
  state.SetItemsProcessed(static_cast<std::int64_t>(scopes_in(state, batch)));
  meter.report(state);
}
void BM_op_scope_pair_baseline(benchmark::State& state) {
  batches(state, sink_mode::jsonl_dev_null, true, false, pair_body{});
}
void BM_op_scope_pair_scoped(benchmark::State& state) {
  batches(state, sink_mode::jsonl_dev_null, true, true, scoped<pair_body>{});
}

template <class Body>
void alternating(benchmark::State& state, bool nvtx) {
  outputs_run run(state, sink_mode::jsonl_dev_null, nvtx);
  Body plain;
  scoped<Body> wrapped;
  std::vector<double> baseline_ns;
  std::vector<double> scoped_ns;
  std::vector<double> added;
  bool scoped_first = false;
  for (auto _ : state) {
    double b = 0;
    double s = 0;
    if (scoped_first) {
      s = batch_ns(wrapped);
      if (!run.flush()) { break; }
      b = batch_ns(plain);
    } else {
      b = batch_ns(plain);
      s = batch_ns(wrapped);
      if (!run.flush()) { break; }
    }
    scoped_first = !scoped_first;
    state.SetIterationTime((b + s) * static_cast<double>(batch) * 1e-9);
    baseline_ns.push_back(b);
    scoped_ns.push_back(s);
    added.push_back(s - b);
  }
  if (!run.ok() || added.empty()) { return; }
  state.SetItemsProcessed(static_cast<std::int64_t>(scopes_in(state, 2 * batch)));
  state.counters["baseline_ns"] = gpuguard_bench::quantile(baseline_ns, 0.5);
  state.counters["scoped_ns"] = gpuguard_bench::quantile(scoped_ns, 0.5);
  state.counters["added_p25"] = gpuguard_bench::quantile(added, 0.25);
  state.counters["added_ns"] = gpuguard_bench::quantile(added, 0.5);
  state.counters["added_p75"] = gpuguard_bench::quantile(added, 0.75);
  run.check(static_cast<std::uint64_t>(scoped_ns.size()) * batch);
}

void BM_op_scope_alternating_nvtx_on(benchmark::State& state) { alternating<empty_body>(state, true); }
void BM_op_scope_alternating_nvtx_off(benchmark::State& state) { alternating<empty_body>(state, false); }
void BM_op_scope_alternating_pair(benchmark::State& state) { alternating<pair_body>(state, true); }

// ---- 2. the latency of each scope while the writer works -----------------------------------------
std::int64_t percentile(std::vector<std::int64_t>& values, double fraction) {
  const auto index = static_cast<std::size_t>(fraction * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(index), values.end());
  return values[index];
}

template <class Body>
void latencies(benchmark::State& state, bool queues, Body body) {
  outputs_run run(state, sink_mode::jsonl_dev_null, true);
  std::vector<std::int64_t> this_batch(batch);
  std::vector<std::int64_t> all;
  producer_meter meter;
  for (auto _ : state) {
    meter.start();
    const bench_clock::time_point start = bench_clock::now();
    for (std::size_t i = 0; i < batch; ++i) {
      const bench_clock::time_point before = bench_clock::now();
      body();
      this_batch[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(bench_clock::now() - before).count();
    }
    const bench_clock::time_point stop = bench_clock::now();
    meter.stop();
    state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
    all.insert(all.end(), this_batch.begin(), this_batch.end());
    if (!run.flush()) { break; }
  }
  if (!run.ok() || all.empty()) { return; }
  state.SetItemsProcessed(static_cast<std::int64_t>(scopes_in(state, batch)));
  meter.report(state);
  state.counters["p50_ns"] = static_cast<double>(percentile(all, 0.5));
  state.counters["p99_ns"] = static_cast<double>(percentile(all, 0.99));
  state.counters["p999_ns"] = static_cast<double>(percentile(all, 0.999));
  state.counters["max_ns"] = static_cast<double>(*std::max_element(all.begin(), all.end()));
  run.check(queues ? scopes_in(state, batch) : 0);
}

void BM_op_scope_latency_baseline(benchmark::State& state) { latencies(state, false, empty_body{}); }
void BM_op_scope_latency_scoped(benchmark::State& state) { latencies(state, true, scoped<empty_body>{}); }

// ---- 3. the writer's sustained rate into the JSONL file ------------------------------------------
/// Sleeps while the writer is behind, so that at most max_in_flight events wait in the queue after
/// the next check_every scopes.
void wait_for_room() {
  for (;;) {
    const gpuguard::output_stats stats = gpuguard::output_statistics();
    if (stats.queued - stats.written + check_every <= max_in_flight) { return; }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void writer_rate(benchmark::State& state, sink_mode sinks) {
  outputs_run run(state, sinks, false);
  empty_body body;
  for (auto _ : state) {
    for (std::size_t i = 0; i < writer_events; ++i) {
      if (i % check_every == 0) { wait_for_room(); }
      GPUGUARD_OP("bench_op");
      body();
    }
    if (!run.flush()) { break; }
  }
  if (!run.ok()) { return; }
  state.SetItemsProcessed(static_cast<std::int64_t>(scopes_in(state, writer_events)));
  run.check(scopes_in(state, writer_events));
}

void BM_jsonl_sink_file(benchmark::State& state) { writer_rate(state, sink_mode::jsonl_file); }
void BM_jsonl_sink_dev_null(benchmark::State& state) { writer_rate(state, sink_mode::jsonl_dev_null); }

void register_benchmarks() {
  const auto batched = [](const char* name, void (*function)(benchmark::State&)) {
    benchmark::RegisterBenchmark(name, function)->UseManualTime();
  };
  batched("BM_op_scope/baseline", BM_op_scope_baseline);
  batched("BM_op_scope/scoped", BM_op_scope_scoped);
  batched("BM_op_scope/scoped_nvtx_off", BM_op_scope_scoped_nvtx_off);
  batched("BM_op_scope/scoped_no_sink", BM_op_scope_scoped_no_sink);
  batched("BM_op_scope/scoped_no_outputs", BM_op_scope_scoped_no_outputs);
  batched("BM_op_scope_pair/baseline", BM_op_scope_pair_baseline);
  batched("BM_op_scope_pair/scoped", BM_op_scope_pair_scoped);
  batched("BM_op_scope_alternating/nvtx_on", BM_op_scope_alternating_nvtx_on);
  batched("BM_op_scope_alternating/nvtx_off", BM_op_scope_alternating_nvtx_off);
  batched("BM_op_scope_alternating/pair", BM_op_scope_alternating_pair);
  batched("BM_op_scope_latency/baseline", BM_op_scope_latency_baseline);
  batched("BM_op_scope_latency/scoped", BM_op_scope_latency_scoped);
  benchmark::RegisterBenchmark("BM_jsonl_sink/file", BM_jsonl_sink_file)->UseRealTime();
  benchmark::RegisterBenchmark("BM_jsonl_sink/dev_null", BM_jsonl_sink_dev_null)->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  // Stacks off whatever GPUGUARD_OPTIONS says: the scope benchmarks measure the scope.
  gpuguard::options ledger_opts = gpuguard::process_options();
  ledger_opts.stacks = gpuguard::stack_mode::off;
  gpuguard::configure_ledger(ledger_opts);
  register_benchmarks();
  std::string program = "gpuguard_ops_bench";
  std::string min_time = default_min_time;
  std::vector<char*> args(argv, argv + argc);
  if (args.empty()) { args.push_back(program.data()); }
  args.insert(args.begin() + 1, min_time.data());
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) { return 1; }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
