// The summary line and the JSON report of `gpuguard run`. Sizes, durations and JSON strings go
// through format.hpp, as every other output of gpuguard does.
#include "run_report.hpp"

#include "format.hpp"

#include <cstdio>
#include <cstring>

namespace gpuguard::cli {

namespace {

// At most this many processes are named on the summary line; the report has them all.
constexpr std::size_t max_named = 5;

std::string seconds_text(std::int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6f", static_cast<double>(ns) / 1e9);
  return text;
}

std::string grace_text(std::int64_t ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms) / 1e3);
  return text;
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "4242 python3 (2.50 GiB on GPU 0)"; without NVML the memory is left out here and said once.
std::string describe_holder(const gpu_holder& h, const residue_check& check) {
  std::string text = std::to_string(h.info.pid) + " " + h.info.stat.comm;
  if (!check.nvml_available) { return text; }
  if (const auto bytes = memory_bytes(h)) {
    text += " (" + detail::format_bytes(static_cast<std::size_t>(*bytes));
    return text + (h.memory.size() == 1 ? " on GPU " + std::to_string(h.memory.front().device) + ")" : ")");
  }
  return text + (h.memory.empty() ? " (not listed by NVML)" : " (memory unknown to NVML)");
}

std::string describe_holders(const residue_check& check) {
  std::string text;
  for (std::size_t i = 0; i < check.holders.size() && i < max_named; ++i) {
    text += (i == 0 ? "" : ", ") + describe_holder(check.holders[i], check);
  }
  if (check.holders.size() > max_named) { text += " and " + std::to_string(check.holders.size() - max_named) + " more"; }
  if (!check.nvml_available) { text += " (memory unknown: no NVML)"; }
  return text;
}

// The command's name as people say it: "python3" for "/usr/bin/python3".
std::string command_name(const run_config& config) {
  const std::string& path = config.command.front();
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos || slash + 1 == path.size() ? path : path.substr(slash + 1);
}

void append_holders_json(std::string& out, const residue_check& check, const std::string& prefix) {
  out += "{\"checked\": ";
  out += check.done ? "true" : "false";
  out += ", \"holders\": [";
  for (std::size_t i = 0; i < check.holders.size(); ++i) {
    const gpu_holder& h = check.holders[i];
    out += i == 0 ? "\n      " : ",\n      ";
    out += "{\"pid\": " + std::to_string(h.info.pid) + ", \"comm\": ";
    detail::append_json_string(out, h.info.stat.comm);
    out += ", \"cmdline\": ";
    detail::append_json_string(out, h.info.command);
    out += ", \"files\": [";
    const std::vector<std::string> files = held_paths(h.info, prefix);
    for (std::size_t f = 0; f < files.size(); ++f) {
      if (f > 0) { out += ", "; }
      detail::append_json_string(out, files[f]);
    }
    out += "], \"gpu_memory_bytes\": ";
    const auto bytes = memory_bytes(h);
    out += bytes ? std::to_string(*bytes) : "null";
    out += ", \"gpus\": [";
    for (std::size_t g = 0; g < h.memory.size(); ++g) {
      if (g > 0) { out += ", "; }
      out += "{\"device\": " + std::to_string(h.memory[g].device) + ", \"bytes\": " +
             (h.memory[g].bytes ? std::to_string(*h.memory[g].bytes) : "null") + "}";
    }
    out += "]}";
  }
  out += check.holders.empty() ? "]" : "\n    ]";
  out += ", \"not_inspected\": [";
  for (std::size_t i = 0; i < check.not_inspected.size(); ++i) {
    if (i > 0) { out += ", "; }
    out += "{\"pid\": " + std::to_string(check.not_inspected[i].first) + ", \"error\": ";
    detail::append_json_string(out, std::strerror(check.not_inspected[i].second));
    out += "}";
  }
  out += "], \"nvml\": {\"queried\": ";
  out += check.nvml_queried ? "true" : "false";
  out += ", \"available\": ";
  out += check.nvml_available ? "true" : "false";
  out += ", \"note\": ";
  detail::append_json_string(out, check.nvml_note);
  out += "}}";
}

// "GPU clean (0.2 s after the teardown)", or why not: "GPU NOT CLEAN after 5 s: device 0 uses
// 1.00 GiB more than before the job; ... (exit status 125)".
std::string clean_text(const clean_check& c) {
  if (c.clean) { return "GPU clean (" + detail::format_duration(c.waited_ns) + " after the teardown)"; }
  std::string why;
  const auto add = [&why](const std::string& text) { why += (why.empty() ? "" : "; ") + text; };
  if (!c.note.empty()) { add(c.note); }
  for (const clean_check::device& d : c.devices) {
    if (!d.before || !d.after) {
      add("device " + std::to_string(d.index) + "'s memory is unknown");
    } else if (*d.after > *d.before + clean_tolerance_bytes) {
      add("device " + std::to_string(d.index) + " uses " +
          detail::format_bytes(static_cast<std::size_t>(*d.after - *d.before)) + " more than before the job");
    }
  }
  const auto pids = [](const std::vector<int>& list) {
    std::string text;
    for (const int pid : list) { text += (text.empty() ? "" : ", ") + std::to_string(pid); }
    return text;
  };
  if (!c.holders.empty()) { add("processes of the job still hold a GPU device: " + pids(c.holders)); }
  if (!c.listed.empty()) { add("NVML still lists processes of the job: " + pids(c.listed)); }
  return "GPU NOT CLEAN after " + detail::format_duration(c.waited_ns) + ": " + why + " (exit status " +
         std::to_string(exit_not_clean) + ")";
}

}  // namespace

