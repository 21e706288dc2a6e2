// The outputs: one bounded queue, one writer thread, the sinks, memory sampling and alerts.
//
// Producers (operation scopes) only copy their result into the queue: no lock, no I/O, no heap
// allocation; a full queue drops the event and counts it. The writer wakes every `sample_ms` (or
// when the queue is a quarter full), drains the queue into the sinks, samples each device's memory,
// evaluates the alerts and writes out. Stopping drains what is left and writes the end lines.
#include <gpuguard/core/outputs.hpp>

#include <gpuguard/device.hpp>

#include "outputs/alert_gate.hpp"
#include "util/event_queue.hpp"
#include "exit/exit_paths.hpp"
#include "util/format.hpp"
#include "util/nvml.hpp"
#include "util/kept_for_process.hpp"
#include "ledger/ledger_internal.hpp"
#include "outputs/outputs_internal.hpp"
#include "util/quiet_thread.hpp"
#include "util/saturating.hpp"
#include "tracking/report_json.hpp"
#include "outputs/sinks.hpp"
#include "outputs/timeline.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gpuguard {

const char* to_string(alert_kind kind) noexcept {
  switch (kind) {
    case alert_kind::device_full: return "device_full";
    case alert_kind::device_recovered: return "device_recovered";
    case alert_kind::op_growth: return "op_growth";
  }
  return "alert";
}

namespace {

using detail::queued_op;
using queue_type = detail::event_queue<queued_op>;
static_assert(queue_type::cell_bytes() == 256,
              "docs/options.md and options.hpp give queue_capacity's memory at 256 bytes a slot");

constexpr std::int64_t ms = 1000000;
// Allocations and frees the timeline queue holds between two writer passes (64 bytes a slot,
// 4 MiB); the producers wake the writer each time a quarter of it has filled.
constexpr std::size_t timeline_capacity = 65536;
static_assert(detail::mem_event_queue::cell_bytes() == 64,
              "docs/outputs.md gives the timeline queue's memory at 64 bytes a slot");

struct device_track {
  bool announced = false;
  bool queryable = false;
  util::nvml_abi::device_handle nvml = nullptr;  // NVML's handle of the device, where NVML answers for it
  std::size_t total_bytes = 0;  // from the device, or host_capacity for host memory
  bool have_last = false;
  detail::mem_sample last;
  detail::alert_gate gate;
};

struct op_alert_state {
  detail::alert_gate gate;
};

struct output_state {
  std::mutex control;  // start and stop
  std::atomic<queue_type*> queue{nullptr};
  queue_type* spare = nullptr;  // never freed: a producer may still hold a pointer to it
  std::thread* writer = nullptr;
  std::atomic<unsigned> flags{0};
  std::atomic<bool> ever_started{false};
  bool holds_counters = false;  // the ledger's counters are held shared for the writer (control)
  std::size_t wake_mask = 0;

  std::mutex wake_mutex;
  std::condition_variable wake;
  std::condition_variable flushed;
  bool stop_requested = false;       // under wake_mutex
  std::size_t flush_target = 0;      // under wake_mutex: pushes the latest flush waits for
  std::size_t flushed_through = 0;   // under wake_mutex
  std::size_t timeline_flush_target = 0;     // under wake_mutex: the same for the timeline queue
  std::size_t timeline_flushed_through = 0;  // under wake_mutex

  std::size_t queued_base = 0;  // the queue's pushes when the outputs started
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> written{0};
  std::atomic<std::uint64_t> sink_failures{0};
  std::atomic<std::uint64_t> alerts{0};

  std::mutex callback_mutex;
  alert_callback callback;
  bool callback_failure_reported = false;

