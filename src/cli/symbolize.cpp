// `gpuguard symbolize CRASH_FILE`: resolves the raw frames of a crash record (docs/hooks.md) to
// functions and source lines, afterwards and outside the crashed process. Each frame is mapped to
// its module through the record's executable mappings, and each module's addresses go to
// addr2line in one call.
#include "commands.hpp"
#include "json.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace gpuguard::cli {

namespace {

constexpr const char* usage =
    "usage: gpuguard symbolize CRASH_FILE [--addr2line PATH]\n"
    "\n"
    "Resolves the frames of a gpuguard crash record (crash_file=..., schema gpuguard.crash) to\n"
    "functions and source lines, using the executable mappings the record carries and addr2line\n"
    "(binutils). Run it on the machine that crashed, before the binaries change.\n"
    "\n"
    "options:\n"
    "  --addr2line PATH   the addr2line to run (default: addr2line on PATH)\n"
    "  -h, --help         this text\n"
    "\n"
    "exit status: 0 printed, 1 the file cannot be read or holds no crash record, 2 usage error\n";

struct mapping {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::uint64_t offset = 0;
  std::string path;
};

struct frame {
  std::uint64_t address = 0;
  std::string module;
  std::uint64_t module_address = 0;  // what addr2line is given
  std::string function;
  std::string location;
};

bool parse_hex(std::string_view text, std::uint64_t& out) {
  if (text.substr(0, 2) == "0x") { text.remove_prefix(2); }
  if (text.empty() || text.size() > 16) { return false; }
  std::uint64_t value = 0;
  for (const char c : text) {
    int digit = 0;
    if (c >= '0' && c <= '9') { digit = c - '0'; }
    else if (c >= 'a' && c <= 'f') { digit = c - 'a' + 10; }
    else if (c >= 'A' && c <= 'F') { digit = c - 'A' + 10; }
    else { return false; }
    value = value * 16 + static_cast<std::uint64_t>(digit);
  }
  out = value;
  return true;
}

// "start-end perms offset dev inode path"
bool parse_mapping(const std::string& line, mapping& out) {
  std::istringstream in(line);
  std::string range;
  std::string perms;
  std::string offset;
  std::string device;
  std::string inode;
  if (!(in >> range >> perms >> offset >> device >> inode)) { return false; }
  std::getline(in >> std::ws, out.path);
  const std::size_t dash = range.find('-');
  return dash != std::string::npos && parse_hex(range.substr(0, dash), out.start) &&
         parse_hex(range.substr(dash + 1), out.end) && parse_hex(offset, out.offset) &&
         !out.path.empty() && out.path[0] == '/';
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) { quoted += c == '\'' ? std::string("'\\''") : std::string(1, c); }
  return quoted + "'";
}

// Runs addr2line once for the frames of one module; fills function and location (the outermost
// of an inlined chain is the real function, so the last pair per address wins).
void resolve_module(const std::string& addr2line, const std::string& module, std::vector<frame*>& frames) {
  std::string command = shell_quote(addr2line) + " -a -f -C -e " + shell_quote(module);
  for (const frame* f : frames) {
    char hex[32];
    std::snprintf(hex, sizeof hex, " 0x%" PRIx64, f->module_address);
    command += hex;
  }
  command += " 2>/dev/null";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) { return; }
  char buffer[4096];
  std::size_t next = 0;
  frame* current = nullptr;
  bool want_function = true;
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    std::string line(buffer);
    line.erase(line.find_last_not_of("\r\n") + 1);
    if (line.compare(0, 2, "0x") == 0) {
      current = next < frames.size() ? frames[next++] : nullptr;
      want_function = true;
      continue;
    }
    if (current == nullptr) { continue; }
    if (want_function) {
      if (line != "??") { current->function = line; }
    } else if (line.compare(0, 2, "??") != 0) {
      current->location = line;
    }
    want_function = !want_function;
  }
  ::pclose(pipe);
}