std::string run_summary_line(const run_config& config, const run_outcome& o) {
  std::string line = "[gpuguard run] " + command_name(config);
  const std::string after = " after " + detail::format_duration(o.duration_ns);
  switch (o.how) {
    case run_outcome::end::exited: line += " exited with status " + std::to_string(o.code) + after; break;
    case run_outcome::end::signaled:
      line += " was killed by " + signal_name(o.code) + " (status " + std::to_string(o.exit_status) + ")" + after;
      break;
    case run_outcome::end::not_started: line += " could not be started"; break;
    case run_outcome::end::unknown: line += " ended" + after + ", status unknown (exit status 1)"; break;
  }
  if (o.how != run_outcome::end::not_started) {
    line += o.cgroup.empty() ? "; boundary: subreaper (no cgroup: " + o.boundary_note + ")"
                             : "; boundary: cgroup " + o.cgroup;
  }

  const teardown_result& t = o.teardown;
  std::size_t terminated = 0;
  std::size_t killed = 0;
  std::vector<const leftover*> survivors;
  for (const leftover& l : t.leftovers) {
    if (!l.ended) {
      survivors.push_back(&l);
    } else if (l.sent_sigkill) {
      ++killed;
    } else {
      ++terminated;
    }
  }
  if (t.leftovers.empty()) {
    line += "; no process outlived it";
  } else {
    line += "; " + plural(t.leftovers.size(), "process", "processes") + " outlived it: " +
            std::to_string(terminated) + " ended after SIGTERM";
    if (killed > 0) {
      line += ", " + std::to_string(killed) + " killed with SIGKILL ";
      line += t.cut_short ? "(grace cut short by " + signal_name(t.cut_short_by) + ")"
                          : "after the " + grace_text(config.grace_ms) + " grace";
    }
    if (!survivors.empty()) {
      line += ", " + std::to_string(survivors.size()) + " COULD NOT BE ENDED (";
      for (std::size_t i = 0; i < survivors.size() && i < max_named; ++i) {
        const leftover& l = *survivors[i];
        line += (i == 0 ? "" : ", ") + std::to_string(l.process.pid) + " " + l.process.comm;
        if (l.signal_error != 0) { line += ": " + std::string(std::strerror(l.signal_error)); }
      }
      line += ")";
    }
  }

  if (o.at_end.holders.empty()) {
    line += "; no process of it holds a GPU";
  } else {
    line += "; " + plural(o.at_end.holders.size(), "process", "processes") + " of it held a GPU when it ended: " +
            describe_holders(o.at_end);
    line += o.after_teardown.holders.empty() ? "; none holds one now"
                                             : "; STILL HOLDING A GPU: " + describe_holders(o.after_teardown);
  }
  if (const std::size_t n = o.at_end.not_inspected.size(); n > 0) {
    line += "; " + plural(n, "process", "processes") + " could not be inspected (" +
            std::strerror(o.at_end.not_inspected.front().second) + ")";
  }
  if (o.clean.required) { line += "; " + clean_text(o.clean); }
  for (const std::string& note : o.notes) { line += "; " + note; }
  return line + "\n";
}

