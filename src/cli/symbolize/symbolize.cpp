// `gpuguard symbolize CRASH_FILE`: resolves the raw frames of a crash record (docs/hooks.md) to
// functions and source lines, afterwards and outside the crashed process. Each frame is mapped to
// its module through the record's executable mappings, and each module's addresses go to
// addr2line in one call.
#include "symbolize/symbolize.hpp"

#include "command_line.hpp"
#include "docs_path.hpp"
#include "commands.hpp"
#include "json.hpp"
#include "util/addr2line.hpp"
#include "util/format.hpp"

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

constexpr command_help help_text{
    "usage: gpuguard symbolize CRASH_FILE [--addr2line PATH]",
    // what it does
    "Resolves the frames of a gpuguard crash record (crash_file=..., schema gpuguard.crash) to\n"
    "functions and source lines, using the executable mappings the record carries and addr2line\n"
    "(binutils). Run it on the machine that crashed, before the binaries change.",
    // after the options
    "exit status: 0 printed, 1 the file cannot be read or holds no crash record, 2 usage error\n",
    {"symbolize", true, true},
    "hooks.md"};

using detail::parse_hex;

// "start-end perms offset dev inode path"
bool parse_mapping(const std::string& line, crash_mapping& out) {
  std::istringstream in(line);
  std::string range;
  std::string perms;
  std::string offset;
  std::string device;
  std::string inode;
  if (!(in >> range >> perms >> offset >> device >> inode)) { return false; }
  std::getline(in >> std::ws, out.path);
  const std::size_t dash = range.find('-');
  // No file's path holds a NUL: one that does is damage, and would cut the addr2line command short.
  return dash != std::string::npos && parse_hex(range.substr(0, dash), out.start) &&
         parse_hex(range.substr(dash + 1), out.end) && parse_hex(offset, out.offset) &&
         !out.path.empty() && out.path[0] == '/' && out.path.find('\0') == std::string::npos;
}

std::vector<std::uint64_t> module_addresses(const std::vector<crash_frame*>& frames) {
  std::vector<std::uint64_t> addresses;
  addresses.reserve(frames.size());
  for (const crash_frame* f : frames) { addresses.push_back(f->module_address); }
  return addresses;
}

void fill_frames(const std::vector<crash_frame*>& frames, const std::vector<detail::addr2line_answer>& answers) {
  for (std::size_t i = 0; i < frames.size() && i < answers.size(); ++i) {
    if (!answers[i].function.empty()) { frames[i]->function = answers[i].function; }
    if (!answers[i].location.empty()) { frames[i]->location = answers[i].location; }
  }
}

// Runs addr2line once for the frames of one module and fills in their function and location.
void resolve_module(const std::string& addr2line, const std::string& module, const std::vector<crash_frame*>& frames) {
  fill_frames(frames, detail::ask_addr2line(addr2line, module, module_addresses(frames), false));
}

// Appends `text` with control characters as \xNN: a record's strings cannot start a line of their
// own (or send a terminal escape) in what symbolize prints.
void append_printable(std::string& out, std::string_view text) {
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    } else {
      out += c;
    }
  }
}

// The member `name` of `object` if it is a string, an exact integer or an array; nullptr if not.
const json* string_member(const json& object, std::string_view name) {
  const json* value = member(object, name);
  return value != nullptr && value->is_string() ? value : nullptr;
}
const json* integer_member(const json& object, std::string_view name) {
  const json* value = member(object, name);
  return value != nullptr && value->is_number_integer() ? value : nullptr;
}
const json* array_member(const json& object, std::string_view name) {
  const json* value = member(object, name);
  return value != nullptr && value->is_array() ? value : nullptr;
}

}  // namespace

