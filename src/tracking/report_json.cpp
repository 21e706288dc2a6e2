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
    append_string_field(out, "file", frame.file);
    append_field(out, "line", frame.line);
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
    append_field(out, "current_bytes", c.current_bytes);
    append_field(out, "peak_bytes", c.peak_bytes);
    append_field(out, "total_bytes", c.total_bytes);
    append_field(out, "allocations", c.allocations);
    append_field(out, "frees", c.frees);
    out += '}';
  }
  out += ']';
}

void append_misuse(std::string& out, const misuse_counts& m) {
  out += "{\"unknown_pointer\":";
  append_uint(out, m.unknown_pointer);
  append_field(out, "double_free", m.double_free);
  append_field(out, "wrong_size", m.wrong_size);
  append_field(out, "wrong_device", m.wrong_device);
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
    append_field(out, "device", site.device);
    append_string_field(out, "tag", site.tag);
    append_field(out, "bytes", site.bytes);
    append_field(out, "count", site.count);
    out += ",\"raw_sites\":";
    append_uint_array(out, site.raw_sites);
    out += ",\"frames\":";
    append_frames(out, site.frames);
    out += '}';
  }
  out += ']';
}

}  // namespace gpuguard::detail
