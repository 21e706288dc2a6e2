// Enabling tracking under the guards, and the report at exit.
#include <gpuguard/tracking.hpp>

#include <gpuguard/cleanup.hpp>
#include <gpuguard/current_resource.hpp>
#include <gpuguard/hooks.hpp>
#include <gpuguard/device.hpp>
#include <gpuguard/host_memory_resource.hpp>
#include <gpuguard/outputs.hpp>
#include <gpuguard/tracking_resource.hpp>

#include "exit_paths.hpp"
#include "format.hpp"
#include "outputs_internal.hpp"
#include "quiet_thread.hpp"
#include "report_json.hpp"
#include "ledger/stacks.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include <pthread.h>
#include <unistd.h>

namespace gpuguard {

namespace {

struct tracking_state {
  std::mutex mutex;
  bool enabled = false;
  bool reporting = false;  // enable_ledger_reporting: another source feeds the ledger
  bool exit_handler_registered = false;
  options opts;
  // What was current before enable_tracking, to put back on disable (slot -1: host fallback).
  std::vector<std::pair<int, memory_resource*>> previous_devices;
  memory_resource* previous_pinned = nullptr;
  bool pinned_replaced = false;
};

tracking_state& tracking() {
  static auto* s = new tracking_state();  // the exit handler reads it after statics are gone
  return *s;
}

std::atomic<bool> exit_report_done{false};

// True in a child made by fork(): the exit report, like the parent's cleanups and children, is
// the parent's. A forked worker that exits must not print the parent's report again, nor rewrite
// its leak_json, nor end with its leak_exitcode.
std::atomic<bool> forked_child{false};

void note_forked_child() noexcept { forked_child.store(true, std::memory_order_relaxed); }

// on_exit, not atexit: the handler learns the status the process is ending with, which the
// cleanup_timeout watchdog keeps if it has to end the process itself. Both lists are one in
// glibc, so the order rule of register_exit_report holds.
void exit_handler(int status, void* /*unused*/) { run_exit_report(status); }

}  // namespace

void detail::register_exit_report() noexcept {
  static const bool fork_handler = ::pthread_atfork(nullptr, nullptr, note_forked_child) == 0;
  static_cast<void>(fork_handler);
  if (!exit_report_done.load(std::memory_order_relaxed)) { static_cast<void>(::on_exit(exit_handler, nullptr)); }
}

namespace {

// The resources made here are never freed: buffers hold pointers to them and may free through
// them at any time, up to and during exit.
template <class T, class... Args>
T* make_forever(Args&&... args) {
  return new T(std::forward<Args>(args)...);  // NOLINT: deliberate, see above
}

}  // namespace

void enable_tracking(const options& opts) {
  tracking_state& st = tracking();
  const std::lock_guard<std::mutex> lock(st.mutex);
  if (st.enabled) { return; }
  st.opts = opts;
  configure_ledger(opts);

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);  // also initialises the runtime
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    if (!detail::is_no_device_status(status)) {
      detail::throw_cuda_error(status, "gpuguard::enable_tracking: cudaGetDeviceCount");
    }
    count = 0;
  }
  count = std::min(count, max_devices);
  device_mode mode = opts.device;
  if (mode == device_mode::automatic) { mode = count > 0 ? device_mode::cuda : device_mode::host; }
  if (mode != device_mode::host && count == 0) {
    std::fprintf(stderr, "[gpuguard] device=%s asked for, but no CUDA device is usable: "
                 "tracking host memory instead (device=host)\n", to_string(opts.device));
    mode = device_mode::host;
  }

  st.previous_devices.clear();
  if (mode == device_mode::host) {
    const std::size_t capacity = opts.host_capacity == 0 ? host_memory_resource::unlimited : opts.host_capacity;
    auto* tracker = make_forever<tracking_resource>(*make_forever<host_memory_resource>(capacity),
                                                    host_device_id);
    std::fprintf(stderr, "[gpuguard] tracking host memory (device=host%s): device buffers are "
                 "allocated in host memory\n", opts.device == device_mode::automatic ? ", no CUDA device found" : "");
    st.previous_devices.emplace_back(host_device_id, set_current_resource(tracker, host_device_id));
    for (int d = 0; d < count; ++d) {
      st.previous_devices.emplace_back(d, set_current_resource(tracker, d));
    }
  } else {
    for (int d = 0; d < count; ++d) {
      memory_resource* upstream = mode == device_mode::async
                                      ? make_forever<cuda_async_memory_resource>()
                                      : get_current_resource(d);
      auto* tracker = make_forever<tracking_resource>(*upstream, d);
      st.previous_devices.emplace_back(d, set_current_resource(tracker, d));
    }
    auto* pinned = make_forever<tracking_resource>(*get_current_pinned_resource(), host_device_id);
    st.previous_pinned = set_current_pinned_resource(pinned);
    st.pinned_replaced = true;
  }
  if (!st.exit_handler_registered) {
    // Registered after the CUDA runtime initialised (cudaGetDeviceCount above), so it runs first
    // at exit, while device memory can still be inspected and freed.
    detail::register_exit_report();
    st.exit_handler_registered = true;
  }
  st.enabled = true;
  start_outputs(opts);
  if (opts.hooks) { install_hooks(opts); }
}

