// Python frames of an allocation, from native code that Python called (the interposer's driver
// hooks, inside a PyTorch operator or a ctypes call).
//
// The rules this follows (they are PyTorch's and memray's too):
//   - Python is never linked: its C API is looked up with dlsym(RTLD_DEFAULT) the first time a
//     capture is tried, so one build serves CPython 3.9 to 3.13 and processes with no Python at
//     all, which then pay one relaxed load per allocation (python_frames_live).
//   - The GIL is never taken: a driver hook may run under a lock that a thread waiting for the GIL
//     holds (PyTorch's allocator mutex), and taking it there deadlocks. Frames are read only when
//     PyGILState_Check() says this thread holds the GIL and the thread has a current thread state
//     (PyGILState_Check says yes to every thread once sub-interpreters were made).
//   - Only the public, version-stable frame API is used: PyEval_GetFrame, PyFrame_GetBack,
//     PyFrame_GetCode, PyFrame_GetLineNumber (3.9+). From 3.11 these make frame objects for
//     frames that had none (small allocations, under the GIL, kept by the frame until it ends).
//
// How the text is kept. A site is interned on the hot path and resolved when a report is written,
// which may be after Python finalised (the exit report runs from on_exit) and on a thread without
// the GIL. So each frame is kept as (code object, line), and the text of a code object (co_filename,
// co_qualname or co_name, and whether its module is gpuguard's or PyTorch's) is copied into a table
// of ours the first time a capture meets that code object. We keep a reference to that code object
// for the life of the process: its address then cannot be reused by another code object, so the
// address is a safe key, and a capture that meets known code does no Python call beyond the frame
// walk and allocates nothing. Code objects belong to functions, lambdas and modules, whose number
// the program's source bounds; the table stops growing at max_codes (code made by exec in a loop).
// Unlike PyTorch (references to code objects, text looked up at report time with the GIL), this
// needs no GIL and no live interpreter when resolving.
#include "ledger/python_frames.hpp"

#include "ledger/stacks.hpp"

#include <array>
#include <cstdint>
#include <cstddef>
#include <deque>
#include <iterator>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>

#include <dlfcn.h>
#include <pthread.h>
#include <sys/types.h>

