// gpuguard._native, the Python package's compiled part (python/gpuguard/__init__.py wraps it):
// operation scopes that are the core's own op_scope, so a Python scope goes to the same outputs as
// a C++ one (text line, JSONL, trace, Prometheus), and the ledger's counters.
//
// The module links the core by its soname, libgpuguard.so.0: under `gpuguard run --track` it is
// the library the interposer loaded, so the figures are the interposer's (docs/python.md).
//
// Every entry point runs with the GIL held, which is what keeps an `op`'s list of open scopes
// consistent between threads.
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/core/options.hpp>
#include <gpuguard/core/test_window.hpp>
#include <gpuguard/core/tracking.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace {

// ---- PyTorch's figures -----------------------------------------------------------------------
// python/gpuguard/_torch.py: ready() says whether PyTorch is imported and its CUDA state is up;
// memory(device) gives (allocated, reserved) bytes of its caching allocator, or None. Set once at
// import and kept for the process, as the probe that calls them is.
PyObject* torch_ready = nullptr;
PyObject* torch_memory = nullptr;
PyObject* torch_name = nullptr;  // "torch", interned
bool torch_probe_installed = false;

// The framework probe of every scope once PyTorch's CUDA state is up. A scope made on a thread
// that does not hold the GIL (C++ code of the same process) gets no figures rather than wait for
// it. Any Python error is dropped, and an error already set is kept.
bool torch_probe(int device, gpuguard::framework_memory& out) noexcept {
  if (torch_memory == nullptr || PyGILState_Check() == 0) { return false; }
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  bool answered = false;
  PyObject* figures = PyObject_CallFunction(torch_memory, "i", device);
  if (figures != nullptr && PyTuple_Check(figures) && PyTuple_GET_SIZE(figures) == 2) {
    const unsigned long long allocated = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(figures, 0));
    const unsigned long long reserved = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(figures, 1));
    if (PyErr_Occurred() == nullptr) {
      out.allocated = allocated;
      out.reserved = reserved;
      answered = true;
    }
  }
  Py_XDECREF(figures);
  PyErr_Clear();
  PyErr_Restore(type, value, traceback);
  return answered;
}

// Installs the probe the first time a scope starts after PyTorch's CUDA state came up: before,
// PyTorch holds no device memory, and a probe would have every scope ask the CUDA runtime for its
// current device (op_scope does, for the probe), which initialises it in a CPU-only job.
void install_torch_probe_when_ready() {
  if (torch_probe_installed || torch_ready == nullptr) { return; }
  PyObject* torch = PyImport_GetModule(torch_name);  // imported by the program, never by us
  if (torch == nullptr) {
    PyErr_Clear();
    return;
  }
  Py_DECREF(torch);
  PyObject* ready = PyObject_CallNoArgs(torch_ready);
  const bool is_ready = ready != nullptr && PyObject_IsTrue(ready) == 1;
  Py_XDECREF(ready);
  PyErr_Clear();
  if (is_ready) {
    gpuguard::set_framework_probe(torch_probe, "torch");
    torch_probe_installed = true;
  }
}

void set_torch_readers(nb::object ready, nb::object memory) {
  if (torch_ready != nullptr) { return; }  // once, at import: the probe may hold the old ones
  torch_name = PyUnicode_InternFromString("torch");
  torch_ready = ready.release().ptr();
  torch_memory = memory.release().ptr();
}

// ---- scopes ----------------------------------------------------------------------------------

// op_scope marks a scope that ends while a C++ exception unwinds through it. A Python exception
// is none, so a scope that a Python exception left is ended from a destructor during the
// unwinding of one thrown for that purpose: the library's own rule, not a copy of it.
struct python_exception {};

