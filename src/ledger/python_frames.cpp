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
//   - Where this interpreter's layout is in python_raw.cpp's table (3.11), the thread's own frame
//     chain is read from memory whether or not it holds the GIL (walk_raw, below): PyTorch's
//     operators release the GIL while they allocate. Elsewhere only the public, version-stable
//     frame API is used, by a GIL holder: PyEval_GetFrame, PyFrame_GetBack, PyFrame_GetCode,
//     PyFrame_GetLineNumber (3.9+). From 3.11 these make frame objects for frames that had none
//     (small allocations, under the GIL, kept by the frame until it ends).
//
// How the text is kept. A site is interned on the hot path and resolved when a report is written,
// which may be after Python finalised (the exit report runs from on_exit) and on a thread without
// the GIL. So each frame is kept as (code object, line), and the text of a code object (co_filename,
// co_qualname or co_name, and whether its module is gpuguard's or PyTorch's) is copied into a table
// of ours the first time a capture meets that code object. Through the API we keep a reference to
// that code object for the life of the process: its address then cannot be reused by another code
// object, so the address is a safe key (the raw walk's key is wider: code_key), and a capture that meets known code does no Python call beyond the frame
// walk and allocates nothing. Code objects belong to functions, lambdas and modules, whose number
// the program's source bounds; the table stops growing at max_codes (code made by exec in a loop).
// Unlike PyTorch (references to code objects, text looked up at report time with the GIL), this
// needs no GIL and no live interpreter when resolving.
#include "ledger/python_frames.hpp"

#include "ledger/python_raw.hpp"
#include "ledger/stacks.hpp"

#include <array>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <functional>
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
  // The walk without the GIL (walk_raw), where `layout` is set: 3.11+ only.
  const python_layout* layout = nullptr;                // this interpreter's, where one was verified
  object* (*this_thread_state)() = nullptr;             // PyGILState_GetThisThreadState: no GIL needed
  const object* code_type = nullptr;                    // &PyCode_Type
  const object* unicode_type = nullptr;                 // &PyUnicode_Type
  const object* bytes_type = nullptr;                   // &PyBytes_Type
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

