// `gpuguard doctor --reap` (see doctor_reap.hpp): the targets' identities are checked here, then
// the process layer ends them (process/end.hpp), as it ends `gpuguard run`'s leftovers.
#include "doctor/doctor_reap.hpp"

#include "holders/proc.hpp"
#include "process/end.hpp"
#include "util/format.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

namespace gpuguard::cli::doctor {

namespace {

std::string seconds_text(double s) { return detail::format_duration(static_cast<std::int64_t>(s * 1e9)); }

std::int64_t to_ms(double seconds) { return static_cast<std::int64_t>(std::ceil(seconds * 1000.0 - 1e-6)); }

}  // namespace

std::string pidfd_unavailable_reason() { return detail::pidfd_unavailable_reason(); }

std::vector<reap_outcome> reap(const std::vector<reap_target>& targets, const std::string& proc_root, double grace_s,
                               double kill_wait_s) {
  std::vector<reap_outcome> outcomes(targets.size());
  std::vector<std::size_t> chosen;  // index into targets of those handed to the process layer
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const reap_target& t = targets[i];
    reap_outcome& out = outcomes[i];
    const std::string who = "PID " + std::to_string(t.pid);
    const std::optional<proc_stat> now = read_stat(proc_root, t.pid);
    if (!now) {
      out.action = "gone";
      out.detail = who + " had exited before it was signalled";
    } else if (now->start_time != t.start_time) {
      out.action = "refused";
      out.detail = who + " now names another process (start time " + std::to_string(now->start_time) +
                   ", expected " + std::to_string(t.start_time) + "): the PID was reused; not signalled";
    } else if (!now->alive()) {
      out.action = "gone";
      out.detail = who + " had exited (a zombie) before it was signalled";
    } else {
      chosen.push_back(i);
    }
  }
  if (chosen.empty()) { return outcomes; }

  detail::end_plan plan;
  plan.grace_ms = to_ms(grace_s);
  plan.kill_wait_ms = to_ms(kill_wait_s);
  plan.live = [&] {
    std::vector<proc_stat> live;
    for (const std::size_t i : chosen) {
      std::optional<proc_stat> s = read_stat(proc_root, targets[i].pid);
      if (s && s->start_time == targets[i].start_time && s->alive()) { live.push_back(std::move(*s)); }
    }
    return live;
  };
  const detail::end_result result = detail::end_processes(plan);

  for (const std::size_t i : chosen) {
    reap_outcome& out = outcomes[i];
    const std::string who = "PID " + std::to_string(targets[i].pid);
    const detail::ended_process* e = nullptr;
    for (const detail::ended_process& p : result.processes) {
      if (p.process.pid == targets[i].pid && p.process.start_time == targets[i].start_time) { e = &p; }
    }
    if (e == nullptr) {  // exited between the check above and the first look
      out.action = "gone";
      out.detail = who + " had exited before it was signalled";
      continue;
    }
    if (e->sent_sigterm) { out.signals.emplace_back("SIGTERM"); }
    if (e->sent_sigcont) { out.signals.emplace_back("SIGCONT"); }
    if (e->sent_sigkill) { out.signals.emplace_back("SIGKILL"); }
    const double after = static_cast<double>(e->ended_after_ns) / 1e9;
    if (e->first_signal == detail::signal_result::gone && !e->sent_sigkill) {
      out.action = "gone";
      out.detail = who + " had exited before it was signalled";
    } else if (e->first_signal == detail::signal_result::reused) {
      out.action = "refused";
      out.detail = who + " now names another process: the PID was reused; not signalled";
    } else if (!e->signal_error.empty()) {
      out.action = "failed";
      out.detail = std::string(e->sent_sigterm ? "SIGKILL" : "SIGTERM") + " to " + who +
                   " failed: " + e->signal_error;
    } else if (e->ended && !e->sent_sigkill) {
      out.action = "terminated";
      out.detail = "ended after SIGTERM (within " + seconds_text(after) + ")";
    } else if (e->ended) {
      out.action = "killed";
      out.detail = "still alive " + seconds_text(grace_s) + " after SIGTERM; ended after SIGKILL (within " +
                   seconds_text(after) + ")";
    } else {
      out.action = "survived";
      out.detail = "still alive " + seconds_text(kill_wait_s) +
                   " after SIGKILL: stuck in the kernel (D state, likely the driver; check dmesg for Xid "
                   "errors); it ends when the call returns";
    }
  }
  return outcomes;
}

}  // namespace gpuguard::cli::doctor