const gpuguard::op_result& end_marked_as_raised(gpuguard::op_scope& scope) noexcept {
  const gpuguard::op_result* result = nullptr;
  struct ender {
    gpuguard::op_scope& scope;
    const gpuguard::op_result*& result;
    ender(const ender&) = delete;
    ender& operator=(const ender&) = delete;
    ender(ender&&) = delete;
    ender& operator=(ender&&) = delete;
    ~ender() { result = &scope.end(); }
  };
  try {
    ender end_while_unwinding{scope, result};
    throw python_exception{};
  } catch (const python_exception&) {
  }
  return *result;
}

nb::dict to_dict(const gpuguard::op_result& r) {
  nb::dict out;
  out["name"] = std::string(r.name_view());
  out["start_ns"] = r.start_ns;
  out["duration_ns"] = r.duration_ns;
  out["alloc_bytes"] = r.alloc_bytes;
  out["free_bytes"] = r.free_bytes;
  out["net_bytes"] = r.net_bytes;
  out["peak_bytes"] = r.peak_bytes;
  out["allocs"] = r.allocs;
  out["frees"] = r.frees;
  out["thread"] = r.thread;
  out["depth"] = r.depth;
  out["exception"] = r.exception;
  if (r.device_queried || r.framework != nullptr) { out["device"] = r.device; }
  if (r.device_queried) {
    out["used_before"] = r.used_before;
    out["used_after"] = r.used_after;
    if (r.pool_queried) {
      out["pool_reserved_delta"] = r.pool_reserved_delta;
      out["pool_used_delta"] = r.pool_used_delta;
    }
  }
  if (r.framework != nullptr) {
    out["framework"] = r.framework;
    out["framework_allocated_delta"] = r.framework_allocated_delta;
    out["framework_reserved_delta"] = r.framework_reserved_delta;
  }
  return out;
}

// A scope whose exit came while a scope opened inside it was still open (a generator suspended
// inside its own `with`): ended when that one has ended, so that the library's stack of scopes
// on the thread stays in order. Those still waiting when their thread ends are left unended (the
// library's state of that thread may be gone by then).
struct deferred_end {
  std::unique_ptr<gpuguard::op_scope> scope;
  bool raised = false;
};
struct deferred_ends {
  std::vector<deferred_end> waiting;
  deferred_ends() = default;
  deferred_ends(const deferred_ends&) = delete;
  deferred_ends& operator=(const deferred_ends&) = delete;
  deferred_ends(deferred_ends&&) = delete;
  deferred_ends& operator=(deferred_ends&&) = delete;
  ~deferred_ends() {
    for (deferred_end& end : waiting) { static_cast<void>(end.scope.release()); }
  }
};
thread_local deferred_ends this_thread_deferred;

const gpuguard::op_result& end_scope(gpuguard::op_scope& scope, bool raised) {
  return raised ? end_marked_as_raised(scope) : scope.end();
}

// After a scope ended: the waiting scopes that are now innermost end, innermost first.
void end_waiting_scopes() {
  std::vector<deferred_end>& waiting = this_thread_deferred.waiting;
  for (;;) {
    const gpuguard::op_result* innermost = gpuguard::current_op();
    const auto next = std::find_if(waiting.begin(), waiting.end(),
                                   [innermost](const deferred_end& e) { return &e.scope->result() == innermost; });
    if (innermost == nullptr || next == waiting.end()) { return; }
    const deferred_end end = std::move(*next);
    waiting.erase(next);
    static_cast<void>(end_scope(*end.scope, end.raised));
  }
}

// One named operation, entered any number of times, nested and from several threads: each entry
// is a scope of its own, ended by the exit on the thread that entered it, innermost first.
class op {
 public:
  explicit op(std::string name) : name_(std::move(name)) {}
  op(const op&) = delete;
  op& operator=(const op&) = delete;
  op(op&&) = delete;
  op& operator=(op&&) = delete;
  // A scope still open when the object goes (entered by hand and never exited) may be on another
  // thread's stack of scopes: it is neither ended here nor freed.
  ~op() {
    for (open_scope& entry : open_) { static_cast<void>(entry.scope.release()); }
  }

  void enter() {
    install_torch_probe_when_ready();
    open_.push_back(open_scope{std::this_thread::get_id(), std::make_unique<gpuguard::op_scope>(name_)});
  }