namespace gpuguard::detail {

std::atomic<bool> python_frames_live{false};

namespace {

using object = void;  // PyObject, opaque: no Python header is included

// CPython's C API as its exported functions; each is in every version from 3.9 unless marked.
struct python_api {
  int (*is_initialized)() = nullptr;                    // Py_IsInitialized
  int (*is_finalizing)() = nullptr;                     // Py_IsFinalizing (3.13) or _Py_IsFinalizing; optional
  int (*gil_check)() = nullptr;                         // PyGILState_Check
  object* (*thread_state)() = nullptr;                  // PyThreadState_GetUnchecked (3.13) or _PyThreadState_UncheckedGet; optional
  object* (*current_frame)() = nullptr;                 // PyEval_GetFrame: borrowed
  object* (*frame_back)(object*) = nullptr;             // PyFrame_GetBack: new reference
  object* (*frame_code)(object*) = nullptr;             // PyFrame_GetCode: new reference
  int (*frame_line)(object*) = nullptr;                 // PyFrame_GetLineNumber
  void (*incref)(object*) = nullptr;                    // Py_IncRef
  void (*decref)(object*) = nullptr;                    // Py_DecRef
  object* (*get_attr)(object*, const char*) = nullptr;  // PyObject_GetAttrString: new reference
  object* (*dict_item)(object*, const char*) = nullptr; // PyDict_GetItemString: borrowed
  const char* (*utf8)(object*, ssize_t*) = nullptr;     // PyUnicode_AsUTF8AndSize
  void (*err_fetch)(object**, object**, object**) = nullptr;  // PyErr_Fetch
  void (*err_restore)(object*, object*, object*) = nullptr;   // PyErr_Restore
  void (*err_clear)() = nullptr;                        // PyErr_Clear
};

template <class F>
bool find(F& into, const char* name) noexcept {
  into = reinterpret_cast<F>(::dlsym(RTLD_DEFAULT, name));
  return into != nullptr;
}

template <class F>
void find_either(F& into, const char* newer, const char* older) noexcept {
  if (!find(into, newer)) { static_cast<void>(find(into, older)); }
}

python_api api;                                   // written once, before `present` is published
std::atomic<bool> present{false};
std::atomic<bool> absent{false};                  // looked up, not found: nothing more is asked
std::atomic<int> mode{static_cast<int>(python_frames_mode::off)};

// Looks Python up once per process. A process that has none then stops asking.
const python_api* python() noexcept {
  static std::once_flag probed;
  std::call_once(probed, [] {
    python_api found;
    const bool complete =
        find(found.is_initialized, "Py_IsInitialized") && find(found.gil_check, "PyGILState_Check") &&
        find(found.current_frame, "PyEval_GetFrame") && find(found.frame_back, "PyFrame_GetBack") &&
        find(found.frame_code, "PyFrame_GetCode") && find(found.frame_line, "PyFrame_GetLineNumber") &&
        find(found.incref, "Py_IncRef") && find(found.decref, "Py_DecRef") &&
        find(found.get_attr, "PyObject_GetAttrString") && find(found.dict_item, "PyDict_GetItemString") &&
        find(found.utf8, "PyUnicode_AsUTF8AndSize") && find(found.err_fetch, "PyErr_Fetch") &&
        find(found.err_restore, "PyErr_Restore") && find(found.err_clear, "PyErr_Clear");
    if (!complete) {  // no Python, or one older than 3.9
      absent.store(true, std::memory_order_relaxed);
      python_frames_live.store(false, std::memory_order_relaxed);
      return;
    }
    find_either(found.is_finalizing, "Py_IsFinalizing", "_Py_IsFinalizing");
    find_either(found.thread_state, "PyThreadState_GetUnchecked", "_PyThreadState_UncheckedGet");
    api = found;
    present.store(true, std::memory_order_release);
  });
  return present.load(std::memory_order_acquire) ? &api : nullptr;
}

// ---- code objects and their text ---------------------------------------------------------------

enum class package : std::uint8_t { user, torch, gpuguard };

struct code_entry {
  std::string file;
  std::string function;
};

constexpr std::size_t max_codes = 65536;
constexpr std::uint32_t unknown_code = 0xffffffffU;

struct code_table {
  std::mutex mutex;
  std::unordered_map<const object*, std::uint32_t> index;  // code object -> entry (and package in bits 30-31)
  std::deque<code_entry> entries;                          // stable: never shrinks
};

code_table& codes() {
  static code_table* table = [] {
    auto* made = new code_table();  // lives through exit: reports read it from exit handlers
    // A fork made while another thread holds the lock would leave it held in the child.
    static_cast<void>(::pthread_atfork([] { codes().mutex.lock(); }, [] { codes().mutex.unlock(); },
                                       [] { codes().mutex.unlock(); }));
    return made;
  }();
  return *table;
}

struct known_code {
  std::uint32_t index = unknown_code;
  package where = package::user;
};

// Each thread's last code objects: a capture in a loop finds its code here, without the lock.
constexpr std::size_t thread_cache_ways = 64;
struct cached_code {
  const object* code = nullptr;
  known_code known;
};
thread_local std::array<cached_code, thread_cache_ways> thread_codes{};
thread_local bool capturing = false;

std::string text_attribute(const python_api& py, object* of, const char* name) {
  object* value = py.get_attr(of, name);
  if (value == nullptr) {
    py.err_clear();
    return {};
  }
  ssize_t size = 0;
  const char* text = py.utf8(value, &size);
  std::string copy = text != nullptr && size >= 0 ? std::string(text, static_cast<std::size_t>(size)) : std::string();
  if (text == nullptr) { py.err_clear(); }
  py.decref(value);
  return copy;
}

bool in_package(std::string_view module, std::string_view name) {
  return module.substr(0, name.size()) == name && (module.size() == name.size() || module[name.size()] == '.');
}

// The text of `code` (whose frame is `frame`), read through Python's own API with the GIL held.
// Any error it raises is cleared, and an error the program had set is kept.
void describe(const python_api& py, object* code, object* frame, code_entry& entry, package& where) {
  object* type = nullptr;
  object* value = nullptr;
  object* traceback = nullptr;
  py.err_fetch(&type, &value, &traceback);
  try {
    entry.file = text_attribute(py, code, "co_filename");
    entry.function = text_attribute(py, code, "co_qualname");  // 3.11+: Class.method
    if (entry.function.empty()) { entry.function = text_attribute(py, code, "co_name"); }
    // The module the code runs in, by its globals' __name__: a package's source may lie anywhere
    // (a checkout, an editable install), its module names do not.
    if (object* globals = py.get_attr(frame, "f_globals")) {
      std::string module;
      if (object* name = py.dict_item(globals, "__name__")) {
        ssize_t size = 0;
        if (const char* text = py.utf8(name, &size)) { module.assign(text, static_cast<std::size_t>(size)); }
      }
      py.decref(globals);
      where = in_package(module, "gpuguard") ? package::gpuguard
              : in_package(module, "torch")  ? package::torch
                                             : package::user;
    }
  } catch (...) {  // out of memory: the text stays as far as it got
  }
  py.err_clear();
  py.err_restore(type, value, traceback);
}

known_code code_of(const python_api& py, object* code, object* frame) noexcept {
  cached_code& slot = thread_codes[(reinterpret_cast<std::uintptr_t>(code) >> 4U) % thread_cache_ways];
  if (slot.code == code) { return slot.known; }
  code_table& table = codes();
  known_code known;
  bool found = false;
  {
    const std::lock_guard<std::mutex> lock(table.mutex);
    if (const auto it = table.index.find(code); it != table.index.end()) {
      known.index = it->second & 0x3fffffffU;
      known.where = static_cast<package>(it->second >> 30U);
      found = true;
    }
  }
  if (!found) {
    // Outside the lock: reading the text calls Python, which must never wait with our lock held.
    code_entry entry;
    describe(py, code, frame, entry, known.where);
    try {
      const std::lock_guard<std::mutex> lock(table.mutex);
      if (const auto it = table.index.find(code); it != table.index.end()) {
        known.index = it->second & 0x3fffffffU;  // another thread (no GIL: free-threaded) was first
      } else if (table.entries.size() < max_codes) {
        const auto index = static_cast<std::uint32_t>(table.entries.size());
        table.entries.push_back(std::move(entry));
        table.index.emplace(code, index | (static_cast<std::uint32_t>(known.where) << 30U));
        py.incref(code);  // ours for good: the address stays this code object's
        known.index = index;
      } else {
        return known;  // the table is full: this frame's text is not kept
      }
    } catch (...) {
      return known_code{};
    }
  }
  slot.code = code;
  slot.known = known;
  return known;
}

// ---- the walk ------------------------------------------------------------------------------------

// Frames looked at per capture at most: a deep recursion costs this many steps, not its depth.
constexpr std::size_t max_walk = 256;

// A frame as one word: its code's entry + 1 (0: text not kept) above its line.
void* pack(std::uint32_t index, int line) noexcept {
  const std::uint64_t entry = index == unknown_code ? 0 : std::uint64_t{index} + 1;
  const std::uint64_t word = entry << 32U | static_cast<std::uint32_t>(line < 0 ? 0 : line);
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(word));  // NOLINT(performance-no-int-to-ptr)
}

// The marker of a Python part of n frames is &markers[n]: an address in our data, which no return
// address of a native frame can equal.
std::array<char, python_prefix_slots> markers{};

// The innermost frames outside the packages the mode passes over, into words (max_python_frames).
// When every frame is in such a package (code that PyTorch runs on its own), the innermost ones.
std::size_t walk(const python_api& py, python_frames_mode how, void** words) noexcept {
  object* frame = py.current_frame();
  if (frame == nullptr) { return 0; }
  py.incref(frame);  // borrowed: ours like the ones PyFrame_GetBack returns
  std::size_t kept = 0;
  std::array<void*, max_python_frames> passed{};
  std::size_t passed_count = 0;
  for (std::size_t depth = 0; frame != nullptr && depth < max_walk; ++depth) {
    object* code = py.frame_code(frame);
    const known_code known = code != nullptr ? code_of(py, code, frame) : known_code{};
    if (code != nullptr) { py.decref(code); }
    const bool over = known.where == package::gpuguard || (known.where == package::torch && how == python_frames_mode::user);
    if (!over) {
      words[kept++] = pack(known.index, py.frame_line(frame));
    } else if (kept == 0 && passed_count < passed.size()) {
      passed[passed_count++] = pack(known.index, py.frame_line(frame));
    }
    object* back = kept < max_python_frames ? py.frame_back(frame) : nullptr;
    py.decref(frame);
    frame = back;
  }
  if (frame != nullptr) { py.decref(frame); }
  if (kept == 0) {
    for (; kept < passed_count; ++kept) { words[kept] = passed[kept]; }
  }
  return kept;
}

}  // namespace

