/// @file
/// @brief The post-mortem of a tracked process that died where no handler could see it (SIGKILL,
///        the OOM killer, `gpuguard run`'s own teardown): read from the job's post-mortem region
///        (util/postmortem_region.hpp) after the job, told in the summary, in `--report`
///        (`postmortems`) and as an `end` line in the process's JSONL log (docs/run.md).
#pragma once

#include "json.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <sys/types.h>

namespace gpuguard::cli {

struct postmortem_frame {
  bool python = false;   // a Python line (address 0, no module), named by the process itself
  std::uint64_t address = 0;
  std::string module;
  std::string function;  // "" where addr2line could not tell
  std::string location;  // "file:line", "" where it could not tell
};

struct postmortem_site {
  std::uint32_t site = 0;  // 0: no stack was captured for these allocations (stacks off or sampled out)
  int device = -1;         // -1: host
  std::int64_t bytes = 0;
  std::int64_t count = 0;
  bool in_flight = false;  // the process died updating it: the figures are its last committed ones
  std::string tag;         // the tag the allocations were made under, "" untagged
  bool held = false;       // the tag is an exit holder's (a cache kept until the process ends): not a leak
  std::uint64_t python_lost = 0;  // Python frames whose text the region had no room for
  std::vector<postmortem_frame> frames;  // its Python lines, innermost first, then the caller's native frames, gpuguard's own dropped
};

struct postmortem_device {
  int device = -1;
  std::int64_t live_bytes = 0;
  std::int64_t held_bytes = 0;  // of live_bytes, under exit holders' tags
  std::int64_t live_count = 0;
  std::int64_t allocations = 0;
  std::int64_t frees = 0;
  std::int64_t total_bytes = 0;
  std::uint64_t peak_bytes = 0;
};

struct postmortem_thread {
  std::int64_t tid = 0;
  std::uint32_t thread = 0;
  std::uint64_t depth = 0;
  std::vector<std::string> scopes;  // outermost first
  std::vector<std::int64_t> scope_ages_ns;  // how long each had been open when the job ended
  std::uint64_t in_flight = 0;
};

struct postmortem_event {
  std::uint64_t index = 0;
  bool alloc = true;
  int device = -1;
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint32_t site = 0;
  std::uint32_t thread = 0;
  std::int64_t age_ns = 0;  // before the post-mortem was read
};

struct process_postmortem {
  pid_t pid = 0;  // as the process saw itself (in a PID namespace of the job: its number there)
  std::string program;
  std::string cause;  // "signal", "oom_kill", "teardown", "unknown"
  int signal = 0;     // with "signal" (and "oom_kill": SIGKILL)
  std::string cause_text;
  std::vector<postmortem_device> devices;
  std::vector<postmortem_site> sites;  // largest first
  std::vector<postmortem_thread> threads;
  std::vector<postmortem_event> events;  // the last ones, oldest first
  std::uint64_t events_total = 0;
  std::uint64_t events_in_flight = 0;
  std::uint64_t dropped_sites = 0;
  std::uint64_t dropped_threads = 0;
  std::string log_path;   // its JSONL log, "" if none
  std::string log_error;  // why the `end` line could not be written there
};

/// What the supervisor knows of the deaths, to name a cause.
struct postmortem_context {
  pid_t command = 0;           // CMD's PID
  int command_signal = 0;      // the signal that ended CMD, 0 if it exited or is not known
  std::set<pid_t> torn_down;   // leftovers the teardown signalled
  std::uint64_t oom_kills = 0; // the OOM-kill count of CMD's memory cgroup rose by this much
  std::string oom_counter;     // where it was read ("cgroup v1 memory:/a/b"), "" when it could not be
  std::string oom_note;        // why no OOM-kill count could be read, where it could not
  bool pids_comparable = true; // false in the job's own PID namespace: parts name namespace PIDs
  bool job_empty = true;       // every process of the job is gone
};

/// A post-mortem for every part of the region `fd` that its process left open (no exit path ran),
/// once the process is gone. `note` says why none could be read, if so.
std::vector<process_postmortem> read_postmortems(int fd, const postmortem_context& context, std::string* note);

/// Appends the `end` line (reason "postmortem") to the process's JSONL log, if it has one.
void write_postmortem_end_line(process_postmortem& pm);

/// The text for the summary: several lines, each starting "[gpuguard run] ", ending in '\n'.
std::string postmortem_text(const process_postmortem& pm);

/// The JSON object of `--report`'s `postmortems[]` and of the `end` line's `postmortem`.
json postmortem_json(const process_postmortem& pm);

}  // namespace gpuguard::cli
