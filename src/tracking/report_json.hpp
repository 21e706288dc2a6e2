// The JSON pieces that several outputs share (the leak report file, the JSONL event log's `leaks`,
// `sites` and `end` lines), so that each is spelled in one place. Internal to libgpuguard.
#pragma once

#include <gpuguard/ledger.hpp>
#include <gpuguard/tracking.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuguard::detail {

/// Appends a decimal integer.
void append_int(std::string& out, std::int64_t value);
void append_uint(std::string& out, std::uint64_t value);

/// `[{"address":"0x..","function":..,"file":..,"line":..},...]`
void append_frames(std::string& out, const std::vector<frame_info>& frames);

/// `[{"device":..,"current_bytes":..,"peak_bytes":..,"total_bytes":..,"allocations":..,"frees":..},...]`
void append_device_counters(std::string& out, const std::vector<std::pair<int, counters>>& devices);

/// `{"unknown_pointer":..,"double_free":..,"wrong_size":..,"wrong_device":..}`
void append_misuse(std::string& out, const misuse_counts& misuse);

/// `[{"site":..,"device":..,"tag":..,"bytes":..,"count":..,"frames":[...]},...]`
void append_leak_sites(std::string& out, const std::vector<leak_site>& sites);

/// Makes sites whose resolved frames name the same functions, files and lines (and the same device
/// and tag) one site, keeping their raw ids in `raw_sites`; largest first. Sites without resolved
/// frames stay apart.
void merge_sites_by_location(std::vector<leak_site>& sites);

/// The key of a resolved stack for grouping sites by location: "" when some frame is unknown.
std::string location_key(const std::vector<frame_info>& frames);

}  // namespace gpuguard::detail