  void exit(bool raised) {
    const std::thread::id thread = std::this_thread::get_id();
    const auto entry = std::find_if(open_.rbegin(), open_.rend(),
                                    [thread](const open_scope& e) { return e.thread == thread; });
    if (entry == open_.rend()) {
      throw nb::value_error(("gpuguard.op('" + name_ + "'): exited on a thread that did not enter it").c_str());
    }
    std::unique_ptr<gpuguard::op_scope> scope = std::move(entry->scope);
    open_.erase(std::next(entry).base());
    if (const gpuguard::op_result* innermost = gpuguard::current_op(); innermost != &scope->result()) {
      const std::string inside = innermost != nullptr ? std::string(innermost->name_view()) : std::string();
      this_thread_deferred.waiting.push_back(deferred_end{std::move(scope), raised});
      const std::string warning = "gpuguard.op('" + name_ + "') exited while '" + inside +
                                  "', opened inside it, is still open: it is recorded when that one ends";
      if (PyErr_WarnEx(PyExc_RuntimeWarning, warning.c_str(), 1) != 0) { throw nb::python_error(); }
      return;
    }
    last_ = end_scope(*scope, raised);
    has_last_ = true;
    end_waiting_scopes();
  }

  [[nodiscard]] nb::object result() const { return has_last_ ? nb::object(to_dict(last_)) : nb::none(); }
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  struct open_scope {
    std::thread::id thread;
    std::unique_ptr<gpuguard::op_scope> scope;
  };
  std::string name_;
  std::vector<open_scope> open_;
  gpuguard::op_result last_{};
  bool has_last_ = false;
};

// ---- figures ---------------------------------------------------------------------------------

// Each device's counters as a tuple, in the order of python/gpuguard/__init__.py's _FIGURES.
nb::list device_counters() {
  nb::list out;
  for (const auto& [device, c] : gpuguard::snapshot(false).devices) {
    out.append(nb::make_tuple(device, c.current_bytes, c.peak_bytes, c.phase_peak_bytes, c.total_bytes,
                              c.allocations, c.frees, c.live_count()));
  }
  return out;
}

// ---- sites (defined at the end of the file) ---------------------------------------------------
void add_site_functions(nb::module_& m);
// ---- one test's window, for the pytest plugin (python/gpuguard/pytest_plugin.py) -------------
// The GoogleTest listener's rules (gpuguard/core/test_window.hpp), on device memory only: the
// ledger's devices, not its host slot (pinned host memory).

std::vector<gpuguard::allocation_record> on_devices(std::vector<gpuguard::allocation_record> records) {
  records.erase(std::remove_if(records.begin(), records.end(),
                               [](const gpuguard::allocation_record& r) { return r.device == gpuguard::host_device_id; }),
                records.end());
  return records;
}

