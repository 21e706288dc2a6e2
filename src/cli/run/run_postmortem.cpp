// Post-mortems (run_postmortem.hpp): the region's open parts read after the job, their sites named
// through the module map each process left (addr2line, one call per module), and told three ways.
#include "run/run_postmortem.hpp"

#include "json.hpp"
#include "util/addr2line.hpp"
#include "util/file.hpp"
#include "util/format.hpp"
#include "util/postmortem_region.hpp"
#include "util/signal_name.hpp"

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

namespace gpuguard::cli {

namespace pm = detail::postmortem;

namespace {

constexpr std::size_t sites_kept = 10;
constexpr std::size_t frames_kept = 4;
constexpr std::size_t events_kept = 16;

std::int64_t coarse_now_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

std::int64_t unix_now_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

std::string hex(std::uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

std::string bytes_text(std::int64_t bytes) { return detail::format_bytes(static_cast<std::size_t>(std::max<std::int64_t>(bytes, 0))); }

std::string device_name(int device) { return device < 0 ? "host" : "device " + std::to_string(device); }

bool gpuguard_module(const std::string& path) {
  const std::string name = path.substr(path.rfind('/') + 1);
  return name.rfind("libgpuguard", 0) == 0;
}

// Each site's frames named: its Python lines as the process named them, then its native frames:
// the module each address lies in, then addr2line per module.
std::map<std::uint32_t, std::vector<postmortem_frame>> name_sites(const pm::read_part& part) {
  std::map<std::uint32_t, std::vector<postmortem_frame>> named;
  std::map<std::string, std::vector<std::pair<postmortem_frame*, std::uint64_t>>> by_module;
  for (const pm::read_site& site : part.sites) {
    std::vector<postmortem_frame>& frames = named[site.site];
    for (const pm::read_python_frame& py : site.python) {
      postmortem_frame f;
      f.python = true;
      f.function = py.function;
      f.location = py.file + ":" + std::to_string(py.line);
      frames.push_back(std::move(f));
    }
    const std::size_t native_from = frames.size();
    for (const std::uint64_t address : site.frames) {
      const auto m = std::find_if(part.modules.begin(), part.modules.end(), [address](const pm::read_module& mod) {
        return address >= mod.low && address < mod.high;
      });
      if (m != part.modules.end() && gpuguard_module(m->path)) { continue; }  // gpuguard's own
      postmortem_frame f;
      f.address = address;
      if (m != part.modules.end()) { f.module = m->path; }
      frames.push_back(f);
      if (frames.size() - native_from == frames_kept) { break; }
    }
  }
  for (auto& [site, frames] : named) {
    for (postmortem_frame& f : frames) {
      if (f.python || f.module.empty()) { continue; }
      const auto m = std::find_if(part.modules.begin(), part.modules.end(),
                                  [&f](const pm::read_module& mod) { return mod.path == f.module && f.address >= mod.low && f.address < mod.high; });
      // A return address: the call is the instruction before it.
      by_module[f.module].emplace_back(&f, f.address - m->base - 1);
    }
  }
  for (auto& [module, frames] : by_module) {
    std::vector<std::uint64_t> offsets;
    for (const auto& [f, offset] : frames) { offsets.push_back(offset); }
    const std::vector<detail::addr2line_answer> answers = detail::ask_addr2line("addr2line", module, offsets, true);
    for (std::size_t i = 0; i < frames.size() && i < answers.size(); ++i) {
      frames[i].first->function = answers[i].function;
      frames[i].first->location = answers[i].location;
    }
  }
  return named;
}

std::string oom_kills_text(const postmortem_context& c) {
  return c.oom_counter + " counted " + std::to_string(c.oom_kills) + " OOM kill" + (c.oom_kills == 1 ? "" : "s") +
         " while the job ran";
}

void name_cause(process_postmortem& p, const postmortem_context& c) {
  const bool is_command = c.pids_comparable && p.pid == c.command;
  if (is_command && c.command_signal != 0) {
    p.signal = c.command_signal;
    if (c.command_signal == SIGKILL && c.oom_kills > 0) {
      p.cause = "oom_kill";
      p.cause_text = "killed by SIGKILL, and " + oom_kills_text(c) + ": the OOM killer";
    } else {
      p.cause = "signal";
      p.cause_text = "killed by " + detail::signal_text(c.command_signal);
      // Without a count, SIGKILL may still have been the OOM killer's: say why it cannot be told.
      if (c.command_signal == SIGKILL && c.oom_counter.empty() && !c.oom_note.empty()) {
        p.cause_text += " (whether by the OOM killer is unknown: " + c.oom_note + ")";
      }
    }
  } else if (c.pids_comparable && c.torn_down.count(p.pid) != 0) {
    p.cause = "teardown";
    p.cause_text = "ended by gpuguard run's teardown (it outlived CMD)";
  } else if (c.oom_kills > 0) {
    p.cause = "oom_kill";
    p.signal = SIGKILL;
    p.cause_text = oom_kills_text(c) + ": the OOM killer, most likely";
  } else {
    p.cause = "unknown";
    p.cause_text = "ended without its exit path (SIGKILL or _exit; its parent, not gpuguard run, saw its status)";
  }
}

bool process_gone(pid_t pid, const postmortem_context& c) {
  if (c.job_empty) { return true; }
  if (!c.pids_comparable) { return false; }
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

std::vector<process_postmortem> read_postmortems(int fd, const postmortem_context& context, std::string* note) {
  std::vector<process_postmortem> out;
  const pm::region_reader reader(fd);
  if (!reader.valid()) {
    *note = "the post-mortem region could not be read: " + reader.error();
    return out;
  }
  const std::int64_t now = coarse_now_ns();
  for (const pm::read_part& part : reader.parts()) {
    if (part.closed || !process_gone(part.pid, context)) { continue; }
    process_postmortem p;
    p.pid = part.pid;
    p.program = part.program;
    p.log_path = part.log_path;
    p.events_total = part.events_total;
    p.events_in_flight = part.events_in_flight;
    p.dropped_sites = part.dropped_sites;
    p.dropped_threads = part.dropped_threads;
    name_cause(p, context);
    std::map<std::uint32_t, std::vector<postmortem_frame>> named = name_sites(part);
    std::map<std::uint32_t, std::uint64_t> python_lost;
    for (const pm::read_site& site : part.sites) { python_lost[site.site] = site.python_lost; }
    std::map<std::uint16_t, const pm::read_tag*> tags;
    for (const pm::read_tag& t : part.tags) { tags[t.tag] = &t; }
    std::map<int, postmortem_device> devices;
    for (const pm::read_live& l : part.live) {
      postmortem_device& d = devices[l.device];
      const auto tag = tags.find(l.tag);
      const bool held = tag != tags.end() && tag->second->holder;
      d.device = l.device;
      d.live_bytes += l.bytes;
      d.held_bytes += held ? l.bytes : 0;
      d.live_count += l.count;
      d.allocations += l.allocations;
      d.frees += l.frees;
      d.total_bytes += l.total_bytes;
      if (l.bytes == 0 && !l.in_flight) { continue; }
      std::string tag_text = l.tag == 0 ? "" : tag != tags.end() ? tag->second->name : "tag " + std::to_string(l.tag);
      postmortem_site s{l.site, l.device, l.bytes, l.count, l.in_flight, std::move(tag_text), held, 0, {}};
      if (auto it = named.find(l.site); it != named.end()) { s.frames = it->second; }
      if (auto it = python_lost.find(l.site); it != python_lost.end()) { s.python_lost = it->second; }
      p.sites.push_back(std::move(s));
    }
    for (const auto& [device, peak] : part.device_peaks) {
      postmortem_device& d = devices[device];
      d.device = device;
      d.peak_bytes = peak;
    }
    for (auto& [device, d] : devices) {
      d.peak_bytes = std::max<std::uint64_t>(d.peak_bytes, static_cast<std::uint64_t>(std::max<std::int64_t>(d.live_bytes, 0)));
      p.devices.push_back(d);
    }
    std::stable_sort(p.sites.begin(), p.sites.end(), [](const postmortem_site& a, const postmortem_site& b) { return a.bytes > b.bytes; });
    for (const pm::read_thread& t : part.threads) {
      postmortem_thread pt{t.tid, t.thread, t.depth, {}, {}, t.in_flight};
      for (const pm::read_scope& s : t.scopes) {
        pt.scopes.push_back(s.name);
        pt.scope_ages_ns.push_back(std::max<std::int64_t>(now - s.start_ns, 0));
      }
      p.threads.push_back(std::move(pt));
    }
    const std::size_t first = part.events.size() > events_kept ? part.events.size() - events_kept : 0;
    for (std::size_t i = first; i < part.events.size(); ++i) {
      const pm::read_event& e = part.events[i];
      p.events.push_back({e.index, e.alloc, e.device, e.address, e.bytes, e.site, e.thread, std::max<std::int64_t>(now - e.time_ns, 0)});
    }
    out.push_back(std::move(p));
  }
  return out;
}

json postmortem_json(const process_postmortem& p) {
  json devices = json::array();
  for (const postmortem_device& d : p.devices) {
    devices.push_back({{"device", d.device}, {"live_bytes", d.live_bytes}, {"held_bytes", d.held_bytes}, {"live_count", d.live_count},
                       {"allocations", d.allocations}, {"frees", d.frees}, {"total_bytes", d.total_bytes},
                       {"peak_bytes", d.peak_bytes}});
  }
  json sites = json::array();
  for (std::size_t i = 0; i < p.sites.size() && i < sites_kept; ++i) {
    const postmortem_site& s = p.sites[i];
    json frames = json::array();
    for (const postmortem_frame& f : s.frames) {
      frames.push_back({{"kind", f.python ? "python" : "native"}, {"address", hex(f.address)}, {"module", f.module},
                        {"function", f.function}, {"location", f.location}});
    }
    sites.push_back({{"site", s.site}, {"device", s.device}, {"bytes", s.bytes}, {"count", s.count},
                     {"in_flight", s.in_flight}, {"tag", s.tag}, {"held", s.held},
                     {"python_frames_lost", s.python_lost}, {"frames", std::move(frames)}});
  }
  json threads = json::array();
  for (const postmortem_thread& t : p.threads) {
    json scopes = json::array();
    for (std::size_t i = 0; i < t.scopes.size(); ++i) {
      scopes.push_back({{"name", t.scopes[i]}, {"open_s", std::floor(static_cast<double>(t.scope_ages_ns[i]) / 1e6) / 1e3}});
    }
    threads.push_back({{"tid", t.tid}, {"thread", t.thread}, {"depth", t.depth}, {"scopes", std::move(scopes)},
                       {"in_flight", t.in_flight}});
  }
  json events = json::array();
  for (const postmortem_event& e : p.events) {
    events.push_back({{"index", e.index}, {"type", e.alloc ? "alloc" : "free"}, {"device", e.device},
                      {"address", hex(e.address)}, {"bytes", e.bytes}, {"site", e.site}, {"thread", e.thread},
                      {"age_s", std::floor(static_cast<double>(e.age_ns) / 1e6) / 1e3}});
  }
  return {{"pid", p.pid},
          {"program", p.program},
          {"cause", p.cause},
          {"signal", p.signal != 0 ? json(p.signal) : json(nullptr)},
          {"signal_name", p.signal != 0 ? json(detail::signal_text(p.signal)) : json(nullptr)},
          {"cause_text", p.cause_text},
          {"devices", std::move(devices)},
          {"sites", std::move(sites)},
          {"sites_total", p.sites.size()},
          {"threads", std::move(threads)},
          {"events", std::move(events)},
          {"events_total", p.events_total},
          {"events_in_flight", p.events_in_flight},
          {"dropped_sites", p.dropped_sites},
          {"dropped_threads", p.dropped_threads},
          {"log", p.log_path.empty() ? json(nullptr) : json(p.log_path)},
          {"log_error", p.log_error.empty() ? json(nullptr) : json(p.log_error)}};
}

void write_postmortem_end_line(process_postmortem& p) {
  if (p.log_path.empty()) { return; }
  // Appended, never created: the log is the process's own.
  const int fd = ::open(p.log_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    p.log_error = p.log_path + ": " + std::strerror(errno);
    return;
  }
  std::int64_t start = 0;
  {
    // The log's t=0 in wall time: its start line says it.
    std::ifstream in(p.log_path);
    std::string first;
    std::getline(in, first);
    if (const std::optional<json> line = parse_json(first); line && line->is_object()) {
      if (const json* u = member(*line, "unix_ns"); u != nullptr && u->is_number_integer()) { start = u->get<std::int64_t>(); }
    }
  }
  json devices = json::array();
  for (const postmortem_device& d : p.devices) {
    devices.push_back({{"device", d.device}, {"current_bytes", std::max<std::int64_t>(d.live_bytes, 0)},
                       {"peak_bytes", d.peak_bytes}, {"total_bytes", std::max<std::int64_t>(d.total_bytes, 0)},
                       {"allocations", std::max<std::int64_t>(d.allocations, 0)}, {"frees", std::max<std::int64_t>(d.frees, 0)}});
  }
  json line = {{"v", 1},
               {"type", "end"},
               {"t", start > 0 ? std::max<std::int64_t>(unix_now_ns() - start, 0) : 0},
               {"reason", "postmortem"},
               {"dropped", 0},
               {"devices", std::move(devices)},
               {"misuse", {{"unknown_pointer", 0}, {"double_free", 0}, {"wrong_size", 0}, {"wrong_device", 0}}},
               {"postmortem", postmortem_json(p)}};
  // A line the dead writer cut short is ended first, so that this one stands on its own.
  std::string text;
  {
    std::ifstream in(p.log_path, std::ios::binary | std::ios::ate);
    const auto size = static_cast<std::streamoff>(in.tellg());
    if (size > 0) {
      in.seekg(size - 1);
      if (in.get() != '\n') { text += '\n'; }
    }
  }
  text += line.dump();
  text += '\n';
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) { continue; }
    if (n <= 0) {
      p.log_error = p.log_path + ": " + std::strerror(errno);
      break;
    }
    written += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

std::string postmortem_text(const process_postmortem& p) {
  const std::string prefix = "[gpuguard run] ";
  const std::string program = p.program.substr(p.program.rfind('/') + 1);
  std::string out = prefix + "post-mortem of pid " + std::to_string(p.pid) + " (" + program + "): " + p.cause_text + "\n";
  std::string live;
  for (const postmortem_device& d : p.devices) {
    if (d.live_bytes == 0) { continue; }
    live += (live.empty() ? "" : "; ") + device_name(d.device) + " " + bytes_text(d.live_bytes) + " in " +
            std::to_string(d.live_count);
    if (d.held_bytes != 0) { live += " (" + bytes_text(d.held_bytes) + " of it held by caches until exit: not leaked)"; }
  }
  out += prefix + "  live when it died: " + (live.empty() ? "nothing" : live) + "\n";
  for (std::size_t i = 0; i < p.sites.size() && i < sites_kept; ++i) {
    const postmortem_site& s = p.sites[i];
    // As the leak report tells them: an exit holder's allocations are held by it, not leaked.
    const std::string owner = s.held ? " held by " + s.tag : s.tag.empty() ? "" : " (tag \"" + s.tag + "\")";
    out += prefix;
    out += "    " + bytes_text(s.bytes) + " in " + std::to_string(s.count) + " on " + device_name(s.device);
    out += owner;
    out += s.in_flight ? " (one update in flight) at " : " at ";
    if (s.site == 0) {
      out += "(no stack: stacks=off or not sampled)";
    } else if (s.frames.empty()) {
      out += "site " + std::to_string(s.site) + " (frames not kept)";
    }
    for (std::size_t f = 0; f < s.frames.size(); ++f) {
      const postmortem_frame& fr = s.frames[f];
      out += (f == 0 ? "" : " <- ") + (fr.function.empty() ? hex(fr.address) : fr.function) +
             (fr.location.empty() ? "" : " (" + fr.location + ")");
    }
    if (s.python_lost != 0) { out += " (" + std::to_string(s.python_lost) + " Python frames not kept: the region's text area was full)"; }
    out += "\n";
  }
  if (p.sites.size() > sites_kept) { out += prefix + "    ... and " + std::to_string(p.sites.size() - sites_kept) + " more sites\n"; }
  for (const postmortem_thread& t : p.threads) {
    std::string chain;
    for (const std::string& s : t.scopes) { chain += (chain.empty() ? "" : " > ") + s; }
    if (t.depth > t.scopes.size() + t.in_flight) { chain += " > (" + std::to_string(t.depth - t.scopes.size()) + " deeper)"; }
    out += prefix;
    out += "  open scopes of thread " + std::to_string(t.thread);
    out += " (tid " + std::to_string(t.tid) + "): ";
    out += chain;
    out += "\n";
  }
  if (!p.events.empty()) {
    out += prefix + "  last events (" + std::to_string(p.events.size()) + " of " + std::to_string(p.events_total) + "):";
    const std::size_t from = p.events.size() > 4 ? p.events.size() - 4 : 0;
    for (std::size_t i = from; i < p.events.size(); ++i) {
      const postmortem_event& e = p.events[i];
      out += std::string(i == from ? " " : "; ") + (e.alloc ? "alloc " : "free ") +
             detail::format_bytes(static_cast<std::size_t>(e.bytes)) + " on " + device_name(e.device);
    }
    out += "\n";
  }
  if (p.events_in_flight != 0) { out += prefix + "  an event was being recorded when it died (left out)\n"; }
  if (!p.log_error.empty()) { out += prefix + "  its log could not be ended: " + p.log_error + "\n"; }
  return out;
}

}  // namespace gpuguard::cli
