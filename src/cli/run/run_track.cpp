// The supervisor's side of --track: each tracked process that used CUDA writes DIR/PID.json at
// exit (schema gpuguard.track, src/preload/preload.cpp); this reads them after the job.
#include "run/run_track.hpp"

#include "util/format.hpp"
#include "json.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <dirent.h>
#include <unistd.h>

namespace gpuguard::cli {

std::string make_track_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/gpuguard-track-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  if (::mkdtemp(name.data()) == nullptr) { return ""; }
  return name.data();
}

namespace {

std::int64_t integer(const json& record, const char* name) {
  const json* v = member(record, name);
  return v != nullptr && v->is_number_integer() ? v->get<std::int64_t>() : 0;
}

std::string bytes_text(std::int64_t bytes) {
  return bytes < 0 ? "-" + detail::format_bytes(static_cast<std::size_t>(-bytes))
                   : detail::format_bytes(static_cast<std::size_t>(bytes));
}

// "pid 123 (python3): LEAK 9.0 MiB in 3; held 1.0 GiB (a cache); device 0: peak 2.0 GiB, 300 MiB
// unattributed; exit 0"
std::string line_for(const json& record) {
  std::string program;
  if (const json* p = member(record, "program"); p != nullptr && p->is_string()) {
    const auto& path = p->get_ref<const std::string&>();
    program = path.substr(path.rfind('/') + 1);
  }
  std::string line = "[gpuguard] --track: pid " + std::to_string(integer(record, "pid")) + " (" + program + "): ";
  const std::int64_t leaked = integer(record, "leaked_bytes");
  const std::int64_t leaked_count = integer(record, "leaked_count");
  if (member(record, "leaked_bytes") == nullptr) {
    line += "allocated nothing";
  } else if (leaked_count == 0) {
    line += "no leaks";
  } else {
    line += "LEAK " + bytes_text(leaked) + " in " + std::to_string(leaked_count) + " allocation" + (leaked_count == 1 ? "" : "s");
  }
  if (const std::int64_t held = integer(record, "held_bytes"); held != 0) { line += "; held at exit by its owners (not leaked) " + bytes_text(held); }
  if (const json* devices = member(record, "devices"); devices != nullptr && devices->is_array()) {
    for (const json& d : *devices) {
      line += "; device " + std::to_string(integer(d, "device")) + ": peak " + bytes_text(integer(d, "peak_bytes"));
      if (integer(d, "pool_reserved_bytes") != 0) { line += ", pool reserve " + bytes_text(integer(d, "pool_reserved_bytes")); }
      if (member(d, "unattributed_bytes") != nullptr) { line += ", " + bytes_text(integer(d, "unattributed_bytes")) + " unattributed"; }
    }
  }
  if (const std::int64_t imported = integer(record, "imported_bytes"); imported != 0) {
    line += "; imported " + bytes_text(imported);
  }
  if (const json* status = member(record, "exit_status"); status != nullptr && status->is_number_integer() && status->get<std::int64_t>() >= 0) {
    line += "; exit " + std::to_string(status->get<std::int64_t>());
  }
  return line;
}

}  // namespace

void write_track_summary(const std::string& dir, std::FILE* out) {
  if (dir.empty()) { return; }
  std::vector<std::pair<long, std::string>> files;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) {
        files.emplace_back(std::strtol(name.c_str(), nullptr, 10), name);
      }
    }
    ::closedir(d);
  }
  std::sort(files.begin(), files.end());
  std::int64_t leaked = 0;
  std::int64_t leaked_count = 0;
  std::size_t used = 0;
  for (const auto& [pid, name] : files) {
    std::string path = dir;
    path += '/';
    path += name;
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    json_error error;
    const std::optional<json> record = parse_json(text.str(), &error);
    if (!record || !record->is_object()) {
      std::fprintf(out, "[gpuguard] --track: the record of pid %ld could not be read (%s)\n", pid, error.message.c_str());
    } else {
      ++used;
      leaked += integer(*record, "leaked_bytes");
      leaked_count += integer(*record, "leaked_count");
      std::fprintf(out, "%s\n", line_for(*record).c_str());
    }
    static_cast<void>(::unlink(path.c_str()));
  }
  // Leftovers (a record being written when its process was killed) go too.
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") { continue; }
      std::string leftover = dir;
      leftover += '/';
      leftover += name;
      static_cast<void>(::unlink(leftover.c_str()));
    }
    ::closedir(d);
  }
  static_cast<void>(::rmdir(dir.c_str()));
  if (used == 0) {
    std::fputs("[gpuguard] --track: no process of the job used the CUDA driver (or none lived to say so)\n", out);
  } else {
    std::fprintf(out, "[gpuguard] --track: %zu process%s used CUDA; leaked in all: %s in %lld allocation%s\n", used,
                 used == 1 ? "" : "es", bytes_text(leaked).c_str(), static_cast<long long>(leaked_count),
                 leaked_count == 1 ? "" : "s");
  }
}

}  // namespace gpuguard::cli
