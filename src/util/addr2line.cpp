#include "util/addr2line.hpp"

#include <cinttypes>
#include <cstdio>

namespace gpuguard::detail {

namespace {

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) { quoted += c == '\'' ? std::string("'\\''") : std::string(1, c); }
  return quoted + "'";
}

}  // namespace

std::string addr2line_command(const std::string& addr2line, const std::string& module,
                              const std::vector<std::uint64_t>& addresses, bool inlines) {
  std::string command = shell_quote(addr2line) + (inlines ? " -a -i -f -C -e " : " -a -f -C -e ") + shell_quote(module);
  for (const std::uint64_t address : addresses) {
    char hex[32];
    std::snprintf(hex, sizeof hex, " 0x%" PRIx64, address);
    command += hex;
  }
  return command + " 2>/dev/null";
}

std::vector<addr2line_answer> read_addr2line_output(std::string_view output, std::size_t count) {
  std::vector<addr2line_answer> answers(count);
  std::size_t next = 0;
  addr2line_answer* current = nullptr;
  bool want_function = true;
  while (!output.empty()) {
    const std::size_t newline = output.find('\n');
    std::string_view line = output.substr(0, newline);
    output = newline == std::string_view::npos ? std::string_view() : output.substr(newline + 1);
    while (!line.empty() && line.back() == '\r') { line.remove_suffix(1); }
    if (line.substr(0, 2) == "0x") {
      current = next < answers.size() ? &answers[next++] : nullptr;
      want_function = true;
      continue;
    }
    if (current == nullptr) { continue; }
    if (want_function) {
      if (line != "??") { current->function = std::string(line); }
    } else if (line.substr(0, 2) != "??") {
      current->location = std::string(line);
    }
    want_function = !want_function;
  }
  return answers;
}

std::vector<addr2line_answer> ask_addr2line(const std::string& addr2line, const std::string& module,
                                            const std::vector<std::uint64_t>& addresses, bool inlines) {
  std::FILE* pipe = ::popen(addr2line_command(addr2line, module, addresses, inlines).c_str(), "r");
  if (pipe == nullptr) { return std::vector<addr2line_answer>(addresses.size()); }
  std::string output;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) { output.append(buffer, n); }
  ::pclose(pipe);
  return read_addr2line_output(output, addresses.size());
}

}  // namespace gpuguard::detail