  // The writer's own (and, once it has been joined, the stopping thread's).
  options opts;
  std::vector<std::unique_ptr<detail::sink>> sinks;
  bool alerts_to_stderr = false;  // text_log=off: alert lines still reach a person
  detail::run_totals totals;
  std::unordered_map<std::string, std::size_t> op_index;
  std::unordered_map<std::string, op_alert_state> op_alerts;
  std::unordered_map<int, device_track> tracks;
  std::unordered_set<std::uint32_t> threads_seen;
  detail::mem_event_queue* timeline_spare = nullptr;  // never freed, as `spare`
  detail::mem_event_queue* timeline = nullptr;        // the writer's: the queue it drains, or none
  std::unique_ptr<detail::timeline_coalescer> coalescer;
  std::uint64_t dropped_reported = 0;
  int cuda_devices = -1;  // -1: not asked yet
};

output_state& state() {
  static auto* s = new output_state();  // lives through exit: scopes in static destructors use it
  return *s;
}

// The ledger's producers call it each time a quarter of the memory-event queue has filled.
void wake_writer() noexcept { state().wake.notify_one(); }

void report_sink_failure(const std::string& message) {
  state().sink_failures.fetch_add(1, std::memory_order_relaxed);
  const std::string line = "[gpuguard] " + message + "\n";
  std::fputs(line.c_str(), stderr);
}

// ---- the writer's work --------------------------------------------------------------------------

template <class F>
void each_sink(output_state& st, F&& f) {
  for (auto& s : st.sinks) { f(*s); }
}

void deliver_alert(output_state& st, alert fired) {
  st.alerts.fetch_add(1, std::memory_order_relaxed);
  ++st.totals.alerts[static_cast<int>(fired.kind)];
  each_sink(st, [&](detail::sink& s) { s.alert(fired); });
  if (st.alerts_to_stderr) {
    const std::string line = fired.message + "\n";
    std::fputs(line.c_str(), stderr);
  }
  alert_callback callback;
  {
    const std::lock_guard<std::mutex> lock(st.callback_mutex);
    callback = st.callback;
  }
  if (!callback) { return; }
  try {
    callback(fired);
  } catch (...) {
    st.sink_failures.fetch_add(1, std::memory_order_relaxed);
    const std::lock_guard<std::mutex> lock(st.callback_mutex);
    if (!st.callback_failure_reported) {
      st.callback_failure_reported = true;
      std::fputs("[gpuguard] the alert callback threw; it is still called for later alerts\n", stderr);
    }
  }
}

std::string where(int device) {
  return device == host_device_id ? std::string("host memory") : "device " + std::to_string(device);
}

void check_device_alert(output_state& st, int device, device_track& track, std::size_t used,
                        std::size_t total, std::int64_t now, bool on_crossing = false) {
  if (st.opts.alert_fraction <= 0.0 || total == 0) { return; }
  const double fraction = static_cast<double>(used) / static_cast<double>(total);
  const double threshold = st.opts.alert_fraction;
  const auto change = track.gate.update(fraction, threshold, threshold - st.opts.alert_hysteresis);
  if (change == detail::alert_gate::change::none) { return; }
  alert fired;
  fired.kind = change == detail::alert_gate::change::fired ? alert_kind::device_full
                                                           : alert_kind::device_recovered;
  fired.time_ns = now;
  fired.device = device;
  fired.fraction = fraction;
  fired.threshold = threshold;
  fired.used_bytes = used;
  fired.total_bytes = total;
  fired.suppressed = track.gate.take_held_back();
  char text[256];
  if (fired.kind == alert_kind::device_full) {
    std::snprintf(text, sizeof text, "[gpuguard] ALERT: %s is %.1f%% full: %s of %s used (alert_fraction=%.2f)%s",
                  where(device).c_str(), fraction * 100.0, detail::format_bytes(used).c_str(),
                  detail::format_bytes(total).c_str(), threshold,
                  on_crossing ? ", reached by an allocation" : "");
  } else {
    std::snprintf(text, sizeof text, "[gpuguard] %s is back to %.1f%% used: %s of %s (alert re-armed)",
                  where(device).c_str(), fraction * 100.0, detail::format_bytes(used).c_str(),
                  detail::format_bytes(total).c_str());
  }
  fired.message = text;
  if (fired.suppressed != 0) {
    fired.message += " (" + std::to_string(fired.suppressed) + " more crossings held back)";
  }
  deliver_alert(st, std::move(fired));
}

// The device alert, judged on the crossing the ledger recorded (an allocation took the device
// past the threshold, however briefly) and then on the sample; then armed again for the next
// crossing. Memory of other processes (device-wide used minus this process's live bytes, as of
// this sample) counts towards the threshold.
void judge_device_alert(output_state& st, int device, device_track& track, const detail::mem_sample& s,
                        std::size_t total, bool last) {
  if (st.opts.alert_fraction <= 0.0 || total == 0) { return; }
  const std::size_t others = s.queried && s.used_bytes > s.live_bytes ? s.used_bytes - s.live_bytes : 0;
  if (const std::optional<detail::crossing> crossed = detail::take_crossing(device)) {
    check_device_alert(st, device, track, crossed->live_bytes + others, total, crossed->time_ns, true);
  } else if (track.gate.armed()) {
    // Not armed yet when it happened (the device's first sample): the most live since the last
    // sample still shows a spike.
    check_device_alert(st, device, track, s.interval_peak_bytes + others, total, s.time_ns, true);
  }
  if (!last) {
    check_device_alert(st, device, track, s.queried ? s.used_bytes : s.live_bytes, total, s.time_ns);
  }
  if (last || !track.gate.armed()) {
    detail::arm_crossing(device, static_cast<std::size_t>(-1));
    return;
  }
  const auto at = static_cast<std::size_t>(st.opts.alert_fraction * static_cast<double>(total));
  detail::arm_crossing(device, at > others ? at - others : 0);
}

void check_op_alert(output_state& st, const op_result& op) {
  const std::size_t limit = st.opts.alert_op_growth;
  if (limit == 0) { return; }
  op_alert_state& s = st.op_alerts[std::string(op.name_view())];
  const double value = static_cast<double>(op.net_bytes);
  const double threshold = static_cast<double>(limit) + 0.5;  // "passes": strictly more than the limit
  const auto change = s.gate.update(value, threshold, static_cast<double>(limit) * (1.0 - st.opts.alert_hysteresis));
  if (change != detail::alert_gate::change::fired) { return; }
  alert fired;
  fired.kind = alert_kind::op_growth;
  fired.time_ns = op.start_ns + op.duration_ns;
  fired.op = op.name_view();
  fired.thread = op.thread;
  fired.net_bytes = op.net_bytes;
  fired.limit_bytes = limit;
  fired.suppressed = s.gate.take_held_back();
  fired.message = "[gpuguard] ALERT: operation '" + fired.op + "' on thread " + std::to_string(op.thread) +
                  " left " + detail::format_signed_bytes(op.net_bytes) + " behind (alert_op_growth=" +
                  detail::format_bytes(limit) + ")";
  if (fired.suppressed != 0) {
    fired.message += " (" + std::to_string(fired.suppressed) + " more held back)";
  }
  deliver_alert(st, std::move(fired));
}

void handle(output_state& st, const queued_op& item) {
  const op_result& op = item.op;
  if (st.threads_seen.insert(op.thread).second) {
    const detail::thread_info info{op.thread, item.tid, item.thread_name};
    each_sink(st, [&](detail::sink& s) { s.thread(info, op.start_ns); });
  }
  each_sink(st, [&](detail::sink& s) { s.op(op); });
  const std::string name(op.name_view());
  auto [it, inserted] = st.op_index.try_emplace(name, st.totals.ops.size());
  if (inserted) { st.totals.ops.emplace_back(name, detail::op_totals{}); }
  detail::op_totals& t = st.totals.ops[it->second].second;
  t.add(op.duration_ns, detail::to_int64_saturated(op.alloc_bytes), detail::to_int64_saturated(op.free_bytes),
        detail::to_int64_saturated(op.peak_bytes), op.net_bytes, op.exception);
  check_op_alert(st, op);
  st.written.fetch_add(1, std::memory_order_relaxed);
}

bool cuda_device_usable(output_state& st, int device) {
  if (device < 0) { return false; }
  if (st.cuda_devices < 0) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      count = 0;
    }
    st.cuda_devices = count;
    // This thread may be what initialised the CUDA runtime: register the exit report again so
    // that it runs before the runtime's teardown.
    if (count > 0) { detail::register_exit_report(); }
  }
  return device < st.cuda_devices;
}

