// libgpuguard_preload.so: `gpuguard run --track` preloads it into programs that were not changed.
// driver_hooks.cpp wraps the CUDA driver's memory entry points, whoever calls them; this half
// records what they did in gpuguard's ledger, so the program gets the leak report, the outputs and
// the exit paths, and says at exit what the process held and who held it (docs/run.md):
//   - only a process that used the CUDA driver says anything: the shells and helpers a launcher
//     starts stay silent;
//   - what a caching allocator it recognises (PyTorch's) keeps until exit is "held", not "leaked";
//   - beside the ledger: the stream-ordered pools' reserve, memory imported from other processes,
//     and what the driver holds for the process that no call explains (NVML's per-process figure
//     minus the rest: the context, libraries' workspaces), "unattributed";
//   - with GPUGUARD_TRACK_DIR set (gpuguard run does), a record of it in DIR/PID.json, from which the
//     supervisor writes one line per process that used CUDA.
#include "preload.hpp"

#include "util/file.hpp"
#include "util/format.hpp"
#include "util/json_text.hpp"
#include "util/nvml.hpp"
#include "util/program_path.hpp"

#include <gpuguard/core/ledger.hpp>

#include "ledger/deferred_source.hpp"
#include <gpuguard/core/options.hpp>
#include <gpuguard/core/tracking.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <pthread.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <unwind.h>

#define GPUGUARD_INTERPOSE extern "C" __attribute__((visibility("default")))

