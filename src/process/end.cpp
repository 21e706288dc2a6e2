// Terminate, wait, kill (see end.hpp).
#include "process/end.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include <poll.h>

namespace gpuguard::detail {

namespace {

using steady = std::chrono::steady_clock;

std::int64_t elapsed_ns(steady::time_point since) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - since).count();
}

bool stopped(const proc_stat& p) noexcept { return p.state == 'T' || p.state == 't'; }

}  // namespace

std::optional<std::int64_t> parse_grace_ms(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') { ++i; }
  if (i == 0 || i > 9) { return std::nullopt; }
  if (i < text.size()) {
    if (text[i] != '.' || i + 1 == text.size() || text.size() > 32) { return std::nullopt; }
    for (std::size_t k = i + 1; k < text.size(); ++k) {
      if (text[k] < '0' || text[k] > '9') { return std::nullopt; }
    }
  }
  const double seconds = std::strtod(std::string(text).c_str(), nullptr);
  if (!(seconds >= 0.0 && seconds <= max_grace_s)) { return std::nullopt; }
  return static_cast<std::int64_t>(std::ceil(seconds * 1000.0 - 1e-6));
}

end_result end_processes(const end_plan& plan) {
  end_result result;
  const steady::time_point start = steady::now();
  const steady::time_point grace_end = start + std::chrono::milliseconds(plan.grace_ms);
  steady::time_point kill_end{};
  bool killing = false;
  std::unordered_map<int, std::size_t> latest;  // pid -> its record with the newest start time
  std::vector<bool> term_tried;                 // by record: SIGTERM attempted (sent or not)
  std::vector<bool> kill_tried;
  const auto look = [&plan] {
    if (plan.reap) { plan.reap(); }
    return plan.live ? plan.live() : std::vector<proc_stat>{};
  };
  std::vector<proc_stat> live = look();
  for (;;) {
    // Who went since the last look.
    std::unordered_map<int, std::uint64_t> now_live;
    for (const proc_stat& p : live) { now_live.emplace(p.pid, p.start_time); }
    for (ended_process& e : result.processes) {
      if (e.ended) { continue; }
      const auto it = now_live.find(e.process.pid);
      if (it == now_live.end() || it->second != e.process.start_time) {
        e.ended = true;
        e.ended_after_ns = elapsed_ns(start);
      }
    }
    // This phase's signal to each one that has not had it yet; SIGCONT to any seen stopped.
    for (const proc_stat& p : live) {
      auto it = latest.find(p.pid);
      if (it == latest.end() || result.processes[it->second].process.start_time != p.start_time) {
        ended_process e;
        e.process = p;
        result.processes.push_back(std::move(e));
        term_tried.push_back(false);
        kill_tried.push_back(false);
        it = latest.insert_or_assign(p.pid, result.processes.size() - 1).first;
      }
      const std::size_t index = it->second;
      ended_process& e = result.processes[index];
      std::string error;
      if (!killing && !term_tried[index]) {
        term_tried[index] = true;
        e.first_signal = send_checked_signal(p.pid, p.start_time, SIGTERM, &error);
        e.sent_sigterm = e.first_signal == signal_result::sent;
        if (e.first_signal == signal_result::failed) { e.signal_error = error; }
      }
      if (!killing && e.sent_sigterm && !e.sent_sigcont && stopped(p)) {
        e.sent_sigcont = send_checked_signal(p.pid, p.start_time, SIGCONT) == signal_result::sent;
      }
      if (killing && !kill_tried[index]) {
        kill_tried[index] = true;
        const signal_result r = send_checked_signal(p.pid, p.start_time, SIGKILL, &error);
        if (!term_tried[index]) {  // appeared after the grace period: SIGKILL is its first signal
          term_tried[index] = true;
          e.first_signal = r;
        }
        e.sent_sigkill = e.sent_sigkill || r == signal_result::sent;
        if (r == signal_result::failed) { e.signal_error = error; }
      }
    }
    if (live.empty()) { break; }
    const steady::time_point now = steady::now();
    if (!killing && (now >= grace_end || result.cut_short_by != 0)) {
      killing = true;
      kill_end = now + std::chrono::milliseconds(plan.kill_wait_ms);
      if (plan.kill_all && plan.kill_all()) {
        for (const proc_stat& p : live) { result.processes[latest[p.pid]].sent_sigkill = true; }
      }
      continue;  // SIGKILL at once
    }
    if (killing && now >= kill_end) { break; }
    int timeout_ms = plan.rescan_ms;
    if (!killing) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(grace_end - now).count();
      timeout_ms = static_cast<int>(std::clamp<std::int64_t>(left + 1, 1, plan.rescan_ms));
    }
    if (plan.wait) {
      const int signal = plan.wait(timeout_ms);
      if (signal != 0 && !killing && result.cut_short_by == 0) { result.cut_short_by = signal; }
    } else {
      ::poll(nullptr, 0, timeout_ms);
    }
    live = look();
  }
  result.duration_ns = elapsed_ns(start);
  return result;
}

}  // namespace gpuguard::detail