// NVML's handle of `device`, where NVML answers for it with cudaMemGetInfo's figures (`free_bytes`
// and `total` just read): the same total to the byte, and free within 64 MiB (what the driver may
// have handed out between the two reads). Else null, and the samples keep asking cudaMemGetInfo:
// on a MIG instance, or where a limit set inside the process (MPS, a vGPU, an interposer such as
// HAMi-core) makes the runtime report less than the GPU has, NVML's figures are the whole GPU's.
util::nvml_abi::device_handle nvml_agreeing(int device, std::size_t free_bytes, std::size_t total) {
  std::array<char, 32> bus{};
  if (cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), device) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return nullptr;
  }
  const util::nvml_abi::device_handle handle = util::nvml_device(bus.data());
  std::uint64_t used = 0;
  std::uint64_t nvml_total = 0;
  if (handle == nullptr || util::nvml_mig_enabled(handle) || !util::nvml_memory(handle, used, nvml_total) ||
      nvml_total != total) {
    return nullptr;
  }
  const std::uint64_t nvml_free = nvml_total - used;
  const std::uint64_t apart = nvml_free > free_bytes ? nvml_free - free_bytes : free_bytes - nvml_free;
  return apart <= (std::uint64_t{64} << 20U) ? handle : nullptr;
}

