// A seeded mutation fuzzer for the crash-record reader of `gpuguard symbolize`
// (src/cli/symbolize.cpp), for ctest: it starts from real crash records
// (tests/fuzz/symbolize_corpus), mutates their bytes, fields, frames and mappings, and checks on
// every line what the reader promises: no exception but std::bad_alloc, the same result twice, a
// one-line reason for a line it refuses; each frame placed in a mapping that holds it (at the
// right offset) or in none when none does; an addr2line command that quotes the module so that sh
// reads back exactly the module's path and the frames' addresses; an addr2line answer (long
// names included) read into the right frames; and a printed text of exactly one line per frame
// and device, of bounded length. Built with the reader under ASan and UBSan.
//
// usage: symbolize_fuzz CORPUS_DIR [--seed N] [--iterations N] [--seconds S]
#include "fuzz_driver.hpp"
#include "symbolize/symbolize.hpp"

#include <cinttypes>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace {

using gpuguard::cli::crash_frame;
using gpuguard::cli::crash_record;

const std::vector<std::string> dictionary = {
    "{", "}", "[", "]", ",", ":", "\"", "\\\"", "\\n", "\\r", "\\u0000", "\\u001b[31m", "\\ud800", "null", "true",
    "-1", "0", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e308", "0.5",
    "\"schema\":\"gpuguard.crash\"", "\"schema\":\"gpuguard.leaks\"", "\"frames\":[", "\"mappings\":[",
    "\"devices\":[", "\"signal_name\":", "\"address\":", "\"thread\":", "\"pid\":", "\"0x0\"", "\"0x1\"",
    "\"0xffffffffffffffff\"", "\"0x10000000000000000\"", "\"0x\"", "\"0xg\"", "\"0x401000\"", "\"0x7f0000001000\"",
    "\"00400000-00500000 r-xp 00000000 08:01 42 /bin/prog\"", "\"0-ffffffffffffffff r-xp 0 0 0 /lib/all.so\"",
    "\"ffffffffffff0000-ffffffffffffffff r-xp ffffffffffffffff 0 0 /x y'z\"",
    "\"00400000-00500000 r-xp 00000000 08:01 42 relative\"", " /path with spaces/it's.so", "'", "'\\\\''",
    "{\"device\":0,\"live_bytes\":1,\"live_count\":1}", "{\"device\":-1,\"live_bytes\":-5,\"live_count\":1}"};

// The words sh reads from a command made of unquoted words and '...' strings (what
// addr2line_command writes; \ outside quotes escapes one character).
std::vector<std::string> sh_words(const std::string& command) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  bool quoted = false;
  for (std::size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (quoted) {
      if (c == '\'') { quoted = false; } else { word += c; }
      continue;
    }
    if (c == ' ') {
      if (in_word) { words.push_back(word); }
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      quoted = in_word = true;
    } else if (c == '\\' && i + 1 < command.size()) {
      word += command[++i];
      in_word = true;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) { words.push_back(word); }
  return words;
}

std::string hex(std::uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%" PRIx64, value);
  return text;
}

bool same(const crash_record& a, const crash_record& b) {
  if (a.signal_name != b.signal_name || a.thread != b.thread || a.pid != b.pid || a.address != b.address ||
      a.mappings.size() != b.mappings.size() || a.frames.size() != b.frames.size() ||
      a.devices.size() != b.devices.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.frames.size(); ++i) {
    if (a.frames[i].address != b.frames[i].address || a.frames[i].module != b.frames[i].module ||
        a.frames[i].module_address != b.frames[i].module_address) {
      return false;
    }
  }
  return true;
}