void set_python_frames(python_frames_mode how) noexcept {
  mode.store(static_cast<int>(how), std::memory_order_relaxed);
  python_frames_live.store(how != python_frames_mode::off && !absent.load(std::memory_order_relaxed),
                           std::memory_order_relaxed);
}

std::size_t capture_python_frames(void** out) noexcept {
  if (!python_frames_live.load(std::memory_order_relaxed)) { return 0; }
  const python_api* py = python();
  // `capturing`: reading a new code object's text calls Python, which could allocate device memory.
  if (py == nullptr || capturing || py->is_initialized() == 0) { return 0; }
  if (py->is_finalizing != nullptr && py->is_finalizing() != 0) { return 0; }
  if (py->gil_check() == 0 || (py->thread_state != nullptr && py->thread_state() == nullptr)) { return 0; }
  const auto how = static_cast<python_frames_mode>(mode.load(std::memory_order_relaxed));
  capturing = true;
  const std::size_t count = walk(*py, how, out + 1);
  capturing = false;
  if (count == 0) { return 0; }
  out[0] = &markers[count];
  return count + 1;
}

std::size_t python_prefix_length(const void* const* frames, std::size_t count) noexcept {
  if (count == 0) { return 0; }
  const auto* marker = static_cast<const char*>(frames[0]);
  // An integer comparison: the marker may be any native address, outside the array.
  const auto at = reinterpret_cast<std::uintptr_t>(marker);
  const auto first = reinterpret_cast<std::uintptr_t>(&markers[1]);
  const auto last = reinterpret_cast<std::uintptr_t>(&markers[max_python_frames]);
  if (at < first || at > last) { return 0; }
  const std::size_t length = at - first + 2;  // the marker and its frames
  return length <= count ? length : 0;
}