void announce(output_state& st, int device, device_track& track, std::int64_t now, bool last) {
  detail::device_info info;
  info.device = device;
  if (device == host_device_id) {
    track.total_bytes = st.opts.host_capacity;
  } else if (cuda_device_usable(st, device)) {
    cudaDeviceProp prop{};
    std::size_t free_bytes = 0;
    std::size_t total = 0;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess && cudaSetDevice(device) == cudaSuccess &&
        cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) {
      info.name = prop.name;
      track.total_bytes = total;
      track.queryable = true;
      // Later samples ask NVML where it gives the same bytes: it answers without entering the
      // process's CUDA context, which a cudaMemGetInfo goes through, contending with the program's
      // own CUDA calls. Not at the last sample: nothing is sampled after it.
      if (!last) { track.nvml = nvml_agreeing(device, free_bytes, total); }
    } else {
      static_cast<void>(cudaGetLastError());
    }
  }
  info.total_bytes = track.total_bytes;
  track.announced = true;
  each_sink(st, [&](detail::sink& s) { s.device(info, now); });
}

// One memory sample of every device the ledger has seen. The last one (at stop) asks no device:
// the CUDA runtime may be going away.
void sample(output_state& st, bool last) {
  detail::refine_clock();
  const std::int64_t now = detail::now_ns();
  for (const int device : detail::active_devices()) {
    device_track& track = st.tracks[device];
    if (!track.announced) { announce(st, device, track, now, last); }
    const counters c = device_counters(device);
    detail::mem_sample s;
    // Its own time, right after the counters: the device's announcement above may have taken
    // milliseconds, and events the ledger recorded meanwhile are in the counters and earlier.
    s.time_ns = detail::now_ns();
    s.device = device;
    s.live_bytes = c.current_bytes;
    s.interval_peak_bytes = std::max(detail::take_interval_peak(device), c.current_bytes);
    s.allocations = c.allocations;
    s.frees = c.frees;
    if (track.queryable && !last) {
      std::size_t free_bytes = 0;
      std::size_t total = 0;
      std::uint64_t nvml_used = 0;
      std::uint64_t nvml_total = 0;
      if (track.nvml != nullptr && util::nvml_memory(track.nvml, nvml_used, nvml_total)) {
        s.queried = true;
        s.used_bytes = nvml_used;
        s.total_bytes = nvml_total;
      } else if (cudaSetDevice(device) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) {
        s.queried = true;
        s.used_bytes = total - free_bytes;
        s.total_bytes = total;
      } else {
        static_cast<void>(cudaGetLastError());
      }
    }
    const detail::mem_sample& prev = track.last;
    const bool changed = !track.have_last || last || s.live_bytes != prev.live_bytes ||
                         s.allocations != prev.allocations ||
                         s.frees != prev.frees ||
                         (s.queried && (s.used_bytes > prev.used_bytes + (1U << 20) ||
                                        s.used_bytes + (1U << 20) < prev.used_bytes));
    if (changed) {
      each_sink(st, [&](detail::sink& sink) { sink.mem(s); });
      track.last = s;
      track.have_last = true;
      auto found = std::find_if(st.totals.last_samples.begin(), st.totals.last_samples.end(),
                                [&](const detail::mem_sample& m) { return m.device == device; });
      if (found == st.totals.last_samples.end()) {
        st.totals.last_samples.push_back(s);
      } else {
        *found = s;
      }
    }
    judge_device_alert(st, device, track, s, s.queried ? s.total_bytes : track.total_bytes, last);
  }
}

void report_drops(output_state& st) {
  const std::uint64_t total = st.dropped.load(std::memory_order_relaxed);
  if (total == st.dropped_reported) { return; }
  const std::uint64_t count = total - st.dropped_reported;
  st.dropped_reported = total;
  st.totals.dropped = total;
  const std::int64_t now = detail::now_ns();
  each_sink(st, [&](detail::sink& s) { s.dropped(count, total, now); });
}