std::optional<crash_record> read_crash_record(std::string_view line, std::string* why) {
  json_error error;
  const std::optional<json> parsed = parse_json(line, &error);
  const json* schema = parsed ? string_member(*parsed, "schema") : nullptr;
  if (schema == nullptr || *schema != "gpuguard.crash") {
    if (why != nullptr) { *why = parsed ? "not a gpuguard crash record" : "not a gpuguard crash record: " + error.message; }
    return std::nullopt;
  }
  const json& record = *parsed;
  crash_record out;
  const json* signal_name = string_member(record, "signal_name");
  const json* thread = integer_member(record, "thread");
  const json* pid = integer_member(record, "pid");
  const json* address = string_member(record, "address");
  out.signal_name = signal_name != nullptr ? signal_name->get<std::string>() : "signal";
  out.thread = thread != nullptr ? thread->get<std::int64_t>() : 0;
  out.pid = pid != nullptr ? pid->get<std::int64_t>() : 0;
  out.address = address != nullptr ? address->get<std::string>() : "?";

  if (const json* m = array_member(record, "mappings")) {
    for (const json& text : *m) {
      crash_mapping parsed_mapping;
      if (text.is_string() && parse_mapping(text.get_ref<const std::string&>(), parsed_mapping)) {
        out.mappings.push_back(std::move(parsed_mapping));
      }
    }
  }
  if (const json* f = array_member(record, "frames")) {
    for (const json& value : *f) {
      crash_frame parsed_frame;
      if (!value.is_string() || !parse_hex(value.get_ref<const std::string&>(), parsed_frame.address) || parsed_frame.address == 0) {
        continue;
      }
      out.frames.push_back(std::move(parsed_frame));
    }
  }
  for (std::size_t i = 0; i < out.frames.size(); ++i) {
    crash_frame& frame = out.frames[i];
    // The first frame is the faulting instruction; the others are return addresses, which point
    // after their call: look up the call itself.
    const std::uint64_t lookup = i == 0 ? frame.address : frame.address - 1;
    for (const crash_mapping& m : out.mappings) {
      if (lookup >= m.start && lookup < m.end) {
        frame.module = m.path;
        frame.module_address = lookup - m.start + m.offset;
        break;
      }
    }
  }
  if (const json* devices = array_member(record, "devices")) {
    for (const json& d : *devices) {
      const json* device = integer_member(d, "device");
      const json* bytes = integer_member(d, "live_bytes");
      const json* count = integer_member(d, "live_count");
      if (device == nullptr || bytes == nullptr || count == nullptr) { continue; }
      out.devices.push_back(crash_device{device->get<std::int64_t>(), bytes->get<std::int64_t>(), count->get<std::int64_t>()});
    }
  }
  return out;
}

std::string addr2line_command(const std::string& addr2line, const std::string& module,
                              const std::vector<crash_frame*>& frames) {
  return detail::addr2line_command(addr2line, module, module_addresses(frames), false);
}

void read_addr2line_output(std::string_view output, const std::vector<crash_frame*>& frames) {
  fill_frames(frames, detail::read_addr2line_output(output, frames.size()));
}

std::string format_crash_record(const crash_record& record) {
  std::string out;
  char number[64];
  append_printable(out, record.signal_name);
  std::snprintf(number, sizeof number, " in thread %lld of process %lld", static_cast<long long>(record.thread),
                static_cast<long long>(record.pid));
  out += number;
  out += ", fault address ";
  append_printable(out, record.address);
  out += "\nframes:\n";
  for (std::size_t i = 0; i < record.frames.size(); ++i) {
    const crash_frame& f = record.frames[i];
    std::snprintf(number, sizeof number, "  #%zu 0x%" PRIx64 " ", i, f.address);
    out += number;
    append_printable(out, f.function.empty() ? "??" : f.function);
    if (!f.location.empty()) {
      out += " at ";
      append_printable(out, f.location);
    }
    if (!f.module.empty()) {
      const std::size_t slash = f.module.rfind('/');
      out += " (";
      append_printable(out, std::string_view(f.module).substr(slash == std::string::npos ? 0 : slash + 1));
      std::snprintf(number, sizeof number, "+0x%" PRIx64 ")", f.module_address);
      out += number;
    }
    out += '\n';
  }
  for (const crash_device& d : record.devices) {
    out += "live on " + (d.device < 0 ? std::string("host memory") : "device " + std::to_string(d.device));
    std::snprintf(number, sizeof number, ": %lld bytes in %lld allocations\n", static_cast<long long>(d.live_bytes),
                  static_cast<long long>(d.live_count));
    out += number;
  }
  return out;
}

int symbolize_main(int argc, char** argv) {
  std::string path;
  std::string addr2line = "addr2line";
  CLI::App app;
  describe_command(app, help_text);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  app.add_option("CRASH_FILE", path, "the crash record (crash_file=... of GPUGUARD_OPTIONS)")->type_name("");
  app.add_option("--addr2line", addr2line, "the addr2line to run (default: addr2line on PATH)")->type_name("PATH");
  if (const std::optional<int> rc = parse_command_line(app, help_text.words, argc, argv)) { return *rc; }
  if (path.empty()) { return usage_error(help_text.words, std::string("no crash file given (") + help_text.usage_line + ")"); }
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "gpuguard symbolize: cannot read '%s': %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  std::string line;
  int records = 0;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) { continue; }
    std::string why;
    std::optional<crash_record> record = read_crash_record(line, &why);
    if (!record) {
      std::fprintf(stderr, "gpuguard symbolize: %s:%d: %s\n", path.c_str(), number, why.c_str());
      continue;
    }
    if (records++ > 0) { std::printf("\n"); }
    std::map<std::string, std::vector<crash_frame*>> by_module;
    for (crash_frame& f : record->frames) {
      if (!f.module.empty()) { by_module[f.module].push_back(&f); }
    }
    for (const auto& [module, module_frames] : by_module) { resolve_module(addr2line, module, module_frames); }
    const std::string text = format_crash_record(*record);
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  if (records == 0) {
    std::fprintf(stderr, "gpuguard symbolize: '%s' holds no crash record\n", path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace gpuguard::cli