void enable_ledger_reporting(const options& opts) {
  tracking_state& st = tracking();
  {
    const std::lock_guard<std::mutex> lock(st.mutex);
    if (st.enabled || st.reporting) { return; }
    st.opts = opts;
    st.reporting = true;
  }
  configure_ledger(opts);
  start_outputs(opts);
  if (opts.hooks) { install_hooks(opts); }
  detail::register_exit_report();
}

void disable_tracking() noexcept {
  tracking_state& st = tracking();
  const std::lock_guard<std::mutex> lock(st.mutex);
  if (!st.enabled) { return; }
  for (const auto& [device, resource] : st.previous_devices) { set_current_resource(resource, device); }
  if (st.pinned_replaced) { set_current_pinned_resource(st.previous_pinned); }
  st.previous_devices.clear();
  st.pinned_replaced = false;
  st.enabled = false;
}

bool tracking_enabled() noexcept {
  tracking_state& st = tracking();
  const std::lock_guard<std::mutex> lock(st.mutex);
  return st.enabled;
}

namespace {

// One bit per tag id: set by declare_exit_holder, read when the report is made.
std::array<std::atomic<std::uint64_t>, (max_tags + 63) / 64> exit_holders{};

}  // namespace

void declare_exit_holder(tag_id tag) noexcept {
  if (tag >= max_tags) { return; }
  exit_holders[tag / 64].fetch_or(std::uint64_t{1} << (tag % 64), std::memory_order_relaxed);
}

bool is_exit_holder(tag_id tag) noexcept {
  return tag < max_tags && (exit_holders[tag / 64].load(std::memory_order_relaxed) >> (tag % 64) & 1U) != 0;
}

leak_report collect_leaks(std::size_t max_resolved) {
  ledger_snapshot snap = snapshot(true);
  leak_report report;
  report.misuse = snap.misuse;
  report.devices = std::move(snap.devices);
  std::map<std::tuple<site_id, int, tag_id>, std::size_t> index;
  for (const allocation_record& record : snap.live) {
    const bool held = is_exit_holder(record.tag);
    (held ? report.held_bytes : report.bytes) += record.bytes;
    ++(held ? report.held_count : report.count);
    std::vector<leak_site>& group = held ? report.held : report.sites;
    const auto key = std::make_tuple(record.site, record.device, record.tag);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, group.size()).first;
      leak_site site;
      site.site = record.site;
      site.device = record.device;
      site.tag = tag_name(record.tag);
      group.push_back(std::move(site));
    }
    leak_site& site = group[it->second];
    site.bytes += record.bytes;
    ++site.count;
  }
  const auto largest_first = [](const leak_site& a, const leak_site& b) { return a.bytes > b.bytes; };
  std::stable_sort(report.sites.begin(), report.sites.end(), largest_first);
  std::stable_sort(report.held.begin(), report.held.end(), largest_first);
  for (std::size_t i = 0; i < report.sites.size() && i < max_resolved; ++i) {
    report.sites[i].frames = resolve_site(report.sites[i].site);
  }
  detail::merge_sites_by_location(report.sites);
  for (leak_site& site : report.held) { site.raw_sites.assign(1, site.site); }
  return report;
}

std::string detail::location_key(const std::vector<frame_info>& frames) {
  std::string key;
  for (const frame_info& frame : frames) {
    if (frame.function.empty() && frame.file.empty()) { return ""; }
    key += frame.function + '\n' + frame.file + ':' + std::to_string(frame.line) + '\n';
  }
  return key;
}