// The memory timeline: what the queue holds, what the producers folded while it was full, and the
// steps still open (so that every pass leaves the files complete up to now).
void drain_timeline(output_state& st) {
  if (st.timeline == nullptr) { return; }
  detail::timeline_coalescer& c = *st.coalescer;
  const auto line = [&](const detail::mem_event& e) { each_sink(st, [&](detail::sink& s) { s.mem_event(e); }); };
  const auto step = [&](const detail::mem_step& m) { each_sink(st, [&](detail::sink& s) { s.mem_step(m); }); };
  detail::mem_event e;
  while (st.timeline->try_pop(e)) { c.add(e, line, step); }
  c.finish(step);
  if (detail::overflow_devices() != 0) {
    detail::mem_step folded;
    for (const int device : detail::active_devices()) {
      if (detail::take_overflow(device, folded)) { step(folded); }
    }
  }
}

void drain(output_state& st, queue_type& queue) {
  queued_op item;
  while (queue.try_pop(item)) { handle(st, item); }
  drain_timeline(st);
}

void writer_main(output_state& st, queue_type& queue) {
  const std::int64_t sample_ns = static_cast<std::int64_t>(st.opts.sample_ms) * ms;
  std::int64_t next_sample = 0;
  for (;;) {
    drain(st, queue);
    std::int64_t now = detail::now_ns();
    if (now >= next_sample) {
      sample(st, false);
      now = detail::now_ns();
      next_sample = now + sample_ns;
    }
    report_drops(st);
    each_sink(st, [&](detail::sink& s) {
      s.tick(now, st.totals);
      s.flush();
    });
    std::unique_lock<std::mutex> lock(st.wake_mutex);
    const std::size_t consumed = queue.consumed();
    const std::size_t timeline_consumed = st.timeline != nullptr ? st.timeline->consumed() : 0;
    if (st.flushed_through < consumed || st.timeline_flushed_through < timeline_consumed) {
      st.flushed_through = std::max(st.flushed_through, consumed);
      st.timeline_flushed_through = std::max(st.timeline_flushed_through, timeline_consumed);
      st.flushed.notify_all();
    }
    if (st.stop_requested) { break; }
    // A flush waits for pushes that are claimed but not yet written: look again soon.
    const bool flush_pending = st.flush_target > consumed ||
                               (st.timeline != nullptr && st.timeline_flush_target > timeline_consumed);
    const std::int64_t wait_ns = flush_pending ? ms / 4 : std::min<std::int64_t>(next_sample - now, 100 * ms);
    st.wake.wait_for(lock, std::chrono::nanoseconds(std::max<std::int64_t>(wait_ns, 0)));
  }
  drain(st, queue);
  report_drops(st);
}

std::unique_ptr<detail::sink> open_sink(const char* key, const std::string& value,
                                        std::unique_ptr<detail::sink> (*make)(const std::string&, detail::failure_reporter, std::string*)) {
  std::string error;
  std::unique_ptr<detail::sink> made = make(detail::expand_path(value), report_sink_failure, &error);
  if (made == nullptr) {
    const std::string line = "[gpuguard] " + error + "; " + key + " is off\n";
    std::fputs(line.c_str(), stderr);
  }
  return made;
}

void release_counters(output_state& st) noexcept {
  if (st.holds_counters) {
    st.holds_counters = false;
    detail::hold_shared_counters(false);
  }
}