std::string run_report_json(const run_config& config, const run_outcome& o) {
  std::string out = "{\n  \"schema\": \"gpuguard.run\",\n  \"version\": 1,\n  \"command\": [";
  for (std::size_t i = 0; i < config.command.size(); ++i) {
    if (i > 0) { out += ", "; }
    detail::append_json_string(out, config.command[i]);
  }
  out += "],\n  \"supervisor_pid\": " + std::to_string(o.supervisor_pid);
  out += ",\n  \"anchor_pid\": " + std::to_string(o.anchor_pid);
  out += ",\n  \"command_pid\": " + (o.command_pid > 0 ? std::to_string(o.command_pid) : std::string("null"));
  out += ",\n  \"start_unix_ns\": " + std::to_string(o.start_unix_ns);
  out += ",\n  \"duration_s\": " + seconds_text(o.duration_ns);
  const char* how = "unknown";
  switch (o.how) {
    case run_outcome::end::exited: how = "exited"; break;
    case run_outcome::end::signaled: how = "signaled"; break;
    case run_outcome::end::not_started: how = "not_started"; break;
    case run_outcome::end::unknown: how = "unknown"; break;
  }
  out += ",\n  \"end\": \"" + std::string(how) + "\"";
  out += ",\n  \"exit_code\": " + (o.how == run_outcome::end::exited ? std::to_string(o.code) : std::string("null"));
  out += ",\n  \"signal\": " + (o.how == run_outcome::end::signaled ? std::to_string(o.code) : std::string("null"));
  out += ",\n  \"signal_name\": ";
  if (o.how == run_outcome::end::signaled) {
    detail::append_json_string(out, signal_name(o.code));
  } else {
    out += "null";
  }
  out += ",\n  \"exec_error\": ";
  if (o.how == run_outcome::end::not_started) {
    detail::append_json_string(out, std::strerror(o.exec_error));
  } else {
    out += "null";
  }
  out += ",\n  \"exit_status\": " + std::to_string(o.exit_status);
  out += ",\n  \"grace_s\": " + seconds_text(config.grace_ms * 1000000);
  out += ",\n  \"boundary\": {\"kind\": ";
  out += o.cgroup.empty() ? "\"subreaper\", \"cgroup\": null" : "\"cgroup\", \"cgroup\": ";
  if (!o.cgroup.empty()) { detail::append_json_string(out, o.cgroup); }
  out += ", \"note\": ";
  detail::append_json_string(out, o.cgroup.empty() ? o.boundary_note : std::string());
  out += "}";
  out += ",\n  \"signals_forwarded\": [";
  bool first = true;
  for (std::size_t s = 1; s < o.forwarded.size(); ++s) {
    if (o.forwarded[s] == 0) { continue; }
    out += first ? "" : ", ";
    first = false;
    out += "{\"signal\": " + std::to_string(s) + ", \"name\": \"" + signal_name(static_cast<int>(s)) +
           "\", \"count\": " + std::to_string(o.forwarded[s]) + "}";
  }
  out += "]";

  const teardown_result& t = o.teardown;
  std::size_t terminated = 0;
  std::size_t killed = 0;
  std::size_t survived = 0;
  for (const leftover& l : t.leftovers) {
    if (!l.ended) {
      ++survived;
    } else if (l.sent_sigkill) {
      ++killed;
    } else {
      ++terminated;
    }
  }
  out += ",\n  \"teardown\": {\"duration_s\": " + seconds_text(t.duration_ns);
  out += ", \"cut_short_by\": " + (t.cut_short ? "\"" + signal_name(t.cut_short_by) + "\"" : std::string("null"));
  out += ", \"terminated\": " + std::to_string(terminated) + ", \"killed\": " + std::to_string(killed) +
         ", \"survived\": " + std::to_string(survived) + ",\n    \"processes\": [";
  for (std::size_t i = 0; i < t.leftovers.size(); ++i) {
    const leftover& l = t.leftovers[i];
    out += i == 0 ? "\n      " : ",\n      ";
    out += "{\"pid\": " + std::to_string(l.process.pid) + ", \"ppid\": " + std::to_string(l.process.ppid) +
           ", \"pgid\": " + std::to_string(l.process.pgid) + ", \"sid\": " + std::to_string(l.process.sid) +
           ", \"comm\": ";
    detail::append_json_string(out, l.process.comm);
    out += ", \"cmdline\": ";
    detail::append_json_string(out, l.cmdline);
    out += std::string(", \"left_group\": ") + (l.left_group ? "true" : "false");
    out += std::string(", \"sigterm\": ") + (l.sent_sigterm ? "true" : "false");
    out += std::string(", \"sigkill\": ") + (l.sent_sigkill ? "true" : "false");
    out += std::string(", \"ended\": ") + (l.ended ? "true" : "false");
    out += ", \"ended_after_s\": " + (l.ended && l.ended_after_ns >= 0 ? seconds_text(l.ended_after_ns) : "null");
    out += ", \"signal_error\": ";
    if (l.signal_error != 0) {
      detail::append_json_string(out, std::strerror(l.signal_error));
    } else {
      out += "null";
    }
    out += "}";
  }
  out += t.leftovers.empty() ? "]}" : "\n    ]}";

  out += ",\n  \"residue\": {\"device_prefix\": ";
  detail::append_json_string(out, config.device_prefix);
  out += ",\n    \"at_end\": ";
  append_holders_json(out, o.at_end, config.device_prefix);
  out += ",\n    \"after_teardown\": ";
  append_holders_json(out, o.after_teardown, config.device_prefix);
  out += "}";
  out += ",\n  \"clean\": ";
  if (!o.clean.required) {
    out += "null";
  } else {
    const clean_check& c = o.clean;
    out += std::string("{\"clean\": ") + (c.clean ? "true" : "false") + ", \"waited_s\": " + seconds_text(c.waited_ns) +
           ", \"tolerance_bytes\": " + std::to_string(clean_tolerance_bytes) + ", \"devices\": [";
    for (std::size_t i = 0; i < c.devices.size(); ++i) {
      const clean_check::device& d = c.devices[i];
      out += (i == 0 ? "" : ", ") + std::string("{\"device\": ") + std::to_string(d.index) +
             ", \"before_bytes\": " + (d.before ? std::to_string(*d.before) : "null") +
             ", \"after_bytes\": " + (d.after ? std::to_string(*d.after) : "null") + "}";
    }
    out += "], \"holders\": [";
    for (std::size_t i = 0; i < c.holders.size(); ++i) { out += (i == 0 ? "" : ", ") + std::to_string(c.holders[i]); }
    out += "], \"listed_by_nvml\": [";
    for (std::size_t i = 0; i < c.listed.size(); ++i) { out += (i == 0 ? "" : ", ") + std::to_string(c.listed[i]); }
    out += "], \"note\": ";
    detail::append_json_string(out, c.note);
    out += "}";
  }
  out += ",\n  \"notes\": [";
  for (std::size_t i = 0; i < o.notes.size(); ++i) {
    if (i > 0) { out += ", "; }
    detail::append_json_string(out, o.notes[i]);
  }
  out += "]\n}\n";
  return out;
}

}  // namespace gpuguard::cli
