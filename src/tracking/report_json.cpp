#include "tracking/report_json.hpp"

#include "util/format.hpp"

#include <charconv>
#include <cstdio>

namespace gpuguard::detail {

void append_frames(std::string& out, const std::vector<frame_info>& frames) {
  out += '[';
  bool first = true;
  for (const frame_info& frame : frames) {
    out += first ? "" : ",";
    first = false;
    char address[32];
    std::snprintf(address, sizeof address, "0x%llx", static_cast<unsigned long long>(frame.address));
    out += "{\"address\":\"";
    out += address;
    out += "\",\"function\":";
    append_json_string(out, frame.function);
    out += ",\"file\":";
    append_json_string(out, frame.file);
    out += ",\"line\":";
    append_uint(out, frame.line);
    out += '}';
  }
  out += ']';
}

void append_device_counters(std::string& out, const std::vector<std::pair<int, counters>>& devices) {
  out += '[';
  bool first = true;
  for (const auto& [device, c] : devices) {
    out += first ? "" : ",";
    first = false;
    out += "{\"device\":";
    append_int(out, device);
    out += ",\"current_bytes\":";
    append_uint(out, c.current_bytes);
    out += ",\"peak_bytes\":";
    append_uint(out, c.peak_bytes);
    out += ",\"total_bytes\":";
    append_uint(out, c.total_bytes);
    out += ",\"allocations\":";
    append_uint(out, c.allocations);
    out += ",\"frees\":";
    append_uint(out, c.frees);
    out += '}';
  }
  out += ']';
}

void append_misuse(std::string& out, const misuse_counts& m) {
  out += "{\"unknown_pointer\":";
  append_uint(out, m.unknown_pointer);
  out += ",\"double_free\":";
  append_uint(out, m.double_free);
  out += ",\"wrong_size\":";
  append_uint(out, m.wrong_size);
  out += ",\"wrong_device\":";
  append_uint(out, m.wrong_device);
  out += '}';
}

void append_leak_sites(std::string& out, const std::vector<leak_site>& sites) {
  out += '[';
  bool first = true;
  for (const leak_site& site : sites) {
    out += first ? "" : ",";
    first = false;
    out += "{\"site\":";
    append_uint(out, site.site);
    out += ",\"device\":";
    append_int(out, site.device);
    out += ",\"tag\":";
    append_json_string(out, site.tag);
    out += ",\"bytes\":";
    append_uint(out, site.bytes);
    out += ",\"count\":";
    append_uint(out, site.count);
    out += ",\"raw_sites\":";
    append_uint_array(out, site.raw_sites);
    out += ",\"frames\":";
    append_frames(out, site.frames);
    out += '}';
  }
  out += ']';
}

}  // namespace gpuguard::detail
