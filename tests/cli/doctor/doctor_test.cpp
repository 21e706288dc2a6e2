// `gpuguard doctor`'s pieces in-process: the /proc/PID/stat parser on recorded lines (D state and
// an exit stuck in the driver included, which cannot be produced on demand), the holder
// classification on process tables built to the shape of each case, the residue trend, the JSON
// document, the device-file scan on this process, and the pidfd reaper's start-time check on a
// real child (a reused PID is not signalled).
#include "doctor/doctor_reap.hpp"
#include "doctor/doctor_report.hpp"
#include "holders/proc.hpp"
#include "json.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuguard::cli::doctor {
namespace {

// Recorded on Linux 6.x: a sleeping shell, a process in D state inside an ioctl, one whose exit is
// stuck in the driver (D with PF_EXITING, 0x4, in the flags), a zombie, a traced process.
constexpr const char* sleeping_line =
    "17248 (sleep) S 17241 17241 11920 0 -1 4194304 135 0 0 0 0 0 0 0 20 0 1 0 1170315 2990080 391 "
    "18446744073709551615 94342862745600 94342862763529 140731502761664 0 0 0 0 6 0 1 0 0 17 1 0 0 0 0 0 "
    "94342862777616 94342862778880 94343711240192 140731502766728 140731502766738 140731502766738 "
    "140731502768105 0\n";
constexpr const char* d_state_line =
    "4242 (python3) D 1 4200 4200 0 -1 1077936192 812345 0 12 0 53211 2210 0 0 20 0 14 0 883120 "
    "40318648320 1021133 18446744073709551615 1 1 0 0 0 0 0 16781312 17642 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
constexpr const char* exit_stuck_line =
    "5151 (pt_main_thread) D 1 5100 5100 0 -1 1077936196 902 0 1 0 712 90 0 0 20 0 1 0 912000 "
    "0 0 18446744073709551615 0 0 0 0 0 0 0 16781312 0 0 0 0 17 7 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
constexpr const char* zombie_line =
    "6001 (worker) Z 6000 6000 5999 0 -1 4227084 0 0 0 0 0 0 0 0 20 0 1 0 950000 0 0 18446744073709551615 "
    "0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
constexpr const char* odd_comm_line =
    "777 (a) (b c) d) t 12 777 12 0 -1 4194304 1 0 0 0 0 0 0 0 20 0 3 0 123456 1 1 1\n";

TEST(doctor_stat, parses_a_sleeping_process) {
  const std::optional<proc_stat> s = parse_proc_stat(sleeping_line);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->pid, 17248);
  EXPECT_EQ(s->comm, "sleep");
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->ppid, 17241);
  EXPECT_EQ(s->pgid, 17241);
  EXPECT_EQ(s->sid, 11920);
  EXPECT_EQ(s->num_threads, 1);
  EXPECT_EQ(s->start_time, 1170315U);
  EXPECT_EQ(s->flags & pf_exiting, 0U);
}

TEST(doctor_stat, parses_d_state_and_an_exit_stuck_in_the_driver) {
  const std::optional<proc_stat> d = parse_proc_stat(d_state_line);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->state, 'D');
  EXPECT_EQ(d->num_threads, 14);
  EXPECT_EQ(d->start_time, 883120U);
  EXPECT_EQ(d->flags & pf_exiting, 0U);
  EXPECT_STREQ(state_name(d->state), "disk sleep");

  const std::optional<proc_stat> e = parse_proc_stat(exit_stuck_line);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->state, 'D');
  EXPECT_NE(e->flags & pf_exiting, 0U);
  EXPECT_EQ(e->comm, "pt_main_thread");
}

TEST(doctor_stat, parses_a_zombie_and_a_command_with_parentheses) {
  const std::optional<proc_stat> z = parse_proc_stat(zombie_line);
  ASSERT_TRUE(z.has_value());
  EXPECT_EQ(z->state, 'Z');
  EXPECT_STREQ(state_name(z->state), "zombie");

  const std::optional<proc_stat> o = parse_proc_stat(odd_comm_line);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->comm, "a) (b c) d");
  EXPECT_EQ(o->state, 't');
  EXPECT_EQ(o->ppid, 12);
  EXPECT_EQ(o->num_threads, 3);
  EXPECT_EQ(o->start_time, 123456U);
}

