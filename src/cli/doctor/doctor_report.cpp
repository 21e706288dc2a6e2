// Renderings of a `gpuguard doctor` sample (see doctor_report.hpp).
#include "doctor/doctor_report.hpp"

#include "util/format.hpp"
#include "json.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace gpuguard::cli::doctor {

namespace {

using detail::format_bytes;

std::string bytes_text(std::uint64_t b) { return format_bytes(static_cast<std::size_t>(b)); }

std::string fixed(double value, int digits) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

// A number with `digits` decimals, as the document shows it: 2.35, not 2.3500000000000001.
json rounded(double value, int digits = 3) {
  const double scale = std::pow(10.0, digits);
  return json(std::round(value * scale) / scale);
}

// A string, or null when empty (not known).
json string_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

template <typename T>
json optional_number(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json reap_json(const reap_outcome& r) {
  return {{"action", r.action}, {"signals", r.signals}, {"detail", r.detail}};
}

std::optional<std::uint64_t> holder_memory(const holder& h) {
  std::optional<std::uint64_t> total;
  for (const gpu_memory_use& m : h.memory) {
    if (m.bytes) { total = total.value_or(0) + *m.bytes; }
  }
  return total;
}

std::string files_text(const holder& h) {
  std::string out;
  for (const device_use& d : h.info.devices) {
    if (!out.empty()) { out += ", "; }
    out += d.path + " (";
    if (d.fds > 0) { out += std::to_string(d.fds) + (d.fds == 1 ? " fd" : " fds"); }
    if (d.mappings > 0) {
      out += std::string(d.fds > 0 ? ", " : "") + std::to_string(d.mappings) + (d.mappings == 1 ? " mapping" : " mappings");
    }
    out += ")";
  }
  return out;
}

// "45s", "5m", "3h", "2d"; "-" when unknown (age_s is -1).
std::string age_text(double seconds) {
  if (seconds < 0) { return "-"; }
  const double ns = std::min(seconds, 9.0e9) * 1e9;  // within std::int64_t (292 years)
  return detail::format_duration(static_cast<std::int64_t>(ns), detail::duration_precision::coarse);
}

}  // namespace

std::string residue_trend(std::optional<std::uint64_t> first, std::optional<std::uint64_t> last) {
  if (!first || !last) { return "unknown"; }
  const std::uint64_t tolerance = std::max<std::uint64_t>(std::uint64_t{1} << 20, *first / 100);
  if (*last > *first && *last - *first > tolerance) { return "growing"; }
  if (*first > *last && *first - *last > tolerance) { return "shrinking"; }
  return "steady";
}

int exit_status_of(const sample& s) {
  bool reap_failed = false;
  int remaining = 0;
  for (const holder& h : s.holders) {
    bool ended = false;
    if (h.reap) {
      const std::string& a = h.reap->action;
      ended = a == "terminated" || a == "killed" || a == "gone";
      if (a == "failed" || a == "survived") { reap_failed = true; }
    }
    if (h.holds && !ended) { ++remaining; }
  }
  if (reap_failed || s.scan_failed) { return exit_error; }
  return remaining > 0 ? exit_holders : exit_no_holders;
}

std::string render_json(const sample& s) {
  json doc = {{"schema", schema_name},
              {"version", schema_version},
              {"time", s.time},
              {"pid_namespace", string_or_null(s.pid_namespace)},
              {"device_prefix", s.device_prefix},
              {"nvml",
               {{"available", s.nvml_available},
                {"library", string_or_null(s.nvml_library)},
                {"driver_version", string_or_null(s.nvml_driver_version)},
                {"note", string_or_null(s.nvml_note)},
                {"error", string_or_null(s.nvml_error)}}}};

  json devices = json::array();
  for (const device_summary& d : s.devices) {
    devices.push_back({{"index", d.nvml.index},
                       {"name", string_or_null(d.nvml.name)},
                       {"uuid", string_or_null(d.nvml.uuid)},
                       {"minor", optional_number(d.nvml.minor)},
                       {"total_bytes", optional_number(d.nvml.total)},
                       {"used_bytes", optional_number(d.nvml.used)},
                       {"reserved_bytes", optional_number(d.nvml.reserved)},
                       {"process_bytes", d.process_bytes},
                       {"visible_process_bytes", d.visible_process_bytes},
                       {"residue_bytes", optional_number(d.residue_bytes)},
                       {"error", string_or_null(d.nvml.error)}});
  }
  doc["devices"] = std::move(devices);

  json files = json::array();
  for (const device_file_summary& f : s.device_files) { files.push_back({{"path", f.path}, {"holders", f.holders}}); }
  doc["device_files"] = std::move(files);

  json holders = json::array();
  for (const holder& h : s.holders) {
    // A holder known only by NVML, or whose PID names another process here, has no /proc facts.
    const bool here = h.info.exists && !h.pid_names_other;
    const auto known = [here](auto value) { return here ? json(value) : json(nullptr); };
    json held_files = json::array();
    for (const device_use& d : h.info.devices) {
      held_files.push_back({{"path", d.path}, {"fds", d.fds}, {"mappings", d.mappings}});
    }
    json memory = json::array();
    for (const gpu_memory_use& m : h.memory) { memory.push_back({{"device", m.device}, {"bytes", optional_number(m.bytes)}}); }
    holders.push_back({{"pid", h.info.pid},
                       {"ns_pids", here ? json(h.info.ns_pids) : json::array()},
                       {"class", class_name(h.verdict.cls)},
                       {"orphaned", h.verdict.orphaned},
                       {"state", known(std::string(1, h.info.effective_state))},
                       {"state_name", known(state_name(h.info.effective_state))},
                       {"main_thread_exited", here && h.info.main_thread_exited},
                       {"exiting", here && (h.info.stat.flags & pf_exiting) != 0},
                       {"ppid", known(h.info.stat.ppid)},
                       {"pgid", known(h.info.stat.pgid)},
                       {"sid", known(h.info.stat.sid)},
                       {"uid", here ? optional_number(h.info.uid) : json(nullptr)},
                       {"start_time", known(h.info.stat.start_time)},
                       {"age_s", here && h.age_s >= 0 ? rounded(h.age_s, 2) : json(nullptr)},
                       {"comm", known(h.info.stat.comm)},
                       {"command", known(h.info.command)},
                       {"files", std::move(held_files)},
                       {"files_readable", here && h.info.fds_readable},
                       {"gpu_memory", std::move(memory)},
                       {"gpu_memory_bytes", optional_number(holder_memory(h))},
                       {"holds", h.holds},
                       {"named", h.named},
                       {"why", h.verdict.why},
                       {"hint", h.verdict.hint},
                       {"reap", h.reap ? reap_json(*h.reap) : json(nullptr)}});
  }
  doc["holders"] = std::move(holders);

  doc["holder_count"] = s.holder_count;
  doc["residue_bytes"] = optional_number(s.residue_bytes);
  doc["unreadable_processes"] = s.unreadable_processes;
  doc["notes"] = s.notes;
  doc["reap"] = s.reap ? json{{"grace_s", rounded(s.reap->grace_s)},
                              {"available", s.reap->unavailable.empty()},
                              {"note", string_or_null(s.reap->unavailable)}}
                       : json(nullptr);
  if (s.watch) {
    const watch_summary& ws = *s.watch;
    doc["watch"] = {{"interval_s", rounded(ws.interval_s)},
                    {"sample", ws.sample},
                    {"count", optional_number(ws.count)},
                    {"elapsed_s", rounded(ws.elapsed_s)},
                    {"residue_trend", ws.residue_trend},
                    {"residue_first_bytes", optional_number(ws.residue_first_bytes)},
                    {"residue_last_bytes", optional_number(ws.residue_last_bytes)},
                    {"residue_min_bytes", optional_number(ws.residue_min_bytes)},
                    {"residue_max_bytes", optional_number(ws.residue_max_bytes)},
                    {"holders_first", ws.holders_first},
                    {"holders_last", ws.holders_last}};
  } else {
    doc["watch"] = nullptr;
  }
  doc["exit_status"] = s.exit_status;
  // One line per sample (--watch writes JSON lines). Names from /proc may be any bytes: what is
  // not UTF-8 becomes U+FFFD.
  return doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string render_text(const sample& s) {
  std::string out;
  const std::string where = "file under " + s.device_prefix;
  const bool named = std::any_of(s.holders.begin(), s.holders.end(), [](const holder& h) { return h.named; });
  if (named) {
    out += "gpuguard doctor: " + std::to_string(s.holders.size()) +
           (s.holders.size() == 1 ? " named process, " : " named processes, ") + std::to_string(s.holder_count) +
           (s.holder_count == 1 ? " of them holds" : " of them hold") + " a GPU device (a " + where +
           (s.nvml_available ? ", or NVML memory)\n" : ")\n");
  } else if (s.holder_count == 0) {
    out += "gpuguard doctor: no process holds a GPU device (no " + where + " is open or mapped";
    out += s.nvml_available ? "; NVML lists no process)\n" : ")\n";
  } else {
    out += "gpuguard doctor: " + std::to_string(s.holder_count) +
           (s.holder_count == 1 ? " process holds" : " processes hold") + " a GPU device (a " + where +
           " open or mapped" + (s.nvml_available ? ", or memory in NVML's process list" : "") + ")\n";
  }
  if (!s.nvml_note.empty()) { out += s.nvml_note + "\n"; }
  if (!s.nvml_error.empty()) { out += "NVML error: " + s.nvml_error + "\n"; }

  for (const device_summary& d : s.devices) {
    out += "device " + std::to_string(d.nvml.index);
    if (!d.nvml.name.empty()) { out += "  " + d.nvml.name; }
    if (d.nvml.minor) { out += " (" + s.device_prefix + std::to_string(*d.nvml.minor) + ")"; }
    out += ":";
    if (d.nvml.used && d.nvml.total) {
      out += " used " + bytes_text(*d.nvml.used) + " of " + bytes_text(*d.nvml.total);
      if (d.nvml.reserved) { out += " (driver reserve " + bytes_text(*d.nvml.reserved) + " apart)"; }
      out += "; processes " + bytes_text(d.process_bytes);
      if (d.visible_process_bytes != d.process_bytes) {
        out += " (" + bytes_text(d.visible_process_bytes) + " of them visible here)";
      }
      if (d.residue_bytes) { out += "; residue " + bytes_text(*d.residue_bytes); }
    } else {
      out += " memory unknown";
    }
    if (!d.nvml.error.empty()) { out += " [" + d.nvml.error + "]"; }
    out += "\n";
  }
  if (s.residue_bytes && *s.residue_bytes > 0) {
    out += "residue: " + bytes_text(*s.residue_bytes) +
           " of device memory is in use with no process in this PID namespace to account for it: it is held by "
           "processes of another namespace (listed as not_visible when NVML names them) or by the driver "
           "tearing down a context; --watch SECONDS shows whether it drains\n";
  }

  if (!s.holders.empty()) {
    out += "\n";
    char line[512];
    std::snprintf(line, sizeof line, "%8s  %-15s  %-14s  %8s  %6s  %-11s  %s\n", "PID", "CLASS", "STATE", "PPID", "AGE",
                  "GPU MEMORY", "COMMAND");
    out += line;
    for (const holder& h : s.holders) {
      const bool here = h.info.exists && !h.pid_names_other;
      const std::string state =
          here ? std::string(1, h.info.effective_state) + " " + state_name(h.info.effective_state) : "-";
      const std::string ppid = here ? std::to_string(h.info.stat.ppid) : "-";
      const std::optional<std::uint64_t> memory = holder_memory(h);
      const std::string mem = memory ? bytes_text(*memory) : (h.memory.empty() ? "-" : "unknown");
      // One row per process: control characters in a command line would break it.
      std::string command = here ? printable_on_one_line(h.info.command) : "(not in this PID namespace)";
      if (command.size() > 60) { command = command.substr(0, 57) + "..."; }
      std::snprintf(line, sizeof line, "%8d  %-15s  %-14s  %8s  %6s  %-11s  %s\n", h.info.pid, class_name(h.verdict.cls),
                    state.c_str(), ppid.c_str(), here ? age_text(h.age_s).c_str() : "-", mem.c_str(),
                    command.c_str());
      out += line;
      const std::string indent(10, ' ');
      if (!h.info.devices.empty()) { out += indent + "files: " + files_text(h) + "\n"; }
      if (h.named && !h.holds) { out += indent + "holds: nothing (no device file open or mapped, not listed by NVML)\n"; }
      if (here && h.info.ns_pids.size() > 1) {
        out += indent + "pid in nested namespaces:";
        for (std::size_t i = 1; i < h.info.ns_pids.size(); ++i) { out += " " + std::to_string(h.info.ns_pids[i]); }
        out += "\n";
      }
      out += indent + "why:  " + h.verdict.why + "\n";
      out += indent + "next: " + h.verdict.hint + "\n";
      if (h.reap) {
        out += indent + "reap: " + h.reap->action;
        if (!h.reap->signals.empty()) {
          out += " [";
          for (std::size_t i = 0; i < h.reap->signals.size(); ++i) { out += (i > 0 ? " " : "") + h.reap->signals[i]; }
          out += "]";
        }
        out += ": " + h.reap->detail + "\n";
      }
    }
  }
  if (s.reap && !s.reap->unavailable.empty()) {
    out += "\npidfds unavailable (" + s.reap->unavailable +
           "): signals were sent with kill(2) right after each target's start time was checked\n";
  }
  if (s.reap) {
    int targets = 0;
    int ended = 0;
    for (const holder& h : s.holders) {
      if (!h.reap) { continue; }
      ++targets;
      const std::string& a = h.reap->action;
      ended += a == "terminated" || a == "killed" || a == "gone" ? 1 : 0;
    }
    if (targets == 0) {
      out += "\nreap: no holder is orphaned (and no --pid named one): nothing was signalled\n";
    } else {
      out += "\nreap: " + std::to_string(ended) + " of " + std::to_string(targets) +
             (targets == 1 ? " target has" : " targets have") + " ended (grace " + fixed(s.reap->grace_s, 1) +
             " s); no GPU was reset\n";
    }
  }
  if (s.unreadable_processes > 0) {
    out += "\nnote: " + std::to_string(s.unreadable_processes) +
           " processes could not be inspected (permission denied): run as root to see every holder\n";
  }
  for (const std::string& n : s.notes) { out += "note: " + n + "\n"; }
  return out;
}

std::string render_watch_line(const sample& s, const sample& first, const sample& previous) {
  std::string out = "[+" + fixed(s.watch ? s.watch->elapsed_s : 0.0, 1) + " s] sample " +
                    std::to_string(s.watch ? s.watch->sample : 0);
  if (s.watch && s.watch->count) { out += "/" + std::to_string(*s.watch->count); }
  out += ": " + std::to_string(s.holder_count) + (s.holder_count == 1 ? " holder" : " holders");
  if (s.residue_bytes) {
    out += "; residue " + bytes_text(*s.residue_bytes);
    if (first.residue_bytes) {
      out += " (" +
             detail::format_signed_bytes(static_cast<std::int64_t>(*s.residue_bytes) -
                                         static_cast<std::int64_t>(*first.residue_bytes)) +
             " since the first sample)";
    }
  } else {
    out += "; residue unknown";
  }
  std::set<int> before;
  std::set<int> now;
  for (const holder& h : previous.holders) {
    if (h.holds) { before.insert(h.info.pid); }
  }
  for (const holder& h : s.holders) {
    if (h.holds) { now.insert(h.info.pid); }
  }
  for (const int pid : before) {
    if (now.count(pid) == 0) { out += "; PID " + std::to_string(pid) + " gone"; }
  }
  for (const holder& h : s.holders) {
    if (h.holds && before.count(h.info.pid) == 0) {
      out += "; new: PID " + std::to_string(h.info.pid) + " (" + class_name(h.verdict.cls) + ")";
    }
  }
  return out + "\n";
}

std::string render_watch_summary(const sample& last) {
  if (!last.watch) { return ""; }
  const watch_summary& w = *last.watch;
  std::string out = "watch: " + std::to_string(w.sample) + (w.sample == 1 ? " sample" : " samples") + " over " +
                    fixed(w.elapsed_s, 1) + " s; holders " + std::to_string(w.holders_first) + " -> " +
                    std::to_string(w.holders_last) + "; residue ";
  if (w.residue_trend == "unknown") {
    out += "unknown (" + std::string(last.nvml_available ? "fewer than two samples" : "no NVML") + ")";
  } else {
    out += w.residue_trend + ": " + bytes_text(*w.residue_first_bytes) + " -> " + bytes_text(*w.residue_last_bytes) +
           " (min " + bytes_text(w.residue_min_bytes.value_or(0)) + ", max " + bytes_text(w.residue_max_bytes.value_or(0)) +
           ")";
  }
  return out + "\n";
}

namespace {

// A label value in the text exposition format, quoted (format.hpp escapes it).
std::string prometheus_label(std::string_view value) {
  std::string out = "\"";
  gpuguard::detail::append_prometheus_label_value(out, value);
  out += '"';
  return out;
}

// Every metric the doctor writes is a gauge.
void prometheus_family(std::string& out, const char* name, const char* help) {
  gpuguard::detail::append_prometheus_family(out, name, "gauge", help);
}

void prometheus_value(std::string& out, const char* name, const std::string& labels, double value) {
  char number[64];
  std::snprintf(number, sizeof number, "%.17g", value);
  out += name;
  if (!labels.empty()) { out += "{" + labels + "}"; }
  out += ' ';
  out += number;
  out += '\n';
}

}  // namespace

std::string render_prometheus(const sample& s, double time_s) {
  std::string out;
  out.reserve(4096);
  prometheus_family(out, "gpuguard_doctor_holders",
                    "Listed processes that hold a GPU device (a device file open or mapped, or memory in NVML's "
                    "process list).");
  prometheus_value(out, "gpuguard_doctor_holders", "", s.holder_count);

  prometheus_family(out, "gpuguard_doctor_holders_by_class",
                    "Listed processes that hold a GPU device, by class (see gpuguard doctor --help).");
  for (const holder_class c : {holder_class::running, holder_class::stopped, holder_class::zombie,
                               holder_class::uninterruptible, holder_class::orphaned, holder_class::not_visible}) {
    const auto n = std::count_if(s.holders.begin(), s.holders.end(),
                                 [c](const holder& h) { return h.holds && h.verdict.cls == c; });
    prometheus_value(out, "gpuguard_doctor_holders_by_class", "class=" + prometheus_label(class_name(c)),
                     static_cast<double>(n));
  }

  int orphans = 0;
  std::optional<std::uint64_t> orphan_bytes;
  for (const holder& h : s.holders) {
    if (!h.holds || !h.verdict.orphaned) { continue; }
    ++orphans;
    for (const gpu_memory_use& m : h.memory) {
      if (m.bytes) { orphan_bytes = orphan_bytes.value_or(0) + *m.bytes; }
    }
  }
  prometheus_family(out, "gpuguard_doctor_orphans",
                    "Holders left behind by a dead job (class orphaned): what gpuguard doctor --reap ends.");
  prometheus_value(out, "gpuguard_doctor_orphans", "", orphans);
  if (s.nvml_available) {
    prometheus_family(out, "gpuguard_doctor_orphan_bytes", "GPU memory NVML attributes to orphaned holders.");
    prometheus_value(out, "gpuguard_doctor_orphan_bytes", "", static_cast<double>(orphan_bytes.value_or(0)));
  }

  prometheus_family(out, "gpuguard_doctor_nvml_available", "1 when NVML answered, else 0 (memory figures absent).");
  prometheus_value(out, "gpuguard_doctor_nvml_available", "", s.nvml_available ? 1 : 0);
  prometheus_family(out, "gpuguard_doctor_unreadable_processes",
                    "Processes whose descriptors could not be read (another user's, without root).");
  prometheus_value(out, "gpuguard_doctor_unreadable_processes", "", s.unreadable_processes);

  struct device_metric {
    const char* name;
    const char* help;
    std::optional<std::uint64_t> (*get)(const device_summary&);
  };
  const device_metric device_metrics[] = {
      {"gpuguard_doctor_device_total_bytes", "Device memory, per NVML.",
       [](const device_summary& d) { return d.nvml.total; }},
      {"gpuguard_doctor_device_used_bytes", "Used device memory (the driver's reservation apart), per NVML.",
       [](const device_summary& d) { return d.nvml.used; }},
      {"gpuguard_doctor_device_process_bytes", "Device memory NVML attributes to processes of any PID namespace.",
       [](const device_summary& d) -> std::optional<std::uint64_t> { return d.process_bytes; }},
      {"gpuguard_doctor_device_residue_bytes",
       "Used device memory no process visible in this PID namespace accounts for.",
       [](const device_summary& d) { return d.residue_bytes; }},
  };
  for (const device_metric& m : device_metrics) {
    if (s.devices.empty()) { break; }
    prometheus_family(out, m.name, m.help);
    for (const device_summary& d : s.devices) {
      const std::optional<std::uint64_t> v = m.get(d);
      if (!v) { continue; }
      std::string labels;
      gpuguard::detail::append_prometheus_device_labels(labels, d.nvml.index, d.nvml.uuid);
      prometheus_value(out, m.name, labels + ",name=" + prometheus_label(d.nvml.name), static_cast<double>(*v));
    }
  }

  if (s.reap) {
    prometheus_family(out, "gpuguard_doctor_reap_targets",
                      "What --reap did to its targets in this run, by action (terminated, killed, gone, refused, "
                      "survived, failed, skipped).");
    for (const char* action : {"terminated", "killed", "gone", "refused", "survived", "failed", "skipped"}) {
      const auto n = std::count_if(s.holders.begin(), s.holders.end(),
                                   [action](const holder& h) { return h.reap && h.reap->action == action; });
      prometheus_value(out, "gpuguard_doctor_reap_targets", "action=" + prometheus_label(action),
                       static_cast<double>(n));
    }
  }

  prometheus_family(out, "gpuguard_doctor_exit_status",
                    "The doctor's exit status for this sample: 0 no holder, 1 holders, 3 it could not do its job.");
  prometheus_value(out, "gpuguard_doctor_exit_status", "", s.exit_status);
  prometheus_family(out, "gpuguard_doctor_last_sample_timestamp_seconds", "Unix time of this sample.");
  prometheus_value(out, "gpuguard_doctor_last_sample_timestamp_seconds", "", time_s);
  return out;
}

}  // namespace gpuguard::cli::doctor