namespace gpuguard::preload {
namespace {

std::atomic<bool> started{false};
std::atomic<bool> lookups_wrapped{false};
// A child made by fork() inherits the parent's driver and ledger but none of its CUDA use: it
// reports only what it records itself (a DataLoader worker, which must not touch CUDA, says nothing).
std::atomic<bool> forked_child{false};

void on_fork_child() noexcept {
  forked_child.store(true, std::memory_order_relaxed);
  hot.recorded.store(false, std::memory_order_relaxed);
}

// ---- who asked: the first code outside the CUDA runtime, the driver and gpuguard ---------------
// In a PyTorch process, memory is classified by the library its request came from: PyTorch's
// caching allocator (libc10_cuda) keeps its segments until exit, and so do the handles PyTorch
// keeps for the CUDA math and communication libraries (cuBLAS, cuDNN, NCCL, ...), whose
// workspaces they allocate themselves. Both are "held at exit" by their owner, not leaks. A
// request reaches the driver either directly (expandable segments) or through the CUDA runtime,
// so up to a few frames are unwound; only in a process where PyTorch is loaded: other programs
// never pay for it, and a C++ program that never destroys its cuBLAS handle is told it leaked.

// What a code address is, cached by page. 0: not yet known; 1: passed over (the runtime, the
// driver, gpuguard); 2: anything else that is no holder; 3 and up: holders[class - 3].
constexpr std::uint8_t pass_over = 1;
constexpr std::uint8_t no_holder = 2;
constexpr std::uint8_t first_holder = 3;

struct holder_library {
  const char* file_part;  // in the shared object's file name
  const char* name;       // the tag its allocations are recorded under
};
constexpr std::array<holder_library, 10> holders = {{
    {"libc10_cuda", "PyTorch caching allocator"},
    {"libtorch_cuda", "PyTorch (pinned-memory cache, workspaces)"},
    {"libcublasLt", "cuBLASLt (a handle PyTorch keeps)"},
    {"libcublas", "cuBLAS (a handle PyTorch keeps)"},
    {"libcudnn", "cuDNN (a handle PyTorch keeps)"},
    {"libnccl", "NCCL (a communicator PyTorch keeps)"},
    {"libcufft", "cuFFT (a plan cache PyTorch keeps)"},
    {"libcusparse", "cuSPARSE (a handle PyTorch keeps)"},
    {"libcusolver", "cuSOLVER (a handle PyTorch keeps)"},
    {"libcurand", "cuRAND (a generator PyTorch keeps)"},
}};

struct class_cache {
  std::array<std::atomic<std::uintptr_t>, 256> pages{};
  std::array<std::atomic<std::uint8_t>, 256> classes{};
};
class_cache& classes() {
  static class_cache c;
  return c;
}

std::uint8_t classify(std::uintptr_t address) noexcept {
  const std::uintptr_t page = address >> 12U;
  const std::size_t slot = (page ^ (page >> 8U)) & 255U;
  class_cache& c = classes();
  if (c.pages[slot].load(std::memory_order_acquire) == page) { return c.classes[slot].load(std::memory_order_relaxed); }
  Dl_info info{};
  std::uint8_t result = no_holder;
  // NOLINTNEXTLINE(performance-no-int-to-ptr): a return address, kept as an integer for the cache
  if (::dladdr(reinterpret_cast<void*>(address), &info) != 0 && info.dli_fname != nullptr) {
    const char* base = std::strrchr(info.dli_fname, '/');
    base = base == nullptr ? info.dli_fname : base + 1;
    if (std::strncmp(base, "libcuda.", 8) == 0 || std::strncmp(base, "libcudart", 9) == 0 ||
        std::strncmp(base, "libgpuguard", 11) == 0) {
      result = pass_over;
    } else {
      for (std::size_t i = 0; i < holders.size(); ++i) {
        if (std::strstr(base, holders[i].file_part) != nullptr) {
          result = static_cast<std::uint8_t>(first_holder + i);
          break;
        }
      }
    }
  }
  c.classes[slot].store(result, std::memory_order_relaxed);
  c.pages[slot].store(page, std::memory_order_release);
  return result;
}

// Whether PyTorch's CUDA library is loaded: checked again whenever the driver is being looked up
// (a framework loads before it initialises CUDA), not on every allocation.
bool torch_present() noexcept {
  // A plain load first: the exchange writes a cache line every thread reads.
  if (hot.recheck_frameworks.load(std::memory_order_relaxed) &&
      hot.recheck_frameworks.exchange(false, std::memory_order_acq_rel)) {
    hot.torch_loaded.store(::dlopen("libc10_cuda.so", RTLD_NOLOAD | RTLD_LAZY) != nullptr, std::memory_order_relaxed);
    refresh_common();
  }
  return hot.torch_loaded.load(std::memory_order_relaxed);
}

struct unwind_state {
  int frames = 0;
  std::uint8_t found = 0;
};

_Unwind_Reason_Code unwind_step(struct _Unwind_Context* context, void* arg) {
  auto* state = static_cast<unwind_state*>(arg);
  constexpr int max_frames = 16;
  if (++state->frames > max_frames) { return _URC_END_OF_STACK; }
  const std::uintptr_t ip = _Unwind_GetIP(context);
  if (ip == 0) { return _URC_END_OF_STACK; }
  const std::uint8_t c = classify(ip);
  if (c == pass_over) { return _URC_NO_REASON; }
  state->found = c;
  return _URC_END_OF_STACK;
}

std::array<std::atomic<tag_id>, holders.size()> holder_tags{};

tag_id tag_of_holder(std::size_t index) noexcept {
  tag_id tag = holder_tags[index].load(std::memory_order_acquire);
  if (tag == untagged) {
    tag = intern_tag(holders[index].name);
    declare_exit_holder(tag);
    holder_tags[index].store(tag, std::memory_order_release);
  }
  return tag;
}

// The tag an allocation asked for by `caller` is recorded under: a holder's, or none.
tag_id holder_tag(const void* caller) noexcept {
  if (!torch_present()) { return untagged; }
  std::uint8_t c = classify(reinterpret_cast<std::uintptr_t>(caller));
  if (c == pass_over) {
    unwind_state state;
    _Unwind_Backtrace(unwind_step, &state);
    c = state.found;
  }
  return c >= first_holder ? tag_of_holder(c - first_holder) : untagged;
}

// ---- starting and ending ----------------------------------------------------------------------

void exit_report(int status, void* /*unused*/);

// The first sign that this process uses CUDA: gpuguard's reporting starts here, not at load, so a
// process that never touches CUDA (a shell, a launcher's helper) prints and writes nothing.
void start() noexcept {
  if (started.exchange(true, std::memory_order_acq_rel)) { return; }
  try {
    const options& opts = process_options();
    enable_ledger_reporting(opts);
    start_deferring(opts);
  } catch (...) {
    std::fputs("[gpuguard] --track: could not start the report (out of memory?)\n", stderr);
  }
}

// After the first allocation the CUDA runtime (if any) is initialised: registering the exit work
// now makes it run before the runtime's own teardown (handlers run in reverse order).
void after_first_record() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { static_cast<void>(::on_exit(exit_report, nullptr)); });
}

}  // namespace

void note_wrapped_lookup() noexcept {
  if (!hot.recheck_frameworks.load(std::memory_order_relaxed)) {
    hot.recheck_frameworks.store(true, std::memory_order_relaxed);
    refresh_common();
  }
  if (!lookups_wrapped.exchange(true, std::memory_order_relaxed)) { start(); }
}