// The raw walk's needs: the version (Py_Version, 3.11+), a verified layout for it, and the types
// whose addresses tell a code object, a str and a bytes object from anything else. A debug build
// (Py_REF_DEBUG: _Py_NegativeRefcount) has other object headers and gets no layout.
void find_raw_layout(python_api& found) noexcept {
  const void* version = ::dlsym(RTLD_DEFAULT, "Py_Version");
  if (version == nullptr || ::dlsym(RTLD_DEFAULT, "_Py_NegativeRefcount") != nullptr) { return; }
  unsigned long hex = 0;  // NOLINT(google-runtime-int): CPython's type for Py_Version
  std::memcpy(&hex, version, sizeof hex);
  const python_layout* layout = python_layout_for(static_cast<int>((hex >> 24U) & 0xffU), static_cast<int>((hex >> 16U) & 0xffU));
  found.code_type = static_cast<const object*>(::dlsym(RTLD_DEFAULT, "PyCode_Type"));
  found.unicode_type = static_cast<const object*>(::dlsym(RTLD_DEFAULT, "PyUnicode_Type"));
  found.bytes_type = static_cast<const object*>(::dlsym(RTLD_DEFAULT, "PyBytes_Type"));
  if (layout != nullptr && find(found.this_thread_state, "PyGILState_GetThisThreadState") &&
      found.code_type != nullptr && found.unicode_type != nullptr && found.bytes_type != nullptr) {
    found.layout = layout;
  }
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
    find_raw_layout(found);
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

// What names a code object in the table. The C API path holds a reference to each code object it
// keeps, so its address alone is a key (the other fields stay null). The raw walk holds none (it
// may not touch reference counts): a code object it met may be freed and its address reused by
// another, so its key also holds the addresses of its file and name strings and its first line,
// which the frames that run it keep alive. A stale entry would need a new code object, its file
// name and its name all at the addresses of freed ones, with the same first line.
struct code_key {
  const object* code = nullptr;
  const object* file = nullptr;
  const object* name = nullptr;
  int first_line = 0;
};

bool operator==(const code_key& a, const code_key& b) noexcept {
  return a.code == b.code && a.file == b.file && a.name == b.name && a.first_line == b.first_line;
}

struct code_key_hash {
  std::size_t operator()(const code_key& key) const noexcept {
    std::size_t hash = std::hash<const object*>{}(key.code);
    hash = hash * 31 + std::hash<const object*>{}(key.file);
    hash = hash * 31 + std::hash<const object*>{}(key.name);
    return hash * 31 + static_cast<std::size_t>(key.first_line);
  }
};

struct code_table {
  std::mutex mutex;
  std::unordered_map<code_key, std::uint32_t, code_key_hash> index;  // -> entry (and package in bits 30-31)
  std::deque<code_entry> entries;                                    // stable: never shrinks
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
// Kept small: the library's thread-locals are in the initial-exec model (ledger_state.hpp), so all
// of them must fit the static TLS that glibc keeps for libraries loaded later (Python importing
// the wheel's module dlopens libgpuguard), which is under 2 KiB by default. 16 ways of 40 bytes.
constexpr std::size_t thread_cache_ways = 16;
struct cached_code {
  code_key key;
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

// The entry of the code object `key` names: from this thread's cache, the table, or (the first
// time) `describe(entry, where)`, which runs outside the table's lock and returns whether the
// table may keep the new entry's key for good (then `keep()` runs under the lock).
template <class Describe, class Keep>
known_code code_of(const code_key& key, Describe&& describe_code, Keep&& keep) noexcept {
  cached_code& slot = thread_codes[(reinterpret_cast<std::uintptr_t>(key.code) >> 4U) % thread_cache_ways];
  if (slot.key == key) { return slot.known; }
  code_table& table = codes();
  known_code known;
  bool found = false;
  {
    const std::lock_guard<std::mutex> lock(table.mutex);
    if (const auto it = table.index.find(key); it != table.index.end()) {
      known.index = it->second & 0x3fffffffU;
      known.where = static_cast<package>(it->second >> 30U);
      found = true;
    }
  }
  if (!found) {
    // Outside the lock: reading the text may call Python, which must never wait with our lock held.
    code_entry entry;
    describe_code(entry, known.where);
    try {
      const std::lock_guard<std::mutex> lock(table.mutex);
      if (const auto it = table.index.find(key); it != table.index.end()) {
        known.index = it->second & 0x3fffffffU;  // another thread (no GIL: free-threaded) was first
      } else if (table.entries.size() < max_codes) {
        const auto index = static_cast<std::uint32_t>(table.entries.size());
        table.entries.push_back(std::move(entry));
        table.index.emplace(key, index | (static_cast<std::uint32_t>(known.where) << 30U));
        keep();
        known.index = index;
      } else {
        return known;  // the table is full: this frame's text is not kept
      }
    } catch (...) {
      return known_code{};
    }
  }
  slot.key = key;
  slot.known = known;
  return known;
}

// Through the C API (GIL held): the key is the code object, kept alive by a reference of ours.
known_code api_code_of(const python_api& py, object* code, object* frame) noexcept {
  return code_of(
      code_key{code}, [&](code_entry& entry, package& where) { describe(py, code, frame, entry, where); },
      [&] { py.incref(code); });  // ours for good: the address stays this code object's
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
    const known_code known = code != nullptr ? api_code_of(py, code, frame) : known_code{};
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

// ---- the walk without the GIL -------------------------------------------------------------------
//
// A thread that released the GIL inside a C call made from Python (a ctypes.CDLL call, a PyTorch
// operator) still has its thread state and its chain of interpreter frames, which nothing but
// this thread changes: it is blocked in this very call. So the chain is read from memory, as
// out-of-process profilers read it (py-spy), with no GIL, no reference counted, no Python call:
// tstate->cframe->current_frame, then each frame's previous. Every frame, code object and string
// it reaches is kept alive by the frames below this call, and every pointer is one CPython wrote
// for this thread, so the reads need no probing of the address space; what a wrong layout could
// make of them is caught by checking each code object's, string's and line table's type against
// PyCode_Type, PyUnicode_Type and PyBytes_Type before reading it, and by bounding the walk.

template <class T>
T field(const void* base, std::uint32_t offset) noexcept {
  T value;
  std::memcpy(&value, static_cast<const char*>(base) + offset, sizeof value);
  return value;
}

bool is_a(const python_layout& layout, const void* thing, const void* type) noexcept {
  return thing != nullptr && reinterpret_cast<std::uintptr_t>(thing) % alignof(void*) == 0 &&
         field<const void*>(thing, layout.object_type) == type;
}

constexpr std::size_t max_text = 4096;  // a longer file or function name is cut here

// A str's text: a compact ASCII string's own bytes, else its UTF-8 cache where CPython made one.
std::string raw_text(const python_api& py, const python_layout& layout, const void* text) {
  if (!is_a(layout, text, py.unicode_type)) { return "<unknown>"; }
  const auto state = field<std::uint32_t>(text, layout.ascii_state);
  if ((state & unicode_compact_bit) == 0) { return "<non-ascii>"; }
  const char* chars = nullptr;
  std::int64_t length = 0;
  if ((state & unicode_ascii_bit) != 0) {
    chars = static_cast<const char*>(text) + layout.ascii_size;
    length = field<std::int64_t>(text, layout.ascii_length);
  } else {
    chars = field<const char*>(text, layout.compact_utf8);
    length = field<std::int64_t>(text, layout.compact_utf8_length);
  }
  if (chars == nullptr || length < 0) { return "<non-ascii>"; }
  return std::string(chars, static_cast<std::size_t>(length) < max_text ? static_cast<std::size_t>(length) : max_text);
}

// Which package a file belongs to, by its path: an installed package's directory
// (site-packages/torch/..., dist-packages/gpuguard/...). The raw walk cannot read the module's
// __name__ (a dict lookup) as the C API path does.
package package_of_file(std::string_view file) noexcept {
  if (file.find("-packages/torch/") != std::string_view::npos) { return package::torch; }
  if (file.find("-packages/gpuguard/") != std::string_view::npos) { return package::gpuguard; }
  return package::user;
}

known_code raw_code_of(const python_api& py, const python_layout& layout, const object* code) noexcept {
  code_key key{code, field<const object*>(code, layout.code_filename), field<const object*>(code, layout.code_qualname),
               field<int>(code, layout.code_firstlineno)};
  return code_of(
      key,
      [&](code_entry& entry, package& where) {
        try {
          entry.file = raw_text(py, layout, key.file);
          entry.function = raw_text(py, layout, key.name);
          if (entry.function == "<unknown>") { entry.function = raw_text(py, layout, field<const object*>(code, layout.code_name)); }
          where = package_of_file(entry.file);
        } catch (...) {  // out of memory: the text stays as far as it got
        }
      },
      [] {});
}

// The line a frame runs: its instruction's index in its code, looked up in the location table.
int raw_line(const python_api& py, const python_layout& layout, const object* code, const void* frame) noexcept {
  const auto* table = field<const object*>(code, layout.code_linetable);
  const int first_line = field<int>(code, layout.code_firstlineno);
  if (!is_a(layout, table, py.bytes_type)) { return first_line; }
  const auto size = field<std::int64_t>(table, layout.bytes_size);
  const auto instruction = reinterpret_cast<std::intptr_t>(field<const void*>(frame, layout.frame_instr));
  const auto units = reinterpret_cast<std::intptr_t>(code) + layout.code_adaptive;
  return python_line(reinterpret_cast<const std::uint8_t*>(table) + layout.bytes_data,
                     size < 0 ? 0 : static_cast<std::size_t>(size), first_line, (instruction - units) / 2);
}

std::size_t walk_raw(const python_api& py, python_frames_mode how, void** words) noexcept {
  const python_layout& layout = *py.layout;
  const void* thread = py.this_thread_state();
  if (thread == nullptr) { return 0; }  // a native thread Python never ran on
  const void* cframe = field<const void*>(thread, layout.thread_cframe);
  const void* frame = cframe != nullptr ? field<const void*>(cframe, layout.cframe_frame) : nullptr;
  std::size_t kept = 0;
  std::array<void*, max_python_frames> passed{};
  std::size_t passed_count = 0;
  for (std::size_t depth = 0; frame != nullptr && kept < max_python_frames && depth < max_walk; ++depth) {
    if (reinterpret_cast<std::uintptr_t>(frame) % alignof(void*) != 0) { break; }
    if (layout.owner_cstack < 0 || field<char>(frame, layout.frame_owner) != layout.owner_cstack) {
      const auto* code = field<const object*>(frame, layout.frame_code);
      if (!is_a(layout, code, py.code_type)) { break; }  // not a frame this layout describes: stop
      const known_code known = raw_code_of(py, layout, code);
      const bool over = known.where == package::gpuguard || (known.where == package::torch && how == python_frames_mode::user);
      if (!over) {
        words[kept++] = pack(known.index, raw_line(py, layout, code, frame));
      } else if (kept == 0 && passed_count < passed.size()) {
        passed[passed_count++] = pack(known.index, raw_line(py, layout, code, frame));
      }
    }
    const void* previous = field<const void*>(frame, layout.frame_previous);
    if (previous == frame) { break; }
    frame = previous;
  }
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
  const auto how = static_cast<python_frames_mode>(mode.load(std::memory_order_relaxed));
  // Where this interpreter's layout is known, the frames are read from memory whether or not the
  // thread holds the GIL (one way, one kind of key); elsewhere only a GIL holder's, through the API.
  if (py->layout == nullptr && (py->gil_check() == 0 || (py->thread_state != nullptr && py->thread_state() == nullptr))) {
    return 0;
  }
  capturing = true;
  const std::size_t count = py->layout != nullptr ? walk_raw(*py, how, out + 1) : walk(*py, how, out + 1);
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