std::string check_record(const std::string& line, crash_record& record) {
  // Placement: the first frame is looked up at its address, the others one byte earlier.
  for (std::size_t i = 0; i < record.frames.size(); ++i) {
    const crash_frame& f = record.frames[i];
    if (f.address == 0) { return "a frame at address 0 was kept"; }
    const std::uint64_t lookup = i == 0 ? f.address : f.address - 1;
    const gpuguard::cli::crash_mapping* holder = nullptr;
    for (const auto& m : record.mappings) {
      if (lookup >= m.start && lookup < m.end) {
        holder = &m;
        break;
      }
    }
    if (holder == nullptr && !f.module.empty()) { return "frame " + std::to_string(i) + " placed in no mapping's module"; }
    if (holder != nullptr && (f.module != holder->path || f.module_address != lookup - holder->start + holder->offset)) {
      return "frame " + std::to_string(i) + " not placed in the first mapping that holds it";
    }
  }
  for (const auto& m : record.mappings) {
    if (m.path.empty() || m.path[0] != '/') { return "a mapping without an absolute path was kept"; }
  }
  if (record.frames.size() > line.size()) { return "more frames than the line could hold"; }

  // The addr2line command of each module: sh must read back the program, the module and the addresses.
  std::map<std::string, std::vector<crash_frame*>> by_module;
  for (crash_frame& f : record.frames) {
    if (!f.module.empty()) { by_module[f.module].push_back(&f); }
  }
  const std::string addr2line = "/usr/bin/addr2line's";
  for (const auto& [module, frames] : by_module) {
    const std::string command = gpuguard::cli::addr2line_command(addr2line, module, frames);
    if (command.find('\0') != std::string::npos) { return "the addr2line command holds a NUL byte (sh would read less)"; }
    const std::vector<std::string> words = sh_words(command);
    std::vector<std::string> expected = {addr2line, "-a", "-f", "-C", "-e", module};
    for (const crash_frame* f : frames) { expected.push_back(hex(f->module_address)); }
    expected.emplace_back("2>/dev/null");
    if (words != expected) { return "sh reads the addr2line command differently: " + gpuguard_fuzz::escaped(command); }

    // Its answer: an address line, then function and location; a long name is one line too.
    std::string answer;
    for (std::size_t i = 0; i < frames.size(); ++i) {
      const std::string function = i % 3 == 0 ? std::string(5000 + i, 'f') : "fn" + std::to_string(i);
      answer += hex(frames[i]->module_address) + "\n" + function + "\n/src/x.cpp:" + std::to_string(i) + "\n";
      if (i % 4 == 1) { answer += "inlined_into\n/src/y.cpp:" + std::to_string(i) + "\r\n"; }  // the outermost wins
    }
    gpuguard::cli::read_addr2line_output(answer, frames);
    for (std::size_t i = 0; i < frames.size(); ++i) {
      const std::string function = i % 4 == 1 ? "inlined_into" : i % 3 == 0 ? std::string(5000 + i, 'f') : "fn" + std::to_string(i);
      const std::string location = (i % 4 == 1 ? "/src/y.cpp:" : "/src/x.cpp:") + std::to_string(i);
      if (frames[i]->function != function || frames[i]->location != location) {
        return "the addr2line answer was not read into frame " + std::to_string(i) + " of " + module;
      }
    }
    // A garbled answer is only read, never trusted for more than one line per field.
    gpuguard::cli::read_addr2line_output(line, frames);
    for (const crash_frame* f : frames) {
      if (f->function.find('\n') != std::string::npos || f->location.find('\n') != std::string::npos) {
        return "an addr2line field holds a newline";
      }
    }
  }

  // The printed text: a headline, "frames:", one line per frame, one per device; bounded.
  const std::string text = gpuguard::cli::format_crash_record(record);
  std::size_t lines = 0;
  for (const char c : text) { lines += c == '\n' ? 1 : 0; }
  if (text.empty() || text.back() != '\n' || lines != 2 + record.frames.size() + record.devices.size()) {
    return "the printed text is not one line per frame and device: " + gpuguard_fuzz::escaped(text, 600);
  }
  std::size_t resolved = 0;
  for (const crash_frame& f : record.frames) { resolved += f.function.size() + f.location.size(); }
  if (text.size() > 8 * line.size() + 8 * resolved + 256 * (lines + 1)) { return "the printed text is unbounded"; }
  return "";
}

std::string check_line(const std::string& line) {
  std::string why;
  std::optional<crash_record> first;
  try {
    first = gpuguard::cli::read_crash_record(line, &why);
  } catch (const std::bad_alloc&) {
    return "";
  } catch (...) {
    return "read_crash_record threw";
  }
  std::string why_again;
  const std::optional<crash_record> second = gpuguard::cli::read_crash_record(line, &why_again);
  if (first.has_value() != second.has_value() || why != why_again || (first && !same(*first, *second))) {
    return "two reads differ";
  }
  if (!first) {
    if (why.rfind("not a gpuguard crash record", 0) != 0) { return "a refusal that does not say why: " + why; }
    for (const char c : why) {
      if (static_cast<unsigned char>(c) < 0x20) { return "a refusal that is not one printable line: " + gpuguard_fuzz::escaped(why); }
    }
    return "";
  }
  return check_record(line, *first);
}

std::string check(const std::string& text) {
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) { end = text.size(); }
    std::string broken = check_line(text.substr(start, end - start));
    if (!broken.empty()) { return broken; }
    start = end + 1;
  }
  return "";
}

std::string next_input(gpuguard_fuzz::random_source& random, const std::vector<std::string>& corpus) {
  std::string text = random.pick(corpus);
  const std::size_t steps = 1 + random.below(6);
  for (std::size_t i = 0; i < steps; ++i) {
    switch (random.below(4)) {
      case 0: {  // more frames in one place: many addresses, some past every mapping
        const std::size_t at = text.find("\"frames\":[");
        if (at == std::string::npos) { break; }
        std::string frames;
        for (std::size_t n = 1 + random.below(40); n-- > 0;) {
          frames += "\"" + hex(random.one_in(2) ? 0x400000 + random.below(0x200000) : random.below(1u << 31) * 4096) + "\",";
        }
        text.insert(at + 10, frames);
        break;
      }
      case 1: {  // splice another record
        const std::string& other = random.pick(corpus);
        text = text.substr(0, random.below(text.size() + 1)) + other.substr(random.below(other.size() + 1));
        break;
      }
      default: random.mutate_bytes(text, dictionary); break;
    }
  }
  if (text.size() > 65536) { text.resize(65536); }
  return text;
}

}  // namespace

int main(int argc, char** argv) { return gpuguard_fuzz::run("symbolize_fuzz", argc, argv, check, next_input); }
