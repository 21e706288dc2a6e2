// The one way gpuguard runs addr2line (binutils): the stack resolver of the leak report
// (ledger/stacks.cpp) and `gpuguard symbolize` both ask it about addresses in one module's file,
// in one call per module. Internal to gpuguard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpuguard::detail {

/// What addr2line said about one address: the function and its place ("file:line", perhaps with
/// " (discriminator N)"); each is empty where it answered "??". With inlined calls (-i) the last
/// pair of the chain wins: the real function, and the line in it where the inlined code was called.
struct addr2line_answer {
  std::string function;
  std::string location;
};

/// The sh command that asks `addr2line` (`-a -f -C`, and `-i` with `inlines`) about `addresses`,
/// offsets in `module`'s file. Every word is quoted, so no path can run anything else; its stderr
/// goes nowhere.
std::string addr2line_command(const std::string& addr2line, const std::string& module,
                              const std::vector<std::uint64_t>& addresses, bool inlines);

/// Reads what that command printed for `count` addresses, in order: for each, an address line,
/// then pairs of function and location. Output that ends early leaves the rest empty; lines of
/// any length are read whole.
std::vector<addr2line_answer> read_addr2line_output(std::string_view output, std::size_t count);

/// Runs addr2line_command and reads its answers; all empty if it could not be started.
std::vector<addr2line_answer> ask_addr2line(const std::string& addr2line, const std::string& module,
                                            const std::vector<std::uint64_t>& addresses, bool inlines);

}  // namespace gpuguard::detail