void stop_locked(output_state& st, const char* reason, const leak_report* leaks) noexcept {
  if (st.writer == nullptr) { return; }
  queue_type* queue = st.queue.exchange(nullptr, std::memory_order_acq_rel);
  detail::subscribe_mem_events(nullptr, nullptr);
  st.flags.store(0, std::memory_order_release);
  {
    const std::lock_guard<std::mutex> lock(st.wake_mutex);
    st.stop_requested = true;
  }
  st.wake.notify_all();
  if (st.writer->get_id() == std::this_thread::get_id()) {
    // The writer itself is ending the process (an alert callback called exit()): it cannot join
    // itself, and its half-handled pass cannot be finished from here.
    st.writer->detach();
    delete st.writer;
    st.writer = nullptr;
    release_counters(st);
    return;
  }
  st.writer->join();
  delete st.writer;
  st.writer = nullptr;
  try {
    // The writer is gone: this thread owns the sinks now.
    if (queue != nullptr) { drain(st, *queue); }
    drain_timeline(st);  // producers still inside a push have finished it by now, or fold
    st.timeline = nullptr;
    report_drops(st);
    sample(st, true);
    detail::end_info last;
    last.time_ns = detail::now_ns();
    last.reason = reason;
    last.dropped = st.dropped.load(std::memory_order_relaxed);
    last.ledger = snapshot(false);
    last.leaks = leaks;
    last.stacks_on = st.opts.stacks != stack_mode::off;
    last.sites_sampled = st.opts.stacks == stack_mode::sampled;
    // Sites with Python frames exist with stacks off too (python_frames): the line then comes
    // when there are some.
    if (last.stacks_on || st.opts.python_frames != python_frames_mode::off) {
      // The top sites, one per resolved location (an unrolled loop's copies are one site).
      std::unordered_map<std::string, std::size_t> by_location;
      for (const detail::site_total& t : detail::top_sites(200)) {
        std::vector<frame_info> frames = resolve_site(t.site);
        std::string key = detail::location_key(frames);
        if (key.empty()) { key = "#" + std::to_string(t.site); }
        const auto [it, inserted] = by_location.try_emplace(std::move(key), last.sites.size());
        if (inserted) {
          last.sites.push_back({t, std::move(frames), {t.site}});
          continue;
        }
        detail::resolved_site& into = last.sites[it->second];
        into.totals.allocations += t.allocations;
        into.totals.bytes += t.bytes;
        into.raw_sites.push_back(t.site);
      }
      std::stable_sort(last.sites.begin(), last.sites.end(), [](const detail::resolved_site& a, const detail::resolved_site& b) {
        return a.totals.bytes > b.totals.bytes;
      });
      if (last.sites.size() > 20) { last.sites.resize(20); }
      last.stacks_on = last.stacks_on || !last.sites.empty();
    }
    each_sink(st, [&](detail::sink& s) {
      s.finish(last, st.totals);
      s.flush();
    });
  } catch (...) {
    std::fputs("[gpuguard] writing the end of the outputs failed (out of memory?)\n", stderr);
  }
  st.sinks.clear();
  {
    const std::lock_guard<std::mutex> lock(st.wake_mutex);
    st.flushed_through = st.flush_target;  // nothing more will come: release any waiter
    st.timeline_flushed_through = st.timeline_flush_target;
  }
  st.flushed.notify_all();
  release_counters(st);  // the samples and the timeline are written
}

// In a child made by fork() the writer thread does not exist and the sinks' files are the
// parent's: the child's outputs are off (it may start its own), and nothing of the parent's is
// joined, flushed or closed there. A lock another thread held at the fork stays held in the
// child, so the locks are made anew.
void outputs_off_in_forked_child() noexcept {
  output_state& st = state();
  new (&st.control) std::mutex();      // NOLINT(cppcoreguidelines-owning-memory): see above
  new (&st.wake_mutex) std::mutex();   // NOLINT(cppcoreguidelines-owning-memory)
  new (&st.callback_mutex) std::mutex();  // NOLINT(cppcoreguidelines-owning-memory)
  st.queue.store(nullptr, std::memory_order_relaxed);
  detail::subscribe_mem_events(nullptr, nullptr);
  st.timeline = nullptr;
  st.flags.store(0, std::memory_order_relaxed);
  // The parent's thread object, not ours to join or destroy, and its sinks, whose buffers are
  // the parent's: kept, never freed.
  release_counters(st);  // the parent's writer's hold
  detail::kept_for_process(std::exchange(st.writer, nullptr));
  for (auto& s : st.sinks) { detail::kept_for_process(s.release()); }
  st.sinks.clear();
  detail::thread_state& thread = detail::this_thread_state();  // the child's only thread
  thread.tid = 0;
  thread.named = false;
}

}  // namespace

// ---- public -------------------------------------------------------------------------------------

