// The raw frame walk's layout table (src/ledger/python_raw.cpp) against the CPython headers this
// build found: each offset the table lists for this version must equal offsetof in the headers
// (their internal ones, with Py_BUILD_CORE). Exits 1 naming each field that differs, 77 (skip)
// where the table lists no layout for the headers' version.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>

#include "ledger/python_raw.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

int failures = 0;

void expect(const char* name, std::size_t table, std::size_t headers) {
  if (table != headers) {
    std::printf("FAIL %s: the table says %zu, the headers %zu\n", name, table, headers);
    ++failures;
  } else {
    std::printf("ok   %s = %zu\n", name, headers);
  }
}

}  // namespace

int main() {
  const gpuguard::detail::python_layout* layout = gpuguard::detail::python_layout_for(PY_MAJOR_VERSION, PY_MINOR_VERSION);
  if (layout == nullptr) {
    std::printf("SKIP: no layout is listed for the headers' Python %d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
    return 77;
  }
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000  // 3.11 and 3.12 name these alike
  expect("PyThreadState.cframe", layout->thread_cframe, offsetof(PyThreadState, cframe));
  expect("_PyCFrame.current_frame", layout->cframe_frame, offsetof(_PyCFrame, current_frame));
  expect("_PyInterpreterFrame.f_code", layout->frame_code, offsetof(_PyInterpreterFrame, f_code));
  expect("_PyInterpreterFrame.previous", layout->frame_previous, offsetof(_PyInterpreterFrame, previous));
  expect("_PyInterpreterFrame.prev_instr", layout->frame_instr, offsetof(_PyInterpreterFrame, prev_instr));
  expect("_PyInterpreterFrame.owner", layout->frame_owner, offsetof(_PyInterpreterFrame, owner));
#if PY_VERSION_HEX < 0x030C0000
  expect("FRAME_OWNED_BY_CSTACK (none: -1)", static_cast<std::size_t>(layout->owner_cstack), static_cast<std::size_t>(-1));
#else
  expect("FRAME_OWNED_BY_CSTACK", static_cast<std::size_t>(layout->owner_cstack), static_cast<std::size_t>(FRAME_OWNED_BY_CSTACK));
#endif
  expect("PyASCIIObject size", layout->ascii_size, sizeof(PyASCIIObject));
  expect("PyCompactUnicodeObject.utf8_length", layout->compact_utf8_length, offsetof(PyCompactUnicodeObject, utf8_length));
  expect("PyCompactUnicodeObject.utf8", layout->compact_utf8, offsetof(PyCompactUnicodeObject, utf8));
#else
  std::printf("FAIL: the probe does not know the fields of Python %d.%d's headers\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
  return 1;
#endif
  expect("PyCodeObject.co_filename", layout->code_filename, offsetof(PyCodeObject, co_filename));
  expect("PyCodeObject.co_name", layout->code_name, offsetof(PyCodeObject, co_name));
  expect("PyCodeObject.co_qualname", layout->code_qualname, offsetof(PyCodeObject, co_qualname));
  expect("PyCodeObject.co_linetable", layout->code_linetable, offsetof(PyCodeObject, co_linetable));
  expect("PyCodeObject.co_firstlineno", layout->code_firstlineno, offsetof(PyCodeObject, co_firstlineno));
  expect("PyCodeObject.co_code_adaptive", layout->code_adaptive, offsetof(PyCodeObject, co_code_adaptive));
  expect("PyObject.ob_type", layout->object_type, offsetof(PyObject, ob_type));
  expect("PyVarObject.ob_size", layout->bytes_size, offsetof(PyVarObject, ob_size));
  expect("PyBytesObject.ob_sval", layout->bytes_data, offsetof(PyBytesObject, ob_sval));
  expect("PyASCIIObject.length", layout->ascii_length, offsetof(PyASCIIObject, length));
  expect("PyASCIIObject.state", layout->ascii_state, offsetof(PyASCIIObject, state));
  // The state bits, as the compiler lays the bit-fields out.
  PyASCIIObject text;
  std::memset(&text, 0, sizeof text);
  text.state.compact = 1;
  std::uint32_t bits = 0;
  std::memcpy(&bits, reinterpret_cast<const char*>(&text) + offsetof(PyASCIIObject, state), sizeof bits);
  expect("PyASCIIObject.state.compact bit", gpuguard::detail::unicode_compact_bit, bits);
  std::memset(&text, 0, sizeof text);
  text.state.ascii = 1;
  std::memcpy(&bits, reinterpret_cast<const char*>(&text) + offsetof(PyASCIIObject, state), sizeof bits);
  expect("PyASCIIObject.state.ascii bit", gpuguard::detail::unicode_ascii_bit, bits);
  return failures == 0 ? 0 : 1;
}