// The end of a test: each device's rise, what the test left live (the leak text names its sites)
// and, apart, what an exit holder (a framework's cache) took during the test and still holds,
// with its sites too: the leak text of those allocations as if no holder kept them.
nb::dict end_test_window(const gpuguard::testing::test_window& window, std::size_t max_sites) {
  if (max_sites == 0) { max_sites = gpuguard::process_options().leak_sites; }
  const gpuguard::ledger_snapshot snap = gpuguard::snapshot(true);
  nb::list devices;
  for (const gpuguard::testing::device_rise& r : window.rises(snap)) {
    if (r.device != gpuguard::host_device_id) { devices.append(nb::make_tuple(r.device, r.at_start, r.peak, r.rise())); }
  }
  gpuguard::testing::left_live left = window.new_live(snap);
  const std::vector<gpuguard::allocation_record> leaked = on_devices(std::move(left.leaked));
  std::vector<gpuguard::allocation_record> held = on_devices(std::move(left.held));
  nb::dict out;
  out["devices"] = devices;
  const gpuguard::leak_report leaks = gpuguard::group_leaks(leaked, max_sites);
  out["leaked_bytes"] = leaks.bytes;
  out["leaked_count"] = leaks.count;
  out["leak_text"] = leaks.count == 0 ? std::string() : gpuguard::testing::leak_text(leaks, max_sites);
  std::size_t held_bytes = 0;
  for (gpuguard::allocation_record& record : held) {
    held_bytes += record.bytes;
    record.tag = gpuguard::untagged;
  }
  out["held_bytes"] = held_bytes;
  out["held_count"] = held.size();
  out["held_text"] = held.empty() ? std::string() : gpuguard::testing::leak_text(gpuguard::group_leaks(held, max_sites), max_sites);
  return out;
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "gpuguard's compiled part: operation scopes and the ledger's counters (see the gpuguard package)";
  m.attr("version") = GPUGUARD_VERSION;
  m.attr("host_device") = gpuguard::host_device_id;

  nb::class_<op>(m, "op", "A named operation scope: gpuguard.op wraps it")
      .def(nb::init<std::string>(), nb::arg("name"))
      .def_prop_ro("name", &op::name)
      .def_prop_ro("result", &op::result,
                   "The figures of the scope that ended last, as a dict (the JSONL op line's fields); "
                   "None before the first end")
      .def("__enter__", [](nb::handle self) {
        nb::cast<op&>(self).enter();
        return nb::borrow(self);
      })
      .def("__exit__", [](op& self, nb::handle type, nb::handle /*value*/, nb::handle /*traceback*/) {
        self.exit(!type.is_none());
        return false;
      }, nb::arg("type").none(), nb::arg("value").none(), nb::arg("traceback").none());

  m.def("device_counters", &device_counters,
        "The ledger's counters per device: (device, live, peak, phase peak, total bytes, allocations, frees, "
        "live allocations) tuples");
  m.def("reset_phase_peak", &gpuguard::reset_phase_peak,
        "Starts a new phase: each device's phase_peak_bytes becomes its live_bytes");
  m.def("_set_torch_readers", &set_torch_readers);
  add_site_functions(m);

  nb::class_<gpuguard::testing::test_window>(m, "_test_window", "One test's start (the pytest plugin's)")
      .def(nb::init<>())
      .def("start", &gpuguard::testing::test_window::start,
           "Notes what is live and starts the phase peak: the test's start")
      .def("end", &end_test_window, nb::arg("max_sites") = 0,
           "The test's figures on each device since start(): a dict of devices ((device, live at start, "
           "peak, rise) tuples), leaked_bytes, leaked_count, leak_text, held_bytes, held_count, held_text");
}

// ---- sites ---------------------------------------------------------------------------------------
// What is live now, by allocation site, as the leak report groups it (gpuguard::collect_leaks),
// for gpuguard.sites(): under `gpuguard run --track` a site begins with the Python frames of the
// allocating line (docs/python.md, "Sites").

namespace {

nb::list frames_list(const std::vector<gpuguard::frame_info>& frames) {
  nb::list out;
  for (const gpuguard::frame_info& frame : frames) { out.append(nb::make_tuple(frame.function, frame.file, frame.line)); }
  return out;
}

// (site, device, tag, bytes, count, held, [(function, file, line)]) per site, largest first,
// the first `max_resolved` of each kind with their frames.
nb::list live_sites(std::size_t max_resolved) {
  gpuguard::leak_report report;
  {
    const nb::gil_scoped_release unlocked;  // resolving native frames may take a while
    report = gpuguard::collect_leaks(max_resolved);
  }
  nb::list out;
  for (const bool held : {false, true}) {
    for (const gpuguard::leak_site& site : held ? report.held : report.sites) {
      out.append(nb::make_tuple(site.site, site.device, site.tag, site.bytes, site.count, held, frames_list(site.frames)));
    }
  }
  return out;
}

void add_site_functions(nb::module_& m) {
  m.def("_live_sites", &live_sites, nb::arg("max_resolved"),
        "What is live now by site: (site, device, tag, bytes, count, held, [(function, file, line)]) tuples");
}

}  // namespace