void start_outputs(const options& opts) noexcept {
  output_state& st = state();
  const std::lock_guard<std::mutex> control(st.control);
  st.ever_started.store(true, std::memory_order_relaxed);
  static const bool fork_handler = ::pthread_atfork(nullptr, nullptr, outputs_off_in_forked_child) == 0;
  static_cast<void>(fork_handler);
  stop_locked(st, "restart", nullptr);
  try {
    st.opts = opts;
    st.sinks.clear();
    st.alerts_to_stderr = opts.text_log == "off" || opts.text_log.empty();
    if (!st.alerts_to_stderr) {
      if (auto s = open_sink("text_log", opts.text_log, detail::make_text_sink)) { st.sinks.push_back(std::move(s)); }
    }
    if (!opts.jsonl_log.empty()) {
      if (auto s = open_sink("jsonl_log", opts.jsonl_log, detail::make_jsonl_sink)) { st.sinks.push_back(std::move(s)); }
    }
    if (!opts.trace_file.empty()) {
      if (auto s = open_sink("trace_file", opts.trace_file, detail::make_trace_sink)) { st.sinks.push_back(std::move(s)); }
    }
    if (!opts.prometheus_file.empty()) {
      std::string error;
      auto s = detail::make_prometheus_sink(detail::expand_path(opts.prometheus_file),
                                            static_cast<std::int64_t>(opts.prometheus_interval_ms) * ms,
                                            opts.prometheus_job, report_sink_failure, &error);
      if (s != nullptr) {
        st.sinks.push_back(std::move(s));
      } else {
        const std::string line = "[gpuguard] " + error + "; prometheus_file is off\n";
        std::fputs(line.c_str(), stderr);
      }
    }

    // Every slot is allocated and touched here: the maximum bounds that cost (options.hpp).
    const std::uint32_t capacity = std::min(opts.queue_capacity, max_queue_capacity);
    if (st.spare == nullptr || st.spare->capacity() < capacity) {
      st.spare = new queue_type(capacity);  // NOLINT: never freed, see output_state
    } else {
      queued_op stale;
      while (st.spare->try_pop(stale)) {}  // events that raced with the last stop
    }
    st.wake_mask = std::max<std::size_t>(st.spare->capacity() / 4, 1) - 1;
    st.totals = {};
    st.op_index.clear();
    st.op_alerts.clear();
    st.tracks.clear();
    st.threads_seen.clear();
    st.dropped_reported = 0;
    // The memory timeline, when an output writes it (the text and Prometheus outputs do not).
    st.timeline = nullptr;
    const bool wants_timeline = opts.timeline_events != 0 && std::any_of(st.sinks.begin(), st.sinks.end(), [](const auto& s) {
      return s->wants_timeline();
    });
    if (wants_timeline) {
      if (st.timeline_spare == nullptr) {
        st.timeline_spare = new detail::mem_event_queue(timeline_capacity);  // NOLINT: never freed, see output_state
      } else {
        detail::mem_event stale;
        while (st.timeline_spare->try_pop(stale)) {}  // events that raced with the last stop
      }
      detail::mem_step folded;
      for (const int device : detail::active_devices()) { static_cast<void>(detail::take_overflow(device, folded)); }
      st.timeline = st.timeline_spare;
      st.coalescer = std::make_unique<detail::timeline_coalescer>(opts.timeline_events);
    }
    st.queued_base = st.spare->claimed();
    st.dropped.store(0, std::memory_order_relaxed);
    st.written.store(0, std::memory_order_relaxed);
    st.sink_failures.store(0, std::memory_order_relaxed);
    st.alerts.store(0, std::memory_order_relaxed);
    {
      const std::lock_guard<std::mutex> lock(st.wake_mutex);
      st.stop_requested = false;
      st.flush_target = st.spare->consumed();
      st.flushed_through = st.flush_target;
      st.timeline_flush_target = st.timeline != nullptr ? st.timeline->consumed() : 0;
      st.timeline_flushed_through = st.timeline_flush_target;
    }
    queue_type* queue = st.spare;
    // The JSONL log and the Chrome trace write the timeline and each sample's interval peak:
    // those need the live bytes after every event, so the ledger keeps its counters shared.
    if (std::any_of(st.sinks.begin(), st.sinks.end(), [](const auto& s) { return s->wants_timeline(); })) {
      detail::hold_shared_counters(true);
      st.holds_counters = true;
    }
    try {
      st.writer = detail::start_quiet_thread([&st, queue] { writer_main(st, *queue); });
    } catch (...) {
      release_counters(st);
      throw;
    }
    unsigned flags = detail::scope_outputs_running;
    flags |= opts.nvtx ? detail::scope_nvtx : 0U;
    flags |= opts.op_device_query ? detail::scope_device_query : 0U;
    st.queue.store(queue, std::memory_order_release);
    detail::subscribe_mem_events(st.timeline, wake_writer);
    st.flags.store(flags, std::memory_order_release);
    detail::register_exit_report();
  } catch (const std::exception& error) {
    st.sinks.clear();
    const std::string line = std::string("[gpuguard] the outputs could not start: ") + error.what() + "\n";
    std::fputs(line.c_str(), stderr);
  }
}