std::vector<frame_info> resolve_python_frames(const void* const* frames, std::size_t count) {
  const std::size_t length = python_prefix_length(frames, count);
  std::vector<frame_info> resolved;
  if (length == 0) { return resolved; }
  code_table& table = codes();
  const std::lock_guard<std::mutex> lock(table.mutex);
  for (std::size_t i = 1; i < length; ++i) {
    const auto word = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(frames[i]));
    const std::uint64_t entry = word >> 32U;
    frame_info frame;
    frame.line = static_cast<std::uint32_t>(word);
    if (entry != 0 && entry - 1 < table.entries.size()) {
      const std::uint64_t index = entry - 1;
      frame.function = table.entries[index].function;
      frame.file = table.entries[index].file;
    } else {
      frame.function = "(Python code whose text was not kept)";
    }
    resolved.push_back(std::move(frame));
  }
  return resolved;
}

std::vector<frame_info> resolve_site_frames(const std::vector<void*>& frames) {
  const std::size_t python = python_prefix_length(frames.data(), frames.size());
  std::vector<frame_info> resolved = resolve_python_frames(frames.data(), frames.size());
  std::vector<frame_info> native = resolve_frames(std::vector<void*>(frames.begin() + static_cast<std::ptrdiff_t>(python), frames.end()));
  resolved.insert(resolved.end(), std::make_move_iterator(native.begin()), std::make_move_iterator(native.end()));
  return resolved;
}

bool python_frames_possible() noexcept {
  if (!python_frames_live.load(std::memory_order_relaxed)) { return false; }
  const python_api* py = python();
  return py != nullptr && py->is_initialized() != 0;
}

}  // namespace gpuguard::detail
