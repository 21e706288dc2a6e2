// CPython's internal layouts and its location table, for python_frames.cpp's walk without the GIL.
//
// A layout is listed only where each offset was checked against that version's headers; any other
// version gets no frames without the GIL (the GIL-held path through the C API stays), never a
// guessed layout.
//   3.11: Include/cpython/pystate.h (PyThreadState.cframe, _PyCFrame.current_frame),
//         Include/internal/pycore_frame.h (_PyInterpreterFrame: f_code, previous, prev_instr,
//         owner; no C-stack frames), Include/cpython/code.h (PyCodeObject),
//         Include/cpython/unicodeobject.h (PyASCIIObject, PyCompactUnicodeObject: 3.11 still has
//         wstr), Include/cpython/bytesobject.h. tests/python/python_layout_probe.cpp compiles
//         against the installed 3.11 headers and fails where this table disagrees with offsetof.
//   3.12: the same headers of 3.12, read through a bindgen translation of them (py-spy's
//         src/python_bindings/v3_12_0.rs: #[repr(C)] structs with the headers' fields in order):
//         PyThreadState.cframe after a 4-byte status word and six ints; _PyCFrame loses
//         use_tracing; _PyInterpreterFrame begins with f_code and previous, and gains C-stack
//         frames (FRAME_OWNED_BY_CSTACK = 3, Include/internal/pycore_frame.h); PyCodeObject
//         drops co_warmup and the line array and gains co_framesize, co_version and the
//         monitoring fields; PyASCIIObject loses wstr. The same probe test checks it wherever
//         3.12's internal headers are installed.
#include "ledger/python_raw.hpp"

namespace gpuguard::detail {

namespace {

constexpr python_layout python_3_11 = [] {
  python_layout l;
  l.minor = 11;
  l.thread_cframe = 56;
  l.cframe_frame = 8;  // after uint8_t use_tracing
  l.frame_code = 32;   // after f_func, f_globals, f_builtins, f_locals
  l.frame_previous = 48;
  l.frame_instr = 56;
  l.frame_owner = 69;  // after int stacktop, bool is_entry
  l.owner_cstack = -1;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_firstlineno = 72;
  l.code_adaptive = 184;
  l.object_type = 8;
  l.bytes_size = 16;
  l.bytes_data = 32;
  l.ascii_length = 16;
  l.ascii_state = 32;
  l.ascii_size = 48;  // ob_base, length, hash, state, wstr
  l.compact_utf8_length = 48;
  l.compact_utf8 = 56;
  return l;
}();

constexpr python_layout python_3_12 = [] {
  python_layout l;
  l.minor = 12;
  l.thread_cframe = 56;  // prev, next, interp, _status (4 bytes), six ints
  l.cframe_frame = 0;
  l.frame_code = 0;
  l.frame_previous = 8;
  l.frame_instr = 56;    // after f_funcobj, f_globals, f_builtins, f_locals, frame_obj
  l.frame_owner = 70;    // after int stacktop, uint16_t return_offset
  l.owner_cstack = 3;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_firstlineno = 68;
  l.code_adaptive = 192;  // after co_extra
  l.object_type = 8;
  l.bytes_size = 16;
  l.bytes_data = 32;
  l.ascii_length = 16;
  l.ascii_state = 32;
  l.ascii_size = 40;  // ob_base, length, hash, state
  l.compact_utf8_length = 40;
  l.compact_utf8 = 48;
  return l;
}();

// A varint of the location table: 6 bits a byte, low bits first, bit 6 set where more follow.
unsigned read_varint(const std::uint8_t* table, std::size_t size, std::size_t& at) noexcept {
  unsigned value = 0;
  unsigned shift = 0;
  while (at < size && shift < 32) {
    const std::uint8_t byte = table[at++];
    value |= static_cast<unsigned>(byte & 63U) << shift;
    shift += 6;
    if ((byte & 64U) == 0) { break; }
  }
  return value;
}

int read_signed_varint(const std::uint8_t* table, std::size_t size, std::size_t& at) noexcept {
  const unsigned value = read_varint(table, size, at);
  const auto magnitude = static_cast<int>(value >> 1U);
  return (value & 1U) != 0 ? -magnitude : magnitude;
}

}  // namespace

const python_layout* python_layout_for(int major, int minor) noexcept {
  if (major == 3 && minor == 11) { return &python_3_11; }
  if (major == 3 && minor == 12) { return &python_3_12; }
  return nullptr;
}

int python_line(const std::uint8_t* table, std::size_t size, int first_line, std::ptrdiff_t index) noexcept {
  if (index < 0) { return first_line; }
  int line = first_line;
  std::ptrdiff_t start = 0;  // in code units
  std::size_t at = 0;
  while (at < size) {
    const std::uint8_t head = table[at];
    if ((head & 0x80U) == 0) { return -1; }  // not an entry's first byte: a table we cannot read
    const unsigned code = (head >> 3U) & 15U;
    const std::ptrdiff_t end = start + (head & 7U) + 1;
    std::size_t next = at + 1;
    if (code == 13 || code == 14) {  // no columns, long form: the line delta comes first
      line += read_signed_varint(table, size, next);
    } else if (code >= 10 && code <= 12) {  // one-line forms
      line += static_cast<int>(code) - 10;
    }
    if (index < end) { return code == 15 ? -1 : line; }
    start = end;
    for (at = next; at < size && (table[at] & 0x80U) == 0; ++at) {}
  }
  return -1;
}

}  // namespace gpuguard::detail