bool outputs_running() noexcept {
  return (state().flags.load(std::memory_order_acquire) & detail::scope_outputs_running) != 0;
}

void set_alert_callback(alert_callback callback) {
  output_state& st = state();
  const std::lock_guard<std::mutex> lock(st.callback_mutex);
  st.callback = std::move(callback);
}

bool flush_outputs(std::chrono::milliseconds timeout) noexcept {
  output_state& st = state();
  queue_type* queue = st.queue.load(std::memory_order_acquire);
  if (queue == nullptr) { return false; }
  const std::size_t target = queue->claimed();
  // The memory timeline's queue too (the writer's `timeline`, set before the outputs ran).
  const detail::mem_event_queue* timeline = detail::mem_event_subscriber.load(std::memory_order_acquire);
  const std::size_t timeline_target = timeline != nullptr ? timeline->claimed() : 0;
  std::unique_lock<std::mutex> lock(st.wake_mutex);
  st.flush_target = std::max(st.flush_target, target);
  st.timeline_flush_target = std::max(st.timeline_flush_target, timeline_target);
  st.wake.notify_all();
  // The writer moves flushed_through only after it has flushed the sinks.
  const bool done = st.flushed.wait_for(lock, timeout, [&] {
    return st.flushed_through >= target && st.timeline_flushed_through >= timeline_target;
  });
  return done && outputs_running();
}

void stop_outputs(const char* reason) noexcept {
  output_state& st = state();
  const std::lock_guard<std::mutex> control(st.control);
  if (st.writer == nullptr) { return; }
  try {
    const leak_report leaks = collect_leaks(20);
    stop_locked(st, reason, &leaks);
  } catch (...) {
    stop_locked(st, reason, nullptr);
  }
}

output_stats output_statistics() noexcept {
  output_state& st = state();
  output_stats s;
  if (const queue_type* queue = st.queue.load(std::memory_order_acquire)) {
    s.queued = queue->claimed() - st.queued_base;
  }
  s.dropped = st.dropped.load(std::memory_order_relaxed);
  s.written = st.written.load(std::memory_order_relaxed);
  s.sink_failures = st.sink_failures.load(std::memory_order_relaxed);
  s.alerts = st.alerts.load(std::memory_order_relaxed);
  return s;
}

// ---- for scopes and the exit report -------------------------------------------------------------

unsigned detail::scope_flags() noexcept {
  output_state& st = state();
  const unsigned flags = st.flags.load(std::memory_order_acquire);
  if (flags != 0 || st.ever_started.load(std::memory_order_relaxed)) { return flags; }
  if (!st.ever_started.exchange(true)) { start_outputs(process_options()); }
  return st.flags.load(std::memory_order_acquire);
}

void detail::submit(const op_result& op, thread_state& thread) noexcept {
  output_state& st = state();
  queue_type* queue = st.queue.load(std::memory_order_acquire);
  if (queue == nullptr) { return; }
  if (thread.tid == 0) { thread.tid = static_cast<std::int32_t>(::syscall(SYS_gettid)); }
  const bool name_it = !thread.named;
  std::size_t position = 0;
  const bool queued = queue->try_push_with([&](queued_op& item) {
    item.op = op;
    item.tid = thread.tid;
    item.thread_name[0] = '\0';
    if (name_it) { ::pthread_getname_np(::pthread_self(), item.thread_name, sizeof item.thread_name); }
  }, position);
  if (!queued) {
    st.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  thread.named = true;
  if ((position & st.wake_mask) == st.wake_mask) { st.wake.notify_one(); }
}

void detail::stop_outputs_with(const char* reason, const leak_report* leaks) noexcept {
  output_state& st = state();
  const std::lock_guard<std::mutex> control(st.control);
  stop_locked(st, reason, leaks);
}

}  // namespace gpuguard