void record(const void* ptr, std::size_t bytes, int device, cudaStream_t stream, memory_kind kind,
            const void* caller) noexcept {
  if (!hot.recorded.load(std::memory_order_relaxed)) {  // once per process: no shared write per allocation
    start();
    hot.recorded.store(true, std::memory_order_relaxed);
    after_first_record();
  }
  const tag_id holder = holder_tag(caller);
  if (defer({ptr, bytes, stream, device, holder, kind, false})) { return; }
  if (holder == untagged) {
    record_allocation({ptr, bytes, device, stream, kind});
  } else {
    record_allocation_as({ptr, bytes, device, stream, kind}, holder, ledger_thread_id());
  }
}

void forget(const void* ptr, int device, cudaStream_t stream) noexcept {
  if (defer({ptr, 0, stream, device, untagged, memory_kind::device, true})) { return; }
  static_cast<void>(record_interposed_free(ptr, device, stream));
}

namespace {

// ---- NVML's per-process figure, for what no call explains --------------------------------------

// What NVML says this process uses on CUDA device `device`; -1 when it cannot say.
long long nvml_used_here(int device) noexcept {
  std::array<char, 32> bus{};
  if (!device_bus_id(device, bus.data(), static_cast<int>(bus.size()))) { return -1; }
  return util::nvml_process_used(util::nvml_device(bus.data()), static_cast<int>(::getpid()));
}

// ---- the per-process summary --------------------------------------------------------------------

struct device_figures {
  int device = 0;
  counters ledger;
  pool_figures pools;
  long long nvml_used = -1;     // -1: NVML cannot say
  long long unattributed = 0;   // nvml_used minus the ledger's live bytes and the pools' unused reserve
};

// Every device this process allocated on, whose pools it used, or that NVML says it uses.
std::vector<device_figures> gather() {
  std::vector<device_figures> all;
  const int count = std::min(device_count(), 64);
  for (int d = 0; d < count; ++d) {
    device_figures f;
    f.device = d;
    f.ledger = device_counters(d);
    f.pools = pools_of(d);
    f.nvml_used = nvml_used_here(d);
    if (f.ledger.allocations == 0 && f.nvml_used <= 0 && !f.pools.known) { continue; }
    const long long slack = f.pools.reserved > f.pools.used ? static_cast<long long>(f.pools.reserved - f.pools.used) : 0;
    f.unattributed = f.nvml_used - static_cast<long long>(f.ledger.current_bytes) - slack;
    all.push_back(f);
  }
  return all;
}

std::string figures_json(const std::vector<device_figures>& devices, bool at_exit, const leak_report* leaks,
                         int exit_status) {
  using detail::append_field;
  std::string out = "{\"schema\":\"gpuguard.track\",\"version\":1";
  append_field(out, "pid", std::int64_t{::getpid()});
  detail::append_string_field(out, "program", detail::program_path());
  append_field(out, "at_exit", at_exit);
  if (at_exit) { append_field(out, "exit_status", std::int64_t{exit_status}); }
  append_field(out, "wrapped_lookups", wrapped_lookups());
  append_field(out, "unidentified_lookups", unidentified_lookups());
  append_field(out, "recorded", hot.recorded.load(std::memory_order_relaxed));
  detail::append_string_field(out, "recording", recording_mode());
  append_field(out, "untracked_frees", untracked_frees());
  if (leaks != nullptr) {
    append_field(out, "leaked_bytes", leaks->bytes);
    append_field(out, "leaked_count", leaks->count);
    append_field(out, "held_bytes", leaks->held_bytes);
    append_field(out, "held_count", leaks->held_count);
  }
  // What each holder keeps now (all devices).
  out += ",\"holders\":[";
  bool first_held = true;
  for (const auto& [name, figures] : snapshot(false).tags) {
    if (name.empty() || !is_exit_holder(intern_tag(name))) { continue; }
    out += first_held ? "{\"holder\":" : ",{\"holder\":";
    first_held = false;
    detail::append_json_string(out, name);
    append_field(out, "live_bytes", figures.current_bytes);
    out += '}';
  }
  out += ']';
  const import_figures imported = imports();
  append_field(out, "imported_bytes", imported.bytes);
  append_field(out, "imported_mappings", imported.mappings);
  append_field(out, "imported_handles", imported.handles);
  const vmm_figures physical = vmm();
  append_field(out, "vmm_handles", physical.handles);
  append_field(out, "vmm_created_bytes", physical.created_bytes);
  append_field(out, "vmm_mapped_bytes", physical.mapped_bytes);
  out += ",\"devices\":[";
  bool first = true;
  for (const device_figures& f : devices) {
    out += first ? "{\"device\":" : ",{\"device\":";
    first = false;
    detail::append_int(out, f.device);
    append_field(out, "live_bytes", f.ledger.current_bytes);
    append_field(out, "peak_bytes", f.ledger.peak_bytes);
    append_field(out, "allocations", f.ledger.allocations);
    append_field(out, "frees", f.ledger.frees);
    append_field(out, "pool_reserved_bytes", f.pools.reserved);
    append_field(out, "pool_used_bytes", f.pools.used);
    if (f.nvml_used >= 0) {
      append_field(out, "nvml_used_bytes", f.nvml_used);
      append_field(out, "unattributed_bytes", f.unattributed);
    }
    out += '}';
  }
  out += "]}";
  return out;
}

void write_record(const std::string& json) {
  const char* dir = std::getenv("GPUGUARD_TRACK_DIR");
  if (dir == nullptr || *dir == '\0') { return; }
  // No message on failure: `gpuguard run --track` says which process left no record.
  static_cast<void>(detail::write_file_atomically(std::string(dir) + "/" + std::to_string(::getpid()) + ".json", json, nullptr));
}

// A size as every report spells it; the unattributed rest may be negative.
std::string size_text(long long bytes) {
  return bytes < 0 ? detail::format_signed_bytes(bytes) : detail::format_bytes(static_cast<std::size_t>(bytes));
}

// One line per device: what the ledger holds, the pools' reserve, and what NVML adds.
void print_device_lines(const std::vector<device_figures>& devices) {
  for (const device_figures& f : devices) {
    std::string line = "[gpuguard] --track: device " + std::to_string(f.device) + ": " +
                       size_text(static_cast<long long>(f.ledger.current_bytes)) + " live at exit (peak " +
                       size_text(static_cast<long long>(f.ledger.peak_bytes)) + ")";
    if (f.pools.known) {
      line += "; stream-ordered pools reserve " + size_text(static_cast<long long>(f.pools.reserved)) + " (" +
              size_text(static_cast<long long>(f.pools.used)) + " of it in use)";
    }
    if (f.nvml_used >= 0) {
      line += "; the driver reports " + size_text(f.nvml_used) + " for this process, " + size_text(f.unattributed) +
              " of it unattributed (context, library workspaces)";
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  const import_figures imported = imports();
  if (imported.mappings != 0 || imported.handles != 0) {
    std::fprintf(stderr, "[gpuguard] --track: imported from other processes (not this process's): %s in %" PRIu64
                 " IPC mapping(s), %" PRIu64 " shareable handle(s)\n",
                 size_text(static_cast<long long>(imported.bytes)).c_str(), imported.mappings, imported.handles);
  }
}

void exit_report(int status, void* /*unused*/) {
  try {
    // In a forked child that recorded nothing, all of this is the parent's.
    if (hot.recorded.load(std::memory_order_relaxed)) {
      const std::vector<device_figures> devices = gather();
      const leak_report leaks = collect_leaks(0);
      write_record(figures_json(devices, true, &leaks, status));
      print_device_lines(devices);
    }
  } catch (...) {
    std::fputs("[gpuguard] --track: the per-process record could not be made (out of memory?)\n", stderr);
  }
  run_exit_report(status);
}

// A process that loaded the driver but whose allocations gpuguard could not see says so; a
// process that never loaded it says nothing.
void say_what_was_not_seen() {
  if (hot.recorded.load(std::memory_order_relaxed)) { return; }
  const bool driver_loaded = ::dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY) != nullptr;
  if (!driver_loaded || forked_child.load(std::memory_order_relaxed)) { return; }
  if (!lookups_wrapped.load(std::memory_order_relaxed)) {
    std::fputs("[gpuguard] --track: this process loaded the CUDA driver, but none of its memory entry points "
               "was obtained through gpuguard, so its allocations were not seen (docs/run.md)\n", stderr);
    return;
  }
  std::fputs("[gpuguard] --track: this process used the CUDA driver and allocated no memory through it\n", stderr);
  write_record(figures_json(gather(), true, nullptr, -1));
}

__attribute__((constructor)) void on_load() {
  static_cast<void>(std::atexit(say_what_was_not_seen));
  static_cast<void>(::pthread_atfork(nullptr, nullptr, on_fork_child));
}

}  // namespace
}  // namespace gpuguard::preload

// For tests and tools in the tracked process (ctypes, dlsym): the current figures as JSON
// (schema gpuguard.track, as in the exit record), copied into `buffer` if they fit. Returns the
// length (without the terminating NUL), or -1 if they could not be made.
GPUGUARD_INTERPOSE long gpuguard_track_figures(char* buffer, unsigned long size) {
  try {
    const std::string json = gpuguard::preload::figures_json(gpuguard::preload::gather(), false, nullptr, 0);
    if (buffer != nullptr && size > json.size()) { std::memcpy(buffer, json.c_str(), json.size() + 1); }
    return static_cast<long>(json.size());
  } catch (...) {
    return -1;
  }
}