int symbolize_record(const json_value& record, const std::string& addr2line) {
  const json_value* signal_name = record.find("signal_name");
  const json_value* thread = record.find("thread");
  const json_value* address = record.find("address");
  const json_value* pid = record.find("pid");
  std::printf("%s in thread %lld of process %lld, fault address %s\n",
              signal_name != nullptr && signal_name->is_string() ? signal_name->as_string().c_str() : "signal",
              thread != nullptr && thread->is_integer() ? static_cast<long long>(thread->as_integer()) : 0LL,
              pid != nullptr && pid->is_integer() ? static_cast<long long>(pid->as_integer()) : 0LL,
              address != nullptr && address->is_string() ? address->as_string().c_str() : "?");

  std::vector<mapping> mappings;
  if (const json_value* m = record.find("mappings"); m != nullptr && m->is_array()) {
    for (const json_value& line : m->as_array()) {
      mapping parsed;
      if (line.is_string() && parse_mapping(line.as_string(), parsed)) { mappings.push_back(parsed); }
    }
  }
  std::vector<frame> frames;
  if (const json_value* f = record.find("frames"); f != nullptr && f->is_array()) {
    for (const json_value& value : f->as_array()) {
      frame parsed;
      if (!value.is_string() || !parse_hex(value.as_string(), parsed.address) || parsed.address == 0) { continue; }
      frames.push_back(parsed);
    }
  }
  std::map<std::string, std::vector<frame*>> by_module;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    frame& f = frames[i];
    // The first frame is the faulting instruction; the others are return addresses, which point
    // after their call: look up the call itself.
    const std::uint64_t lookup = i == 0 ? f.address : f.address - 1;
    for (const mapping& m : mappings) {
      if (lookup >= m.start && lookup < m.end) {
        f.module = m.path;
        f.module_address = lookup - m.start + m.offset;
        by_module[m.path].push_back(&f);
        break;
      }
    }
  }
  for (auto& [module, module_frames] : by_module) { resolve_module(addr2line, module, module_frames); }

  std::printf("frames:\n");
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const frame& f = frames[i];
    std::printf("  #%zu 0x%" PRIx64 " %s", i, f.address, f.function.empty() ? "??" : f.function.c_str());
    if (!f.location.empty()) { std::printf(" at %s", f.location.c_str()); }
    if (!f.module.empty()) {
      const std::size_t slash = f.module.rfind('/');
      std::printf(" (%s+0x%" PRIx64 ")", f.module.c_str() + (slash == std::string::npos ? 0 : slash + 1), f.module_address);
    }
    std::printf("\n");
  }
  if (const json_value* devices = record.find("devices"); devices != nullptr && devices->is_array()) {
    for (const json_value& d : devices->as_array()) {
      const json_value* device = d.find("device");
      const json_value* bytes = d.find("live_bytes");
      const json_value* count = d.find("live_count");
      if (device == nullptr || bytes == nullptr || count == nullptr || !device->is_integer() ||
          !bytes->is_integer() || !count->is_integer()) { continue; }
      std::printf("live on %s: %lld bytes in %lld allocations\n",
                  device->as_integer() < 0 ? "host memory" : ("device " + std::to_string(device->as_integer())).c_str(),
                  static_cast<long long>(bytes->as_integer()), static_cast<long long>(count->as_integer()));
    }
  }
  return 0;
}

}  // namespace

int symbolize_main(int argc, char** argv) {
  std::string path;
  std::string addr2line = "addr2line";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (arg == "--addr2line") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpuguard symbolize: --addr2line needs a path\n");
        return 2;
      }
      addr2line = argv[++i];
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "gpuguard symbolize: unknown option '%s' (see --help)\n", argv[i]);
      return 2;
    } else if (path.empty()) {
      path = arg;
    } else {
      std::fprintf(stderr, "gpuguard symbolize: one crash file at a time; extra argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (path.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "gpuguard symbolize: cannot read '%s': %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  std::string line;
  int records = 0;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) { continue; }
    json_error error;
    const std::optional<json_value> record = parse_json(line, &error);
    const json_value* schema = record ? record->find("schema") : nullptr;
    if (!record || schema == nullptr || !schema->is_string() || schema->as_string() != "gpuguard.crash") {
      std::fprintf(stderr, "gpuguard symbolize: %s:%d: not a gpuguard crash record%s%s\n", path.c_str(), number,
                   record ? "" : ": ", record ? "" : error.message.c_str());
      continue;
    }
    if (records++ > 0) { std::printf("\n"); }
    symbolize_record(*record, addr2line);
  }
  if (records == 0) {
    std::fprintf(stderr, "gpuguard symbolize: '%s' holds no crash record\n", path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace gpuguard::cli
