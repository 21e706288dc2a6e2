// Reading a thread's own Python frames from CPython's memory, without the GIL and without calling
// Python: the layouts of the interpreter's frames, code objects and strings for the CPython
// versions whose layout was checked (x86_64 release builds), and the decoder of a code object's
// location table. Internal to the compiled core (python_frames.cpp walks with it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuguard::detail {

/// Where CPython keeps what a frame walk reads, as byte offsets. One per verified version.
struct python_layout {
  int minor = 0;                         ///< 3.<minor>
  // thread state -> innermost interpreter frame: tstate->cframe->current_frame (3.11, 3.12)
  std::uint32_t thread_cframe = 0;       ///< PyThreadState.cframe
  std::uint32_t cframe_frame = 0;        ///< _PyCFrame.current_frame
  // _PyInterpreterFrame
  std::uint32_t frame_code = 0;          ///< f_code (f_executable from 3.13)
  std::uint32_t frame_previous = 0;
  std::uint32_t frame_instr = 0;         ///< prev_instr (instr_ptr from 3.13)
  std::uint32_t frame_owner = 0;         ///< a char
  int owner_cstack = -1;                 ///< FRAME_OWNED_BY_CSTACK's value (-1: the version has none)
  // PyCodeObject
  std::uint32_t code_filename = 0;
  std::uint32_t code_name = 0;
  std::uint32_t code_qualname = 0;
  std::uint32_t code_linetable = 0;      ///< a bytes object
  std::uint32_t code_firstlineno = 0;    ///< an int
  std::uint32_t code_adaptive = 0;       ///< co_code_adaptive: the code units, inline
  // objects
  std::uint32_t object_type = 0;         ///< PyObject.ob_type
  std::uint32_t bytes_size = 0;          ///< PyVarObject.ob_size
  std::uint32_t bytes_data = 0;          ///< PyBytesObject.ob_sval
  std::uint32_t ascii_length = 0;        ///< PyASCIIObject.length
  std::uint32_t ascii_state = 0;         ///< PyASCIIObject.state (the bits below)
  std::uint32_t ascii_size = 0;          ///< sizeof(PyASCIIObject): a compact ASCII string's text follows
  std::uint32_t compact_utf8_length = 0; ///< PyCompactUnicodeObject.utf8_length
  std::uint32_t compact_utf8 = 0;        ///< PyCompactUnicodeObject.utf8 (the UTF-8 cache, may be null)
};

/// PyASCIIObject.state's bits (3.11 to 3.13): kind (3 bits) at 2, compact at 5, ascii at 6.
inline constexpr std::uint32_t unicode_compact_bit = 1U << 5U;
inline constexpr std::uint32_t unicode_ascii_bit = 1U << 6U;

/// The layout of CPython 3.<minor> on x86_64 (release build), or null where none was verified.
const python_layout* python_layout_for(int major, int minor) noexcept;

/**
 * The line of code unit `index` of a code object whose location table (co_linetable, the format
 * of CPython 3.11+'s Objects/locations.md) is `table` and whose first line is `first_line`, as
 * PyCode_Addr2Line gives it: `first_line` for a negative index, -1 where the table says the unit
 * has no line or does not reach it.
 */
int python_line(const std::uint8_t* table, std::size_t size, int first_line, std::ptrdiff_t index) noexcept;

}  // namespace gpuguard::detail