TEST(doctor_stat, rejects_what_is_not_a_stat_line_without_crashing) {
  for (const char* bad : {"", "(", ")", "12", "12 (x", "x (sleep) S 1 1 1", "12 (sleep) S 1 1",
                          "12 (sleep) SS 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
                          "12 (sleep) S one 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
                          "-3 (sleep) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
                          "12 (sleep) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99999999999999999999999"}) {
    EXPECT_FALSE(parse_proc_stat(bad).has_value()) << bad;
  }
  // Every prefix of a real line: either a result or nullopt, never a crash.
  const std::string line = sleeping_line;
  for (std::size_t n = 0; n <= line.size(); ++n) { (void)parse_proc_stat(std::string_view(line).substr(0, n)); }
  EXPECT_EQ(parse_proc_stat(std::string_view(line).substr(0, line.size() - 1))->start_time, 1170315U);
}

TEST(doctor_prefix, is_a_plain_string_prefix) {
  EXPECT_TRUE(under_prefix("/dev/nvidia0", "/dev/nvidia"));
  EXPECT_TRUE(under_prefix("/dev/nvidiactl", "/dev/nvidia"));
  EXPECT_TRUE(under_prefix("/dev/nvidia-uvm", "/dev/nvidia"));
  EXPECT_FALSE(under_prefix("/dev/nvme0n1", "/dev/nvidia"));
  EXPECT_FALSE(under_prefix("/dev/nvidi", "/dev/nvidia"));
  EXPECT_FALSE(under_prefix("/dev/nvidia0", ""));
}

// A process table entry.
proc_stat entry(int pid, int ppid, int pgid, int sid, char state = 'S', std::uint64_t flags = 0) {
  proc_stat s;
  s.pid = pid;
  s.comm = "p" + std::to_string(pid);
  s.state = state;
  s.ppid = ppid;
  s.pgid = pgid;
  s.sid = sid;
  s.flags = flags;
  s.num_threads = 1;
  s.start_time = 1000 + static_cast<std::uint64_t>(pid);
  return s;
}

process_table table_of(std::initializer_list<proc_stat> entries) {
  process_table t;
  for (const proc_stat& e : entries) { t.emplace(e.pid, e); }
  return t;
}

classification classify_in(const process_table& t, int pid) {
  const proc_stat& p = t.at(pid);
  return classify(&p, p.state, t);
}

TEST(doctor_classify, a_worker_reparented_to_init_after_its_job_died_is_orphaned) {
  // The case docs/design.md measured: job leader 90 (killed) had started worker 100; the worker went to PID 1.
  const process_table t = table_of({entry(1, 0, 1, 1), entry(100, 1, 90, 80)});
  const classification c = classify_in(t, 100);
  EXPECT_EQ(c.cls, holder_class::orphaned);
  EXPECT_TRUE(c.orphaned);
  EXPECT_NE(c.why.find("PID 1"), std::string::npos) << c.why;
  EXPECT_NE(c.hint.find("--reap"), std::string::npos);
}

