// The leak report: what is live at the end, grouped by site and resolved, as text and as JSON; and
// the out-of-memory report.
#include <gpuguard/core/tracking.hpp>

#include <gpuguard/device.hpp>

#include "ledger/postmortem.hpp"
#include "ledger/stacks.hpp"
#include "tracking/report_json.hpp"
#include "util/file.hpp"
#include "util/format.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <unistd.h>

namespace gpuguard {

namespace {

// One bit per tag id: set by declare_exit_holder, read when the report is made.
std::array<std::atomic<std::uint64_t>, (max_tags + 63) / 64> exit_holders{};

}  // namespace

void declare_exit_holder(tag_id tag) noexcept {
  if (tag >= max_tags) { return; }
  exit_holders[tag / 64].fetch_or(std::uint64_t{1} << (tag % 64), std::memory_order_relaxed);
  detail::postmortem::note_exit_holder(tag);  // so that a post-mortem tells held from leaked
}

bool is_exit_holder(tag_id tag) noexcept {
  return tag < max_tags && (exit_holders[tag / 64].load(std::memory_order_relaxed) >> (tag % 64) & 1U) != 0;
}

leak_report collect_leaks(std::size_t max_resolved) {
  ledger_snapshot snap = snapshot(true);
  leak_report report = group_leaks(snap.live, max_resolved);
  report.misuse = snap.misuse;
  report.devices = std::move(snap.devices);
  report.pools = pool_holdings();
  return report;
}

leak_report group_leaks(const std::vector<allocation_record>& live, std::size_t max_resolved) {
  leak_report report;
  std::map<std::tuple<site_id, int, tag_id>, std::size_t> index;
  for (const allocation_record& record : live) {
    const bool held = is_exit_holder(record.tag);
    (held ? report.held_bytes : report.bytes) += record.bytes;
    ++(held ? report.held_count : report.count);
    std::vector<leak_site>& group = held ? report.held : report.sites;
    const auto key = std::make_tuple(record.site, record.device, record.tag);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, group.size()).first;
      leak_site site;
      site.site = record.site;
      site.device = record.device;
      site.tag = tag_name(record.tag);
      group.push_back(std::move(site));
    }
    leak_site& site = group[it->second];
    site.bytes += record.bytes;
    ++site.count;
  }
  const auto largest_first = [](const leak_site& a, const leak_site& b) { return a.bytes > b.bytes; };
  std::stable_sort(report.sites.begin(), report.sites.end(), largest_first);
  std::stable_sort(report.held.begin(), report.held.end(), largest_first);
  for (std::size_t i = 0; i < report.sites.size() && i < max_resolved; ++i) {
    report.sites[i].frames = resolve_site(report.sites[i].site);
  }
  detail::merge_sites_by_location(report.sites);
  // What a holder keeps has sites too: the Python line that made PyTorch's cache grow, say.
  for (std::size_t i = 0; i < report.held.size() && i < max_resolved; ++i) {
    report.held[i].frames = resolve_site(report.held[i].site);
  }
  detail::merge_sites_by_location(report.held);
  return report;
}

std::string detail::location_key(const std::vector<frame_info>& frames) {
  std::string key;
  for (const frame_info& frame : frames) {
    if (frame.function.empty() && frame.file.empty()) { return ""; }
    key += frame.function + '\n' + frame.file + ':' + std::to_string(frame.line) + '\n';
  }
  return key;
}

void detail::merge_sites_by_location(std::vector<leak_site>& sites) {
  // A stack with no resolved frame, or a frame known only by its address, keeps its raw id apart.
  std::map<std::tuple<std::string, int, std::string>, std::size_t> first_of;
  std::vector<leak_site> merged;
  merged.reserve(sites.size());
  for (leak_site& site : sites) {
    std::string key = location_key(site.frames);
    if (key.empty()) { key = "#" + std::to_string(site.site); }
    const auto [it, inserted] = first_of.try_emplace(std::make_tuple(std::move(key), site.device, site.tag), merged.size());
    if (inserted) {
      site.raw_sites.assign(1, site.site);
      merged.push_back(std::move(site));
      continue;
    }
    leak_site& into = merged[it->second];
    into.bytes += site.bytes;
    into.count += site.count;
    into.raw_sites.push_back(site.site);
  }
  std::stable_sort(merged.begin(), merged.end(), [](const leak_site& a, const leak_site& b) { return a.bytes > b.bytes; });
  sites = std::move(merged);
}

namespace {
std::string device_name(int device) {
  return device == host_device_id ? std::string("host") : "device " + std::to_string(device);
}
}  // namespace

namespace {

void write_frames(std::FILE* out, const std::vector<frame_info>& frames, const char* indent) {
  int n = 0;
  for (const frame_info& frame : frames) {
    std::fprintf(out, "[gpuguard] %s#%d %s", indent, n++, frame.function.empty() ? "??" : frame.function.c_str());
    if (!frame.file.empty()) { std::fprintf(out, " at %s:%zu", frame.file.c_str(), frame.line); }
    std::fputc('\n', out);
  }
}

// Under a holder's line: the largest of its sites that have frames (the Python line that made a
// cache grow), `limit` at most.
void write_held_sites(std::FILE* out, const leak_report& report, const std::string& tag, int device, std::size_t limit) {
  std::size_t shown = 0;
  std::size_t more = 0;
  for (const leak_site& site : report.held) {
    if (site.tag != tag || site.device != device || site.frames.empty()) { continue; }
    if (shown == limit) {
      ++more;
      continue;
    }
    ++shown;
    std::fprintf(out, "[gpuguard]     %s in %llu allocation%s from:\n", detail::format_bytes(site.bytes).c_str(),
                 static_cast<unsigned long long>(site.count), site.count == 1 ? "" : "s");
    write_frames(out, site.frames, "      ");
  }
  if (more != 0) { std::fprintf(out, "[gpuguard]     ... %zu more site(s) of it not shown\n", more); }
}

}  // namespace

