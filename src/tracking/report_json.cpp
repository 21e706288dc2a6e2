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
    open_object(text, json_field{"device", device.first}, json_field{"current_bytes", c.current_bytes},
                json_field{"peak_bytes", c.peak_bytes}, json_field{"total_bytes", c.total_bytes},
                json_field{"allocations", c.allocations}, json_field{"frees", c.frees});
    text += '}';
  });
}

void append_misuse(std::string& out, const misuse_counts& m) {
  open_object(out, json_field{"unknown_pointer", m.unknown_pointer}, json_field{"double_free", m.double_free},
              json_field{"wrong_size", m.wrong_size}, json_field{"wrong_device", m.wrong_device});
  out += '}';
}

void append_leak_sites(std::string& out, const std::vector<leak_site>& sites) {
  append_array(out, sites, [](std::string& text, const leak_site& site) {
    open_object(text, json_field{"site", site.site}, json_field{"device", site.device}, json_field{"tag", site.tag},
                json_field{"bytes", site.bytes}, json_field{"count", site.count});
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