TEST(doctor_classify, a_worker_adopted_by_a_subreaper_is_orphaned) {
  // The subreaper (50) is in the worker's session but does not lead it: a parent that leads the
  // session is a job-control shell that started the process (see the pipeline case below).
  const process_table t = table_of({entry(1, 0, 1, 1), entry(50, 1, 50, 40), entry(100, 50, 90, 40)});
  const classification c = classify_in(t, 100);
  EXPECT_EQ(c.cls, holder_class::orphaned);
  EXPECT_NE(c.why.find("PID 50"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("adopted"), std::string::npos) << c.why;
}

TEST(doctor_classify, a_group_leader_that_is_a_zombie_or_a_reused_pid_does_not_keep_the_job_alive) {
  // Leader 90 is a zombie: its job ended.
  const process_table z = table_of({entry(1, 0, 1, 1), entry(90, 1, 90, 90, 'Z'), entry(100, 1, 90, 90)});
  EXPECT_EQ(classify_in(z, 100).cls, holder_class::orphaned);
  // PID 90 now names a process of another group: not the leader.
  const process_table r = table_of({entry(1, 0, 1, 1), entry(90, 1, 95, 95), entry(100, 1, 90, 80)});
  EXPECT_EQ(classify_in(r, 100).cls, holder_class::orphaned);
  // A leader whose main thread exited while its other threads run is alive: here it is the
  // ancestor (through a subreaper 95 of its own) of 100, so the job goes on ...
  proc_stat threads_left = entry(90, 1, 90, 90, 'Z');
  threads_left.num_threads = 3;
  const process_table m =
      table_of({entry(1, 0, 1, 1), threads_left, entry(95, 90, 95, 90), entry(100, 95, 90, 90)});
  EXPECT_FALSE(classify_in(m, 100).orphaned);
  EXPECT_NE(classify_in(m, 100).why.find("led by its live ancestor PID 90"), std::string::npos)
      << classify_in(m, 100).why;
  // ... while a leader that is a zombie with no thread left is not alive, ancestor or not.
  const process_table dead =
      table_of({entry(1, 0, 1, 1), entry(90, 1, 90, 90, 'Z'), entry(95, 90, 95, 90), entry(100, 95, 90, 90)});
  EXPECT_TRUE(classify_in(dead, 100).orphaned) << classify_in(dead, 100).why;
}

TEST(doctor_classify, a_worker_of_a_killed_job_whose_launching_script_lives_is_orphaned) {
  // A script without job control (90, leading group and session) started the job's main process in
  // its own group; the main process was SIGKILLed, its worker 100 went to PID 1. The script still
  // leads the group, but it is not the worker's ancestor: the process group is not the job.
  const process_table t = table_of({entry(1, 0, 1, 1), entry(90, 1, 90, 90), entry(100, 1, 90, 90)});
  classification c = classify_in(t, 100);
  EXPECT_TRUE(c.orphaned) << c.why;
  EXPECT_NE(c.why.find("whose live leader, PID 90 (p90), is not its ancestor"), std::string::npos) << c.why;
  // The same with the facts the scan reads: the same cgroup as the script, a multiprocessing worker.
  process_facts f;
  f.command = "python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7) "
              "--multiprocessing-fork";
  f.sighup_ignored = false;
  f.cwd = "/home/me/job";
  f.cgroup = f.leader_cgroup = "/slurm/uid_1000/job_42/step_batch";
  c = classify(&t.at(100), 'S', t, &f);
  EXPECT_TRUE(c.orphaned) << c.why;
  EXPECT_NE(c.why.find("cgroup /slurm/uid_1000/job_42/step_batch"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("multiprocessing child"), std::string::npos) << c.why;
  // The group's live leader in another cgroup: something moved the process; not called orphaned.
  f.leader_cgroup = "/system.slice/other.service";
  c = classify(&t.at(100), 'S', t, &f);
  EXPECT_FALSE(c.orphaned);
  EXPECT_NE(c.why.find("another cgroup"), std::string::npos) << c.why;
}

TEST(doctor_classify, processes_detached_on_purpose_are_not_orphaned) {
  // nohup'd by a script (group 90) that exited: the main process 100 went to PID 1 and has a live
  // worker of its own: a job's main process.
  const process_table job = table_of({entry(1, 0, 1, 1), entry(100, 1, 90, 80), entry(101, 100, 90, 80)});
  EXPECT_FALSE(classify_in(job, 100).orphaned);
  EXPECT_NE(classify_in(job, 100).why.find("live children of its own (PID 101"), std::string::npos)
      << classify_in(job, 100).why;
  EXPECT_FALSE(classify_in(job, 101).orphaned);
  // A zombie child does not make a main process.
  const process_table reaped = table_of({entry(1, 0, 1, 1), entry(100, 1, 90, 80), entry(101, 100, 90, 80, 'Z')});
  EXPECT_TRUE(classify_in(reaped, 100).orphaned) << classify_in(reaped, 100).why;
  // The same without children: SIGHUP ignored says nohup, so it is not called orphaned ...
  const process_table alone = table_of({entry(1, 0, 1, 1), entry(100, 1, 90, 80)});
  process_facts f;
  f.command = "python3 train.py";
  f.sighup_ignored = true;
  classification c = classify(&alone.at(100), 'S', alone, &f);
  EXPECT_FALSE(c.orphaned);
  EXPECT_NE(c.why.find("ignores SIGHUP (nohup)"), std::string::npos) << c.why;
  // ... unless it is a Python multiprocessing child, which inherited the mask from its dead parent.
  f.command = "python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)";
  c = classify(&alone.at(100), 'S', alone, &f);
  EXPECT_TRUE(c.orphaned) << c.why;
  EXPECT_NE(c.why.find("ignores SIGHUP"), std::string::npos) << c.why;
  // A double-forked daemon: alone in the session its first child created, in "/".
  f = process_facts{};
  f.command = "/usr/sbin/some-daemon";
  f.sighup_ignored = false;
  f.cwd = "/";
  c = classify(&alone.at(100), 'S', alone, &f);
  EXPECT_FALSE(c.orphaned);
  EXPECT_NE(c.why.find("double-forked daemon"), std::string::npos) << c.why;
  // Not alone in that session (a sibling survives too), or elsewhere than "/": a worker.
  const process_table two = table_of({entry(1, 0, 1, 1), entry(100, 1, 90, 80), entry(102, 1, 90, 80)});
  EXPECT_TRUE(classify(&two.at(100), 'S', two, &f).orphaned);
  f.cwd = "/home/me/job";
  EXPECT_TRUE(classify(&alone.at(100), 'S', alone, &f).orphaned);
  // A pipeline member of a job-control shell (40 leads the session) whose first member, the group
  // leader, has exited: the shell started it; not called orphaned.
  const process_table pipeline = table_of({entry(1, 0, 1, 1), entry(40, 1, 40, 40), entry(100, 40, 90, 40)});
  EXPECT_FALSE(classify_in(pipeline, 100).orphaned);
  EXPECT_NE(classify_in(pipeline, 100).why.find("job-control shell"), std::string::npos)
      << classify_in(pipeline, 100).why;
}

TEST(doctor_classify, multiprocessing_command_lines) {
  EXPECT_TRUE(is_multiprocessing_child("python3 -c from multiprocessing.spawn import spawn_main; spawn_main(x)"));
  EXPECT_TRUE(is_multiprocessing_child("python3 -c from multiprocessing.forkserver import main; main(3, 4)"));
  EXPECT_TRUE(is_multiprocessing_child("python3 -c from multiprocessing.resource_tracker import main;main(5)"));
  EXPECT_TRUE(is_multiprocessing_child("python3 -B -s --multiprocessing-fork"));
  EXPECT_FALSE(is_multiprocessing_child("python3 train.py --workers 4"));
  EXPECT_FALSE(is_multiprocessing_child(""));
}

TEST(doctor_classify, live_children_services_and_container_workers_are_not_orphaned) {
  // A child of a live parent in its group (a DataLoader worker of a live trainer).
  const process_table worker = table_of({entry(1, 0, 1, 1), entry(90, 1, 90, 90), entry(100, 90, 90, 90)});
  EXPECT_EQ(classify_in(worker, 100).cls, holder_class::running);
  EXPECT_FALSE(classify_in(worker, 100).orphaned);
  // A child of a live parent in its group whose leader has exited (a trainer started by a launcher
  // that exited): its parent is its own, not an adopter.
  const process_table launched = table_of({entry(1, 0, 1, 1), entry(95, 1, 90, 90), entry(100, 95, 90, 90)});
  EXPECT_FALSE(classify_in(launched, 100).orphaned);
  EXPECT_NE(classify_in(launched, 100).why.find("is alive in its process group"), std::string::npos);
  // A service started by init: it leads its session (setsid), e.g. nvidia-persistenced.
  const process_table service = table_of({entry(1, 0, 1, 1), entry(300, 1, 300, 300)});
  EXPECT_EQ(classify_in(service, 300).cls, holder_class::running);
  EXPECT_NE(classify_in(service, 300).why.find("leads its own process session"), std::string::npos);
  // A job's main process, reparented to init (nohup, logout): it leads its group.
  const process_table job = table_of({entry(1, 0, 1, 1), entry(400, 1, 400, 80)});
  EXPECT_FALSE(classify_in(job, 400).orphaned);
  // A container whose PID 1 is the trainer: its workers are in PID 1's group.
  const process_table container = table_of({entry(1, 0, 1, 1), entry(7, 1, 1, 1)});
  EXPECT_FALSE(classify_in(container, 7).orphaned);
  // Reparented to PID 1, which leads its group and is its ancestor (a container whose PID 1 is
  // the shell that runs the job): not called orphaned.
  const process_table led = table_of({entry(1, 0, 1, 1), entry(50, 1, 1, 1), entry(100, 1, 1, 1)});
  const classification c = classify_in(led, 100);
  EXPECT_FALSE(c.orphaned);
  EXPECT_NE(c.why.find("alive in its process group 1"), std::string::npos) << c.why;
  // PID 1 itself.
  EXPECT_EQ(classify_in(container, 1).cls, holder_class::running);
  EXPECT_FALSE(classify_in(container, 1).orphaned);
}

TEST(doctor_classify, states) {
  const process_table t = table_of({entry(1, 0, 1, 1), entry(90, 1, 90, 90), entry(100, 90, 90, 90, 'T'),
                                    entry(101, 90, 90, 90, 't'), entry(102, 90, 90, 90, 'D'),
                                    entry(103, 90, 90, 90, 'Z'), entry(104, 90, 90, 90, 'R')});
  EXPECT_EQ(classify_in(t, 100).cls, holder_class::stopped);
  EXPECT_EQ(classify_in(t, 101).cls, holder_class::stopped);
  EXPECT_EQ(classify_in(t, 102).cls, holder_class::uninterruptible);
  EXPECT_EQ(classify_in(t, 103).cls, holder_class::zombie);
  EXPECT_FALSE(classify_in(t, 103).orphaned);
  EXPECT_EQ(classify_in(t, 104).cls, holder_class::running);
  EXPECT_EQ(classify(nullptr, '?', t).cls, holder_class::not_visible);
  EXPECT_STREQ(class_name(holder_class::not_visible), "not_visible");
}

TEST(doctor_classify, d_state_orphans_and_exits_stuck_in_the_driver) {
  // An orphan that happens to be in D state now is still an orphan (SIGKILL lands when it returns).
  const process_table t =
      table_of({entry(1, 0, 1, 1), entry(100, 1, 90, 80, 'D'), entry(101, 1, 91, 80, 'D', pf_exiting)});
  const classification d = classify_in(t, 100);
  EXPECT_EQ(d.cls, holder_class::orphaned);
  EXPECT_NE(d.why.find("D state"), std::string::npos);
  // One already exiting is not an orphan to reap: its exit is stuck in the driver.
  const classification e = classify_in(t, 101);
  EXPECT_EQ(e.cls, holder_class::uninterruptible);
  EXPECT_FALSE(e.orphaned);
  EXPECT_NE(e.why.find("exiting"), std::string::npos) << e.why;
  // The same from the recorded lines.
  const std::optional<proc_stat> stuck = parse_proc_stat(exit_stuck_line);
  const std::optional<proc_stat> blocked = parse_proc_stat(d_state_line);
  ASSERT_TRUE(stuck && blocked);
  process_table recorded = table_of({entry(1, 0, 1, 1), *stuck, *blocked});
  recorded.emplace(5100, entry(5100, 1, 5100, 5100));
  EXPECT_EQ(classify(&*stuck, stuck->state, recorded).cls, holder_class::uninterruptible);
  EXPECT_EQ(classify(&*blocked, blocked->state, recorded).cls, holder_class::orphaned);
}

TEST(doctor_trend, steady_within_a_mebibyte_or_a_percent) {
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  EXPECT_EQ(residue_trend(std::nullopt, 5), "unknown");
  EXPECT_EQ(residue_trend(5, std::nullopt), "unknown");
  EXPECT_EQ(residue_trend(0, 0), "steady");
  EXPECT_EQ(residue_trend(0, mib), "steady");
  EXPECT_EQ(residue_trend(0, mib + 1), "growing");
  EXPECT_EQ(residue_trend(mib + 1, 0), "shrinking");
  EXPECT_EQ(residue_trend(1000 * mib, 1009 * mib), "steady");
  EXPECT_EQ(residue_trend(1000 * mib, 1011 * mib), "growing");
  EXPECT_EQ(residue_trend(1000 * mib, 989 * mib), "shrinking");
}

TEST(doctor_report, json_is_one_valid_document_and_exit_status_follows_holders) {
  sample s;
  s.time = "2026-12-02T00:00:00.000Z";
  s.device_prefix = "/dev/nvidia";
  s.nvml_note = "NVML not available: per-process memory unknown (\"quoted\"\n)";
  holder h;
  h.info.pid = 4242;
  h.info.exists = true;
  h.info.stat = entry(4242, 1, 4200, 4200);
  h.info.effective_state = 'S';
  h.info.command = std::string("python3 -c \"x\"\t\x01 \xff");
  h.info.devices.push_back(device_use{"/dev/nvidia0", 2, 1});
  h.memory.push_back(gpu_memory_use{0, std::uint64_t{3} << 30});
  h.memory.push_back(gpu_memory_use{1, std::nullopt});
  h.holds = true;
  h.verdict.cls = holder_class::orphaned;
  s.holders.push_back(h);
  s.holder_count = 1;
  EXPECT_EQ(exit_status_of(s), exit_holders);

  json_error error;
  const std::string text = render_json(s);
  ASSERT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find('\n'), text.size() - 1) << "one line";
  const std::optional<json> doc = parse_json(text, &error);
  ASSERT_TRUE(doc.has_value()) << error.message << " at " << error.offset << ": " << text;
  EXPECT_EQ(doc->at("schema"), "gpuguard.doctor");
  EXPECT_EQ(doc->at("version").get<std::int64_t>(), 1);
  const json& holder_json = doc->at("holders").at(0);
  EXPECT_EQ(holder_json.at("class"), "orphaned");
  EXPECT_EQ(holder_json.at("gpu_memory_bytes").get<std::int64_t>(), std::int64_t{3} << 30);
  EXPECT_TRUE(holder_json.at("gpu_memory").at(1).at("bytes").is_null());

  // Reaped: nothing is left, so 0; a target that survived makes it 3.
  s.holders[0].reap = reap_outcome{"killed", {"SIGTERM", "SIGKILL"}, "ended"};
  EXPECT_EQ(exit_status_of(s), exit_no_holders);
  s.holders[0].reap = reap_outcome{"survived", {"SIGTERM", "SIGKILL"}, "stuck"};
  EXPECT_EQ(exit_status_of(s), exit_error);
  s.holders[0].reap.reset();
  s.holders[0].holds = false;
  EXPECT_EQ(exit_status_of(s), exit_no_holders);
}

TEST(doctor_report, prometheus_escapes_label_values_and_types_every_family) {
  sample s;
  device_summary d;
  d.nvml.index = 0;
  d.nvml.name = "GPU \"x\" \\ two\nlines";
  d.nvml.uuid = "GPU-\"q\"\\";
  d.nvml.used = 1024;
  s.devices.push_back(d);
  device_summary no_uuid;  // NVML gave no UUID
  no_uuid.nvml.index = 1;
  no_uuid.nvml.used = 0;
  s.devices.push_back(no_uuid);
  const std::string text = render_prometheus(s, 1.5);
  EXPECT_NE(text.find("name=\"GPU \\\"x\\\" \\\\ two\\nlines\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("gpuguard_doctor_device_used_bytes{device=\"0\",uuid=\"GPU-\\\"q\\\"\\\\\",name="), std::string::npos)
      << text;
  EXPECT_NE(text.find("gpuguard_doctor_device_used_bytes{device=\"1\",uuid=\"unknown\",name=\"\"} 0\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("lines\"}\n\""), std::string::npos) << "no raw newline inside a label";
  std::size_t helps = 0;
  std::size_t types = 0;
  for (std::size_t at = text.find("# HELP "); at != std::string::npos; at = text.find("# HELP ", at + 1)) { ++helps; }
  for (std::size_t at = text.find("# TYPE "); at != std::string::npos; at = text.find("# TYPE ", at + 1)) {
    ++types;
    const std::size_t end = text.find('\n', at);
    EXPECT_EQ(text.substr(end - 6, 6), " gauge") << text.substr(at, end - at);
  }
  EXPECT_GT(helps, 3U);
  EXPECT_EQ(helps, types);
}

// A temporary directory with a fake device file.
class doctor_scan : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/gpuguard-doctor-unit-XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    dir_ = name;
    device_ = dir_ + "/nvidia0";
    const int fd = ::open(device_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 4096), 0);
    ::close(fd);
  }
  void TearDown() override {
    ::unlink(device_.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string dir_;
  std::string device_;
};

TEST_F(doctor_scan, the_scan_sees_descriptors_and_mappings_of_this_process) {
  const int self = static_cast<int>(::getpid());
  const std::string prefix = dir_ + "/nvidia";
  process_info before = read_process("/proc", self, prefix);
  ASSERT_TRUE(before.exists);
  EXPECT_TRUE(before.fds_readable);
  EXPECT_TRUE(before.devices.empty());

  const int fd = ::open(device_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  process_info open_now = read_process("/proc", self, prefix);
  ASSERT_EQ(open_now.devices.size(), 1U);
  EXPECT_EQ(open_now.devices[0].path, device_);
  EXPECT_EQ(open_now.devices[0].fds, 1);
  EXPECT_EQ(open_now.devices[0].mappings, 0);

  // A mapping keeps the file (and a GPU's memory) after the descriptor is closed.
  void* map = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  ::close(fd);
  process_info mapped = read_process("/proc", self, prefix);
  ASSERT_EQ(mapped.devices.size(), 1U);
  EXPECT_EQ(mapped.devices[0].fds, 0);
  EXPECT_EQ(mapped.devices[0].mappings, 1);

  const scan_result scan = scan_processes("/proc", prefix, -1);
  ASSERT_EQ(scan.holders.size(), 1U);
  EXPECT_EQ(scan.holders[0].pid, self);
  EXPECT_EQ(scan.table.count(self), 1U);
  ::munmap(map, 4096);
  EXPECT_TRUE(scan_processes("/proc", prefix, -1).holders.empty());
  EXPECT_FALSE(read_process("/proc", 0x3fffffff, prefix).exists);
  EXPECT_FALSE(scan_processes("/nonexistent-proc-root", prefix, -1).proc_readable);
}

// A child that waits to be signalled; reaped by the test.
pid_t start_child() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (;;) { ::pause(); }
  }
  return pid;
}

