// The summary line and the JSON report of `gpuguard run`. Sizes and durations go through
// format.hpp, as every other output of gpuguard does; the report is written with nlohmann::json.
#include "run/run_report.hpp"

#include "util/format.hpp"
#include "util/signal_name.hpp"
#include "json.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace gpuguard::cli {

namespace {

// At most this many processes are named on the summary line; the report has them all.
constexpr std::size_t max_named = 5;

// Seconds to the microsecond, from nanoseconds.
json seconds(std::int64_t ns) { return json(std::round(static_cast<double>(ns) / 1e3) / 1e6); }

template <typename T>
json optional_number(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

std::string grace_text(std::int64_t ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms) / 1e3);
  return text;
}

// Which boundary held the job (docs/run.md, "The boundary"): the report's boundary.kind.
const char* boundary_kind(const run_outcome& o) {
  if (!o.cgroup.empty()) { return "cgroup"; }
  return o.pid_namespace ? "pid_namespace" : "subreaper";
}

// The summary line's words for it, with why a stronger one was not used.
std::string boundary_text(const run_outcome& o) {
  if (!o.cgroup.empty()) { return "cgroup " + o.cgroup; }
  const std::string no_cgroup = "no cgroup: " + o.boundary_note;
  if (o.pid_namespace) {
    return std::string("PID namespace") + (o.user_namespace ? " in a user namespace" : "") + " (" + no_cgroup + ")";
  }
  return "subreaper (" + no_cgroup + "; no PID namespace: " + o.namespace_note + ")";
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "4242 python3 (2.50 GiB on GPU 0)"; without NVML the memory is left out here and said once.
std::string describe_holder(const gpu_holder& h, const residue_check& check) {
  std::string text = std::to_string(h.info.pid) + " " + printable_on_one_line(h.info.stat.comm);
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

// The command's name as people say it: "python3" for "/usr/bin/python3"; safe for one line.
std::string command_name(const run_config& config) {
  const std::string& path = config.command.front();
  const std::size_t slash = path.find_last_of('/');
  return printable_on_one_line(slash == std::string::npos || slash + 1 == path.size() ? path : path.substr(slash + 1));
}

json holders_json(const residue_check& check, const std::string& prefix) {
  json holders = json::array();
  for (const gpu_holder& h : check.holders) {
    json gpus = json::array();
    for (const gpu_memory_use& m : h.memory) { gpus.push_back({{"device", m.device}, {"bytes", optional_number(m.bytes)}}); }
    holders.push_back({{"pid", h.info.pid},
                       {"comm", h.info.stat.comm},
                       {"cmdline", h.info.command},
                       {"files", held_paths(h.info, prefix)},
                       {"gpu_memory_bytes", optional_number(memory_bytes(h))},
                       {"gpus", std::move(gpus)}});
  }
  json not_inspected = json::array();
  for (const auto& [pid, error] : check.not_inspected) {
    not_inspected.push_back({{"pid", pid}, {"error", std::strerror(error)}});
  }
  return {{"checked", check.done},
          {"holders", std::move(holders)},
          {"not_inspected", std::move(not_inspected)},
          {"nvml", {{"queried", check.nvml_queried}, {"available", check.nvml_available}, {"note", check.nvml_note}}}};
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
      line += " was killed by " + detail::signal_text(o.code) + " (status " + std::to_string(o.exit_status) + ")" + after;
      break;
    case run_outcome::end::not_started: line += " could not be started"; break;
    case run_outcome::end::unknown: line += " ended" + after + ", status unknown (exit status 1)"; break;
  }
  if (o.how != run_outcome::end::not_started) { line += "; boundary: " + boundary_text(o); }

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
  if (t.leftovers.empty() && t.job_empty && !t.unseen_ended_by_cgroup_kill && !t.unseen_ended_by_namespace_end) {
    line += "; no process outlived it";  // only where the boundary proves it
  } else if (t.leftovers.empty()) {
    line += "; no scan saw a process outlive it";
  } else {
    line += "; " + plural(t.leftovers.size(), "process", "processes") + " outlived it: " +
            std::to_string(terminated) + " ended after SIGTERM";
    if (killed > 0) {
      line += ", " + std::to_string(killed) + " killed with SIGKILL ";
      line += t.cut_short ? "(grace cut short by " + detail::signal_text(t.cut_short_by) + ")"
                          : "after the " + grace_text(config.grace_ms) + " grace";
    }
    if (!survivors.empty()) {
      line += ", " + std::to_string(survivors.size()) + " COULD NOT BE ENDED (";
      for (std::size_t i = 0; i < survivors.size() && i < max_named; ++i) {
        const leftover& l = *survivors[i];
        line += (i == 0 ? "" : ", ") + std::to_string(l.process.pid) + " " + printable_on_one_line(l.process.comm);
        if (!l.signal_error.empty()) { line += ": " + l.signal_error; }
      }
      line += ")";
    }
  }
  if (t.unseen_ended_by_cgroup_kill) { line += "; cgroup.kill ended processes of it that no scan saw"; }
  if (t.unseen_ended_by_namespace_end) { line += "; the end of its PID namespace ended processes of it that no scan saw"; }
  if (!t.job_empty) { line += "; THE JOB MAY STILL HAVE PROCESSES (" + t.not_empty_why + ")"; }
  if (!t.job_empty || !survivors.empty()) { line += " (exit status " + std::to_string(exit_not_ended) + ")"; }

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
  const char* how = "unknown";
  switch (o.how) {
    case run_outcome::end::exited: how = "exited"; break;
    case run_outcome::end::signaled: how = "signaled"; break;
    case run_outcome::end::not_started: how = "not_started"; break;
    case run_outcome::end::unknown: how = "unknown"; break;
  }
  const bool exited = o.how == run_outcome::end::exited;
  const bool signaled = o.how == run_outcome::end::signaled;
  json doc = {{"schema", "gpuguard.run"},
              {"version", 1},
              {"command", config.command},
              {"supervisor_pid", o.supervisor_pid},
              {"anchor_pid", o.anchor_pid},
              {"command_pid", o.command_pid > 0 ? json(o.command_pid) : json(nullptr)},
              {"start_unix_ns", o.start_unix_ns},
              {"duration_s", seconds(o.duration_ns)},
              {"end", how},
              {"exit_code", exited ? json(o.code) : json(nullptr)},
              {"signal", signaled ? json(o.code) : json(nullptr)},
              {"signal_name", signaled ? json(detail::signal_text(o.code)) : json(nullptr)},
              {"exec_error", o.how == run_outcome::end::not_started
                                 ? json(std::string(o.setup_failed ? "fork: " : "") + std::strerror(o.exec_error))
                                 : json(nullptr)},
              {"exit_status", o.exit_status},
              {"grace_s", seconds(config.grace_ms * 1000000)},
              {"boundary",
               {{"kind", boundary_kind(o)},
                {"cgroup", o.cgroup.empty() ? json(nullptr) : json(o.cgroup)},
                {"user_namespace", o.cgroup.empty() && o.pid_namespace && o.user_namespace},
                {"note", o.cgroup.empty() ? o.boundary_note : std::string()},
                {"namespace_note", o.cgroup.empty() && !o.pid_namespace ? o.namespace_note : std::string()}}}};
  json forwarded = json::array();
  for (std::size_t s = 1; s < o.forwarded.size(); ++s) {
    if (o.forwarded[s] == 0) { continue; }
    forwarded.push_back({{"signal", s}, {"name", detail::signal_text(static_cast<int>(s))}, {"count", o.forwarded[s]}});
  }
  doc["signals_forwarded"] = std::move(forwarded);

  const teardown_result& t = o.teardown;
  std::size_t terminated = 0;
  std::size_t killed = 0;
  std::size_t survived = 0;
  json processes = json::array();
  for (const leftover& l : t.leftovers) {
    if (!l.ended) {
      ++survived;
    } else if (l.sent_sigkill) {
      ++killed;
    } else {
      ++terminated;
    }
    processes.push_back({{"pid", l.process.pid},
                         {"ppid", l.process.ppid},
                         {"pgid", l.process.pgid},
                         {"sid", l.process.sid},
                         {"comm", l.process.comm},
                         {"cmdline", l.cmdline},
                         {"left_group", l.left_group},
                         {"sigterm", l.sent_sigterm},
                         {"sigkill", l.sent_sigkill},
                         {"ended", l.ended},
                         {"found_late", l.found_late},
                         {"ended_after_s", l.ended && l.ended_after_ns >= 0 ? seconds(l.ended_after_ns) : json(nullptr)},
                         {"signal_error", !l.signal_error.empty() ? json(l.signal_error) : json(nullptr)}});
  }
  doc["teardown"] = {{"duration_s", seconds(t.duration_ns)},
                     {"cut_short_by", t.cut_short ? json(detail::signal_text(t.cut_short_by)) : json(nullptr)},
                     {"terminated", terminated},
                     {"killed", killed},
                     {"survived", survived},
                     {"job_empty", t.job_empty},
                     {"unseen_ended_by_cgroup_kill", t.unseen_ended_by_cgroup_kill},
                     {"unseen_ended_by_namespace_end", t.unseen_ended_by_namespace_end},
                     {"not_empty_why", t.job_empty ? json(nullptr) : json(t.not_empty_why)},
                     {"processes", std::move(processes)}};
  doc["residue"] = {{"device_prefix", config.device_prefix},
                    {"at_end", holders_json(o.at_end, config.device_prefix)},
                    {"after_teardown", holders_json(o.after_teardown, config.device_prefix)}};
  if (o.clean.required) {
    const clean_check& c = o.clean;
    json devices = json::array();
    for (const clean_check::device& d : c.devices) {
      devices.push_back({{"device", d.index}, {"before_bytes", optional_number(d.before)}, {"after_bytes", optional_number(d.after)}});
    }
    doc["clean"] = {{"clean", c.clean},
                    {"waited_s", seconds(c.waited_ns)},
                    {"tolerance_bytes", clean_tolerance_bytes},
                    {"devices", std::move(devices)},
                    {"holders", c.holders},
                    {"listed_by_nvml", c.listed},
                    {"note", c.note}};
  } else {
    doc["clean"] = nullptr;
  }
  json postmortems = json::array();
  for (const process_postmortem& p : o.postmortems) { postmortems.push_back(postmortem_json(p)); }
  doc["postmortems"] = std::move(postmortems);
  doc["postmortem_note"] = o.postmortem_note.empty() ? json(nullptr) : json(o.postmortem_note);
  doc["notes"] = o.notes;
  // Command lines and process names may be any bytes: what is not UTF-8 becomes U+FFFD.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace gpuguard::cli