void detail::merge_sites_by_location(std::vector<leak_site>& sites) {
  // A stack with no resolved frame, or a frame known only by its address, keeps its raw id apart.
  std::map<std::tuple<std::string, int, std::string>, std::size_t> first_of;
  std::vector<leak_site> merged;
  merged.reserve(sites.size());
  for (leak_site& site : sites) {
    std::string key = location_key(site.frames);
    if (key.empty()) { key = "#" + std::to_string(site.site); }
    const auto [it, inserted] = first_of.try_emplace(std::make_tuple(std::move(key), site.device, site.tag), merged.size());
    if (inserted) {
      site.raw_sites.assign(1, site.site);
      merged.push_back(std::move(site));
      continue;
    }
    leak_site& into = merged[it->second];
    into.bytes += site.bytes;
    into.count += site.count;
    into.raw_sites.push_back(site.site);
  }
  std::stable_sort(merged.begin(), merged.end(), [](const leak_site& a, const leak_site& b) { return a.bytes > b.bytes; });
  sites = std::move(merged);
}

namespace {
std::string device_name(int device) {
  return device == host_device_id ? std::string("host") : "device " + std::to_string(device);
}
}  // namespace

namespace {

// The sites of a report, largest first, each with its frames.
void write_sites(std::FILE* out, const leak_report& report, std::size_t max_sites) {
  std::size_t shown = 0;
  for (const leak_site& site : report.sites) {
    if (shown == max_sites) {
      std::fprintf(out, "[gpuguard] ... %zu more site(s) not shown (leak_sites=%zu)\n",
                   report.sites.size() - shown, max_sites);
      break;
    }
    ++shown;
    std::fprintf(out, "[gpuguard] #%zu %s in %llu allocation%s on %s%s%s%s\n", shown,
                 detail::format_bytes(site.bytes).c_str(),
                 static_cast<unsigned long long>(site.count), site.count == 1 ? "" : "s",
                 device_name(site.device).c_str(), site.tag.empty() ? "" : " (tag \"",
                 site.tag.c_str(), site.tag.empty() ? "" : "\")");
    if (site.site == no_site) {
      std::fprintf(out, "[gpuguard]     (no stack: run with GPUGUARD_OPTIONS=stacks=all to see where)\n");
    }
    int n = 0;
    for (const frame_info& frame : site.frames) {
      std::fprintf(out, "[gpuguard]     #%d %s", n++, frame.function.empty() ? "??" : frame.function.c_str());
      if (!frame.file.empty()) { std::fprintf(out, " at %s:%zu", frame.file.c_str(), frame.line); }
      std::fputc('\n', out);
    }
  }
}

}  // namespace

void report_out_of_memory(const out_of_memory_info& info) noexcept {
  try {
    const op_result* op = current_op();
    const counters on_device = device_counters(info.device);
    std::fprintf(stderr, "[gpuguard] OUT OF MEMORY: %s could not get %s on device %d (%s free of %s)%s%s%s\n",
                 info.source != nullptr ? info.source : "an allocation",
                 detail::format_bytes(info.requested).c_str(), info.device,
                 detail::format_bytes(info.free_bytes).c_str(), detail::format_bytes(info.total_bytes).c_str(),
                 op != nullptr ? " in operation \"" : "", op != nullptr ? op->name : "", op != nullptr ? "\"" : "");
    std::fprintf(stderr, "[gpuguard] live on device %d: %s in %llu allocations (peak %s); largest sites:\n",
                 info.device, detail::format_bytes(on_device.current_bytes).c_str(),
                 static_cast<unsigned long long>(on_device.live_count()),
                 detail::format_bytes(on_device.peak_bytes).c_str());
    constexpr std::size_t sites_shown = 5;
    leak_report live = collect_leaks(sites_shown);
    // Here a cache's segments count as much as anything else: they are what fills the device.
    if (!live.held.empty()) {
      live.sites.insert(live.sites.end(), live.held.begin(), live.held.end());
      std::stable_sort(live.sites.begin(), live.sites.end(),
                       [](const leak_site& a, const leak_site& b) { return a.bytes > b.bytes; });
      for (std::size_t i = 0; i < live.sites.size() && i < sites_shown; ++i) {
        if (live.sites[i].frames.empty()) { live.sites[i].frames = resolve_site(live.sites[i].site); }
      }
    }
    live.sites.erase(std::remove_if(live.sites.begin(), live.sites.end(),
                                    [&](const leak_site& s) { return s.device != info.device; }),
                     live.sites.end());
    write_sites(stderr, live, sites_shown);
  } catch (...) {
    std::fputs("[gpuguard] out of memory: the report of what was live could not be made\n", stderr);
  }
}