// The sites of a report, largest first, each with its frames.
void detail::write_leak_sites(std::FILE* out, const leak_report& report, std::size_t max_sites) {
  std::size_t shown = 0;
  for (const leak_site& site : report.sites) {
    if (shown == max_sites) {
      std::fprintf(out, "[gpuguard] ... %zu more site(s) not shown (leak_sites=%zu)\n",
                   report.sites.size() - shown, max_sites);
      break;
    }
    ++shown;
    std::fprintf(out, "[gpuguard] #%zu %s in %llu allocation%s on %s%s%s%s\n", shown,
                 detail::format_bytes(site.bytes).c_str(),
                 static_cast<unsigned long long>(site.count), site.count == 1 ? "" : "s",
                 device_name(site.device).c_str(), site.tag.empty() ? "" : " (tag \"",
                 site.tag.c_str(), site.tag.empty() ? "" : "\")");
    if (site.site == no_site) {
      std::fprintf(out, "[gpuguard]     (no stack: run with GPUGUARD_OPTIONS=stacks=all to see where)\n");
    }
    write_frames(out, site.frames, "    ");
  }
}


void write_leak_text(std::FILE* out, const leak_report& report, std::size_t max_sites) {
  // What a cache keeps until the process ends, by holder and device: said, but not a leak.
  std::map<std::pair<std::string, int>, std::pair<std::size_t, std::uint64_t>> held;
  for (const leak_site& site : report.held) {
    auto& [bytes, count] = held[{site.tag, site.device}];
    bytes += site.bytes;
    count += site.count;
  }
  for (const auto& [who, amount] : held) {
    std::fprintf(out, "[gpuguard] held at exit by %s: %s in %llu allocation%s on %s (kept by it until the "
                 "process ends, when the driver frees it: not a leak)\n",
                 who.first.c_str(), detail::format_bytes(amount.first).c_str(),
                 static_cast<unsigned long long>(amount.second), amount.second == 1 ? "" : "s",
                 device_name(who.second).c_str());
    write_held_sites(out, report, who.first, who.second, std::min<std::size_t>(max_sites, 3));
  }
  for (const pool_holding& pool : report.pools) {
    const pool_statistics& p = pool.statistics;
    std::fprintf(out, "[gpuguard] held at exit by %s: %s reserved in %llu segment%s on %s, %s of it cached and free "
                 "(the pool's cache, kept until the process ends: not a leak)\n",
                 pool.name.c_str(), detail::format_bytes(p.reserved_bytes).c_str(),
                 static_cast<unsigned long long>(p.segments), p.segments == 1 ? "" : "s", device_name(pool.device).c_str(),
                 detail::format_bytes(p.cached_bytes()).c_str());
  }
  if (report.count == 0) {
    std::string peaks;
    for (const auto& [device, c] : report.devices) {
      peaks += ", peak " + detail::format_bytes(c.peak_bytes) + " on " + device_name(device);
    }
    std::uint64_t allocations = 0;
    for (const auto& entry : report.devices) { allocations += entry.second.allocations; }
    std::fprintf(out, "[gpuguard] no leaks: all %llu tracked allocations were freed%s%s\n",
                 static_cast<unsigned long long>(allocations - report.held_count),
                 report.held_count == 0 ? "" : " (the held ones aside)", peaks.c_str());
    return;
  }
  std::fprintf(out, "[gpuguard] LEAK: %s in %llu allocation%s still live, from %zu site%s\n",
               detail::format_bytes(report.bytes).c_str(),
               static_cast<unsigned long long>(report.count), report.count == 1 ? "" : "s",
               report.sites.size(), report.sites.size() == 1 ? "" : "s");
  detail::write_leak_sites(out, report, max_sites);
  const misuse_counts& m = report.misuse;
  if (m.total() != 0) {
    std::fprintf(out, "[gpuguard] misuse: %llu unknown-pointer frees, %llu double frees, "
                 "%llu wrong-size frees, %llu wrong-device frees\n",
                 static_cast<unsigned long long>(m.unknown_pointer),
                 static_cast<unsigned long long>(m.double_free),
                 static_cast<unsigned long long>(m.wrong_size),
                 static_cast<unsigned long long>(m.wrong_device));
  }
}

bool write_leak_json(const std::string& path, const leak_report& report, std::string* error) {
  std::string json = "{\"schema\":\"gpuguard.leaks\",\"version\":1,\"pid\":";
  detail::append_int(json, ::getpid());
  json += ",\"stack_backend\":" + detail::json_string(detail::stack_backend());
  detail::append_field(json, "total_bytes", report.bytes);
  detail::append_field(json, "total_count", report.count);
  json += ",\"devices\":";
  detail::append_device_counters(json, report.devices);
  json += ",\"sites\":";
  detail::append_leak_sites(json, report.sites);
  detail::append_held(json, report);
  json += ",\"misuse\":";
  detail::append_misuse(json, report.misuse);
  json += "}\n";
  return detail::write_file_atomically(path, json, error);
}

}  // namespace gpuguard
