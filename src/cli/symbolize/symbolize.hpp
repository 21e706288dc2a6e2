/// @file
/// @brief The reader of `gpuguard symbolize`: one line of a crash file (schema gpuguard.crash,
/// docs/hooks.md) into the frames placed in their modules, the addr2line call that resolves one
/// module's frames and the reader of its answer, and the text the command prints.
///
/// The file may be damaged (a crash while it was written) or not ours at all: nothing here
/// throws for bad input (only std::bad_alloc), and every field of the record is checked for its
/// kind before it is used.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuguard::cli {

/// An executable mapping of the crashed process: [start, end) at `offset` in the file `path`.
struct crash_mapping {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::uint64_t offset = 0;
  std::string path;
};

/// One raw frame, placed in its module when a mapping holds it.
struct crash_frame {
  std::uint64_t address = 0;
  std::string module;                ///< "" when no mapping holds it
  std::uint64_t module_address = 0;  ///< what addr2line is given: the address in the module's file
  std::string function;              ///< filled by read_addr2line_output
  std::string location;              ///< "file:line", filled by read_addr2line_output
};

/// Live memory on one device at the crash.
struct crash_device {
  std::int64_t device = 0;  ///< -1: host memory
  std::int64_t live_bytes = 0;
  std::int64_t live_count = 0;
};

/// What one crash record says.
struct crash_record {
  std::string signal_name;  ///< "signal" when absent
  std::int64_t thread = 0;
  std::int64_t pid = 0;
  std::string address;      ///< the fault address as written, "?" when absent
  std::vector<crash_mapping> mappings;
  std::vector<crash_frame> frames;
  std::vector<crash_device> devices;
};

/// Reads one line of a crash file. Returns nullopt, with `*why` (when not null) saying why, when
/// the line is not JSON or not a gpuguard crash record. Mappings that do not parse and frames
/// that are not non-zero hexadecimal addresses are left out; each frame is placed in the first
/// mapping that holds it (the first frame is the faulting instruction; the others are return
/// addresses, looked up one byte earlier, at their call).
std::optional<crash_record> read_crash_record(std::string_view line, std::string* why = nullptr);

/// The sh command that resolves `frames` (all of one module) with `addr2line`: every word is
/// quoted, so no path can run anything else.
std::string addr2line_command(const std::string& addr2line, const std::string& module,
                              const std::vector<crash_frame*>& frames);

/// Reads what `addr2line -a -f -C` printed for `frames`, in order: an address line, then pairs of
/// function and file:line (an inlined chain gives several pairs: the last, the outermost, wins).
/// "??" answers are left empty.
void read_addr2line_output(std::string_view output, const std::vector<crash_frame*>& frames);

/// The text `gpuguard symbolize` prints for one record: a headline, "frames:" and one line per
/// frame, and one line per device. Control characters taken from the record are written as
/// escapes, so that each frame stays one line.
std::string format_crash_record(const crash_record& record);

}  // namespace gpuguard::cli