void write_leak_text(std::FILE* out, const leak_report& report, std::size_t max_sites) {
  // What a cache keeps until the process ends, by holder and device: said, but not a leak.
  std::map<std::pair<std::string, int>, std::pair<std::size_t, std::uint64_t>> held;
  for (const leak_site& site : report.held) {
    auto& [bytes, count] = held[{site.tag, site.device}];
    bytes += site.bytes;
    count += site.count;
  }
  for (const auto& [who, amount] : held) {
    std::fprintf(out, "[gpuguard] held at exit by %s: %s in %llu allocation%s on %s (kept by it until the "
                 "process ends, when the driver frees it: not a leak)\n",
                 who.first.c_str(), detail::format_bytes(amount.first).c_str(),
                 static_cast<unsigned long long>(amount.second), amount.second == 1 ? "" : "s",
                 device_name(who.second).c_str());
  }
  if (report.count == 0) {
    std::string peaks;
    for (const auto& [device, c] : report.devices) {
      peaks += ", peak " + detail::format_bytes(c.peak_bytes) + " on " + device_name(device);
    }
    std::uint64_t allocations = 0;
    for (const auto& entry : report.devices) { allocations += entry.second.allocations; }
    std::fprintf(out, "[gpuguard] no leaks: all %llu tracked allocations were freed%s%s\n",
                 static_cast<unsigned long long>(allocations - report.held_count),
                 report.held_count == 0 ? "" : " (the held ones aside)", peaks.c_str());
    return;
  }
  std::fprintf(out, "[gpuguard] LEAK: %s in %llu allocation%s still live, from %zu site%s\n",
               detail::format_bytes(report.bytes).c_str(),
               static_cast<unsigned long long>(report.count), report.count == 1 ? "" : "s",
               report.sites.size(), report.sites.size() == 1 ? "" : "s");
  write_sites(out, report, max_sites);
  const misuse_counts& m = report.misuse;
  if (m.total() != 0) {
    std::fprintf(out, "[gpuguard] misuse: %llu unknown-pointer frees, %llu double frees, "
                 "%llu wrong-size frees, %llu wrong-device frees\n",
                 static_cast<unsigned long long>(m.unknown_pointer),
                 static_cast<unsigned long long>(m.double_free),
                 static_cast<unsigned long long>(m.wrong_size),
                 static_cast<unsigned long long>(m.wrong_device));
  }
}

bool write_leak_json(const std::string& path, const leak_report& report, std::string* error) {
  std::string json = "{\"schema\":\"gpuguard.leaks\",\"version\":1,\"pid\":";
  detail::append_int(json, ::getpid());
  json += ",\"stack_backend\":" + detail::json_string(detail::stack_backend());
  json += ",\"total_bytes\":";
  detail::append_uint(json, report.bytes);
  json += ",\"total_count\":";
  detail::append_uint(json, report.count);
  json += ",\"devices\":";
  detail::append_device_counters(json, report.devices);
  json += ",\"sites\":";
  detail::append_leak_sites(json, report.sites);
  json += ",\"held_bytes\":";
  detail::append_uint(json, report.held_bytes);
  json += ",\"held_count\":";
  detail::append_uint(json, report.held_count);
  json += ",\"held\":";
  detail::append_leak_sites(json, report.held);
  json += ",\"misuse\":";
  detail::append_misuse(json, report.misuse);
  json += "}\n";
  std::string failure = detail::write_file_atomically(path, json);
  if (failure.empty()) { return true; }
  if (error != nullptr) { *error = std::move(failure); }
  return false;
}

void run_exit_report(int exit_status) noexcept { detail::finish_run("exit", true, 0, exit_status); }

bool detail::run_finished() noexcept { return exit_report_done.load(std::memory_order_acquire); }

