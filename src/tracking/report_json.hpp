// The pieces of the leak report that several outputs share, so that each is spelled in one place:
// its JSON (the leak report file, the JSONL event log's `leaks`, `sites` and `end` lines) and its
// sites as text (the report at exit, the out-of-memory report). Internal to libgpuguard.
#pragma once

#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/tracking.hpp>

#include "util/json_text.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpuguard::detail {

/// `[{"address":"0x..","function":..,"file":..,"line":..},...]`
void append_frames(std::string& out, const std::vector<frame_info>& frames);

/// `,"raw_sites":[..],"frames":[...]`: the raw stack ids grouped into a site and its resolved frames,
/// as the leak report's sites and the event log's `sites` line end.
void append_site_stack(std::string& out, const std::vector<site_id>& raw_sites, const std::vector<frame_info>& frames);

/// `[{"device":..,"current_bytes":..,"peak_bytes":..,"total_bytes":..,"allocations":..,"frees":..},...]`
void append_device_counters(std::string& out, const std::vector<std::pair<int, counters>>& devices);

/// `{"unknown_pointer":..,"double_free":..,"wrong_size":..,"wrong_device":..}`
void append_misuse(std::string& out, const misuse_counts& misuse);

/// `[{"site":..,"device":..,"tag":..,"bytes":..,"count":..,"raw_sites":[..],"frames":[...]},...]`
void append_leak_sites(std::string& out, const std::vector<leak_site>& sites);

/// `,"held_bytes":..,"held_count":..,"held":[sites]`: what was still allocated at exit but held on
/// purpose, as the leak report file and the event log's `leaks` line write it.
void append_held(std::string& out, const leak_report& report);

/// Makes sites whose resolved frames name the same functions, files and lines (and the same device
/// and tag) one site, keeping their raw ids in `raw_sites`; largest first. Sites without resolved
/// frames stay apart.
void merge_sites_by_location(std::vector<leak_site>& sites);

/// Writes the report's sites as text, largest first, each with its frames; past `max_sites`, a
/// line saying how many more there are.
void write_leak_sites(std::FILE* out, const leak_report& report, std::size_t max_sites);

/// The key of a resolved stack for grouping sites by location: "" when some frame is unknown.
std::string location_key(const std::vector<frame_info>& frames);

}  // namespace gpuguard::detail