bool alive(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, WNOHANG) == 0;
}

TEST(doctor_reap, a_pid_whose_start_time_changed_is_not_signalled) {
  ASSERT_EQ(pidfd_unavailable_reason(), "") << "pidfds are needed by this test";
  const pid_t child = start_child();
  ASSERT_GT(child, 0);
  const std::optional<proc_stat> s = read_stat("/proc", child);
  ASSERT_TRUE(s.has_value());

  // As if the PID had been reused between the scan and the reap: the start time differs.
  const std::vector<reap_outcome> refused = reap({reap_target{child, s->start_time + 1}}, "/proc", 0.2, 1.0);
  ASSERT_EQ(refused.size(), 1U);
  EXPECT_EQ(refused[0].action, "refused");
  EXPECT_TRUE(refused[0].signals.empty());
  EXPECT_NE(refused[0].detail.find("reused"), std::string::npos) << refused[0].detail;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(alive(child));

  // The right identity: ended by SIGTERM.
  const std::vector<reap_outcome> ended = reap({reap_target{child, s->start_time}}, "/proc", 2.0, 1.0);
  EXPECT_EQ(ended[0].action, "terminated") << ended[0].detail;
  ASSERT_EQ(ended[0].signals.size(), 1U);
  EXPECT_EQ(ended[0].signals[0], "SIGTERM");
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);

  // Now gone: nothing to signal.
  const std::vector<reap_outcome> gone = reap({reap_target{child, s->start_time}}, "/proc", 0.1, 0.1);
  EXPECT_EQ(gone[0].action, "gone");
}

TEST(doctor_reap, a_process_that_ignores_sigterm_is_killed_after_the_grace_period) {
  const pid_t child = ::fork();
  if (child == 0) {
    std::signal(SIGTERM, SIG_IGN);
    for (;;) { ::pause(); }
  }
  ASSERT_GT(child, 0);
  std::optional<proc_stat> s;
  // Wait until the child has set its disposition (its SigIgn mask is not read here: just time).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  s = read_stat("/proc", child);
  ASSERT_TRUE(s.has_value());
  const auto start = std::chrono::steady_clock::now();
  const std::vector<reap_outcome> out = reap({reap_target{child, s->start_time}}, "/proc", 0.3, 2.0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(out[0].action, "killed") << out[0].detail;
  ASSERT_EQ(out[0].signals.size(), 2U);
  EXPECT_EQ(out[0].signals[1], "SIGKILL");
  EXPECT_GE(took, 0.25);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

}  // namespace
}  // namespace gpuguard::cli::doctor