namespace {

// Ends the process when the end of the run (cleanups, children, report) takes longer than
// cleanup_timeout: one stuck cleanup must not keep the process, and its GPU memory, alive for
// ever. It says which cleanup was running, then ends the process as it was going to end: by the
// signal, or with the exit status. It writes with write(2) and ends with _exit: the stuck thread
// may hold stdio's locks.
class exit_watchdog {
 public:
  exit_watchdog(std::uint32_t seconds, int end_signal, int exit_status) noexcept {
    if (seconds == 0) { return; }
    try {
      thread_ = detail::start_quiet_thread([this, seconds, end_signal, exit_status] {
        watch(seconds, end_signal, exit_status);
      });
    } catch (...) {  // NOLINT(bugprone-empty-catch): no thread, no watchdog; the exit goes on
    }
  }
  exit_watchdog(const exit_watchdog&) = delete;
  exit_watchdog& operator=(const exit_watchdog&) = delete;
  exit_watchdog(exit_watchdog&&) = delete;
  exit_watchdog& operator=(exit_watchdog&&) = delete;
  ~exit_watchdog() {
    if (thread_ == nullptr) { return; }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_->join();
    delete thread_;
  }

 private:
  void watch(std::uint32_t seconds, int end_signal, int exit_status) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) { return; }
    }
    char name[128];
    detail::running_cleanup_name(name, sizeof name);
    const int status = exit_status >= 0 ? (exit_status & 0xFF) : EXIT_FAILURE;
    char ending[64];
    if (end_signal != 0) {
      std::snprintf(ending, sizeof ending, "by signal %d", end_signal);
    } else {
      std::snprintf(ending, sizeof ending, "with status %d", status);
    }
    char message[384];
    int length = 0;
    if (name[0] != '\0') {
      length = std::snprintf(message, sizeof message, "[gpuguard] cleanup '%s' did not finish within "
                             "cleanup_timeout=%u s: ending the process %s\n", name, seconds, ending);
    } else {
      length = std::snprintf(message, sizeof message, "[gpuguard] the exit work (cleanups, leak report, "
                             "outputs) did not finish within cleanup_timeout=%u s: ending the process %s\n",
                             seconds, ending);
    }
    if (length > 0) {
      ssize_t ignored = ::write(STDERR_FILENO, message, std::min<std::size_t>(static_cast<std::size_t>(length), sizeof message - 1));
      static_cast<void>(ignored);
    }
    if (end_signal != 0) { detail::die_by_signal(end_signal); }
    ::_exit(status);
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread* thread_ = nullptr;
};

}  // namespace

void detail::finish_run(const char* reason, bool normal_exit, int end_signal, int exit_status) noexcept {
  if (exit_report_done.exchange(true)) { return; }
  bool enabled = false;
  options opts;
  try {
    opts = [&enabled] {
      tracking_state& st = tracking();
      const std::lock_guard<std::mutex> lock(st.mutex);
      enabled = st.enabled || st.reporting;
      return enabled ? st.opts : process_options();
    }();
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: the defaults do
  }
  // In a forked child only its own cleanups and children are left (the parent's were forgotten
  // at the fork), and the leak report is the parent's.
  const bool report_leaks = enabled && !forked_child.load(std::memory_order_relaxed);
  const exit_watchdog watchdog(opts.cleanup_timeout, end_signal, exit_status);
  // Cleanups first: what they free is then not reported as leaked.
  run_cleanups(reason);
  end_child_groups(2000);
  if (normal_exit) { discard_unused_crash_file(); }
  try {
    // Scopes alone (no tracking) still get their log's end lines, but no leak report on stderr.
    if (!report_leaks && !outputs_running()) { return; }
    std::fflush(stdout);  // the program's own output first, then the report
    const leak_report report = collect_leaks(opts.leak_sites);
    detail::stop_outputs_with(reason, &report);
    if (!report_leaks) { return; }
    if (opts.leak_report) { write_leak_text(stderr, report, opts.leak_sites); }
    if (!opts.leak_json.empty()) {
      std::string error;
      if (!write_leak_json(opts.leak_json, report, &error)) {
        std::fprintf(stderr, "[gpuguard] leak_json: %s\n", error.c_str());
      }
    }
    if (normal_exit && report.count != 0 && opts.leak_exitcode != 0) {
      std::fflush(nullptr);
      ::_exit(opts.leak_exitcode);
    }
  } catch (...) {
    std::fputs("[gpuguard] the exit report failed (out of memory?)\n", stderr);
  }
}

}  // namespace gpuguard
