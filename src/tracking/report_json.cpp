#include "tracking/report_json.hpp"

#include "util/format.hpp"

#include <charconv>
#include <cstdio>

namespace gpuguard::detail {

void append_frames(std::string& out, const std::vector<frame_info>& frames) {
  append_array(out, frames, [](std::string& text, const frame_info& frame) {
    char address[32];
    std::snprintf(address, sizeof address, "0x%llx", static_cast<unsigned long long>(frame.address));
    text += "{\"address\":\"";
    text += address;
    text += "\",\"function\":";
    append_json_string(text, frame.function);
    append_string_field(text, "file", frame.file);
    append_field(text, "line", frame.line);
    text += '}';
  });
}

void append_site_stack(std::string& out, const std::vector<site_id>& raw_sites, const std::vector<frame_info>& frames) {
  out += ",\"raw_sites\":";
  append_uint_array(out, raw_sites);
  out += ",\"frames\":";
  append_frames(out, frames);
}

void append_device_counters(std::string& out, const std::vector<std::pair<int, counters>>& devices) {
  append_array(out, devices, [](std::string& text, const std::pair<int, counters>& device) {
    const counters& c = device.second;
    text += "{\"device\":";
    append_int(text, device.first);
    append_field(text, "current_bytes", c.current_bytes);
    append_field(text, "peak_bytes", c.peak_bytes);
    append_field(text, "total_bytes", c.total_bytes);
    append_field(text, "allocations", c.allocations);
    append_field(text, "frees", c.frees);
    text += '}';
  });
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
  append_array(out, sites, [](std::string& text, const leak_site& site) {
    text += "{\"site\":";
    append_uint(text, site.site);
    append_field(text, "device", site.device);
    append_string_field(text, "tag", site.tag);
    append_field(text, "bytes", site.bytes);
    append_field(text, "count", site.count);
    append_site_stack(text, site.raw_sites, site.frames);
    text += '}';
  });
}

void append_held(std::string& out, const leak_report& report) {
  append_field(out, "held_bytes", report.held_bytes);
  append_field(out, "held_count", report.held_count);
  out += ",\"held\":";
  append_leak_sites(out, report.held);
}

}  // namespace gpuguard::detail
