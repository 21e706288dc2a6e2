// `gpuguard run [OPTIONS] -- CMD [ARGS...]`: the command line, the environment CMD gets, and the
// words at the end. The process machinery is run_supervisor.cpp; the report is run_report.cpp.
// Exit status: CMD's (its code, or 128+N when signal N ended it); 124 when the job could not be
// ended; 125 when --require-clean found the GPU not clean; 126/127 when CMD could not be started;
// 2 for a usage error; 1 when the supervisor itself failed.
#include "command_line.hpp"
#include "docs_path.hpp"
#include "commands.hpp"
#include "util/file.hpp"
#include "util/format.hpp"
#include "util/option_table.hpp"
#include "util/program_path.hpp"
#include "holders/proc.hpp"
#include "process/end.hpp"
#include "run/run_report.hpp"
#include "run/run_track.hpp"
#include "run/run_supervisor.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <climits>
#include <unistd.h>

extern char** environ;  // NOLINT: POSIX declares it nowhere in C++

namespace gpuguard::cli {

namespace {

constexpr command_help help_text{
    "usage: gpuguard run [OPTIONS] [--] CMD [ARGS...]",
    // what it does
    "Runs CMD so that no process of it outlives it: when CMD ends, however it ends, every process\n"
    "it left behind (children, grandchildren, ones that called setsid or left its process group)\n"
    "gets SIGTERM, then SIGKILL after a grace period. Then says which of them held a GPU device\n"
    "(/dev/nvidia*) when CMD ended, and how much memory NVML says they held.\n"
    "\n"
    "  - CMD runs in a process group of its own; gpuguard is a child subreaper, so orphaned\n"
    "    descendants come back to it, and it reaps every zombie (also as PID 1 of a container)\n"
    "  - where cgroup v2 is writable (root, a container with its own cgroup, a delegated systemd\n"
    "    scope), CMD also runs in a cgroup of its own (gpuguard-run.PID.PIDNS, below its own), which\n"
    "    nothing it starts can leave by setsid or double fork; the leftovers' SIGKILL is then\n"
    "    cgroup.kill, all at once. Elsewhere (an ordinary user, a container without one) CMD's\n"
    "    parent is PID 1 of a PID namespace of its own (in a user namespace of its own where\n"
    "    needed, the same user and groups mapped); when it ends, the kernel ends every process\n"
    "    of the job. The summary line and the report say which boundary ran\n"
    "  - SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH and SIGCONT are forwarded\n"
    "    to CMD's process group; on a terminal, CMD's group gets the foreground (Ctrl-C reaches it\n"
    "    directly, and Ctrl-Z stops the whole job)\n"
    "  - during the grace period, SIGINT/SIGTERM/SIGHUP/SIGQUIT to gpuguard cut it short: SIGKILL\n"
    "    at once\n"
    "  - if gpuguard itself is killed (even with SIGKILL), its helper process (gpuguard-anchor,\n"
    "    CMD's parent) ends CMD and every process below it the same way; if both are killed,\n"
    "    CMD still dies (its parent-death signal is SIGKILL), and so does the whole job inside\n"
    "    a PID namespace; in a cgroup, or on the subreaper path alone, what it left may not:\n"
    "    see run.md (the last line says where)",
    // after the options
    "The first argument that is not an option starts CMD; '--' ends the options explicitly.\n"
    "\n"
    "details:\n"
    "  --grace      decimals allowed, e.g. 0.5; 0 to 86400; 0 means SIGKILL at once\n"
    "  --report     the command, its status and duration, the signals forwarded, the leftovers\n"
    "               and how each ended, the device holders. '%p' in PATH is gpuguard's pid.\n"
    "               Written through a temporary file and a rename\n"
    "  --require-clean  clean means: no process of the job holds a device file, NVML lists no PID\n"
    "               of the job, and each device's used memory is back to where it was before CMD\n"
    "               started (within 64 MiB). Without NVML it cannot tell, and exits 125 too\n"
    "  --track      libgpuguard_preload.so is found in ../lib next to the gpuguard executable, or\n"
    "               in the build tree; GPUGUARD_PRELOAD_LIBRARY=PATH names it\n"
    "  --options    later items win, so these override the environment's\n"
    "\n"
    "environment:\n"
    "  GPUGUARD_RUN_OPTIONS   defaults for the options, 'key=value' items separated by ':':\n"
    "                         grace=SECONDS, report=PATH, track=0|1, cgroup=0|1,\n"
    "                         namespace=0|1, require_clean=0|1 (options on the command\n"
    "                         line win). A bad item is reported on stderr and ignored. It is not\n"
    "                         passed on to CMD\n"
    "  GPUGUARD_DEVICE_PREFIX  as --device-prefix\n"
    "  GPUGUARD_NVML_LIBRARY  the NVML library to load (default libnvidia-ml.so.1)\n"
    "\n"
    "At the end, one line on stderr:\n"
    "  [gpuguard run] python3 exited with status 0 after 12.3 s; no process outlived it; no\n"
    "  process of it holds a GPU\n"
    "\n"
    "exit status:\n"
    "  CMD's exit status, or 128+N when signal N ended it\n"
    "  124  the job could not be ended: a process of it outlived the teardown, or the\n"
    "       boundary cannot prove that none did (wins over 125)\n"
    "  125  --require-clean: the GPU was not clean after the job (CMD's own status is\n"
    "       in the summary line and the report)\n"
    "  127  CMD was not found; 126  CMD could not be executed\n"
    "  2    usage error (nothing is started)\n"
    "  1    gpuguard itself failed, or CMD's status could not be learnt",
    {"run", false, true},
    "run.md"};

bool readable_file(const std::string& path) { return !path.empty() && ::access(path.c_str(), R_OK) == 0; }

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) { return "."; }
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The preload library, or "" with `looked` naming every place tried.
std::string find_preload_library(std::string& looked) {
  if (const char* named = std::getenv("GPUGUARD_PRELOAD_LIBRARY"); named != nullptr && *named != '\0') {
    looked = std::string("GPUGUARD_PRELOAD_LIBRARY=") + named;
    return readable_file(named) ? std::string(named) : std::string();
  }
  const std::string exe = detail::program_path();
  if (exe.empty()) {
    looked = "/proc/self/exe (unreadable)";
    return {};
  }
  const std::string dir = directory_of(exe);
  const char* name = "libgpuguard_preload.so";
  // Installed: bin/gpuguard and lib/ (or lib64/). Build tree: src/cli/gpuguard and src/preload/.
  const std::string candidates[] = {dir + "/../lib/" + name, dir + "/../lib64/" + name, dir + "/../preload/" + name};
  for (const std::string& c : candidates) {
    looked += (looked.empty() ? "" : ", ") + c;
    if (readable_file(c)) {
      char resolved[PATH_MAX];
      return ::realpath(c.c_str(), resolved) != nullptr ? std::string(resolved) : c;
    }
  }
  return {};
}

struct parsed_options {
  std::optional<std::int64_t> grace_ms;
  std::optional<std::string> report;
  std::optional<std::string> device_prefix;
  std::optional<bool> track;
  std::optional<bool> cgroup;
  std::optional<bool> pid_namespace;
  std::optional<bool> require_clean;
  std::vector<std::string> options;  // --options, in order
};

// GPUGUARD_RUN_OPTIONS: defaults under the command line, read as GPUGUARD_OPTIONS is (the same
// item syntax and messages, util/option_table.hpp): a bad item is named on stderr and ignored.
template <std::optional<bool> parsed_options::*member>
constexpr detail::option_key<parsed_options> bool_item(std::string_view name, std::string_view help) {
  return {name,
          [](parsed_options& o, std::string_view value) {
            const std::optional<bool> b = detail::parse_option_bool(value);
            if (b) { o.*member = b; }
            return b.has_value();
          },
          [] { return std::string(detail::option_bool_spellings); }, help};
}

constexpr detail::option_key<parsed_options> environment_keys[] = {
    {"grace",
     [](parsed_options& o, std::string_view value) {
       const std::optional<std::int64_t> ms = detail::parse_grace_ms(value);
       if (ms) { o.grace_ms = ms; }
       return ms.has_value();
     },
     [] { return std::string("seconds, e.g. 5 or 0.5, 0 to 86400"); }, "--grace"},
    {"report",
     [](parsed_options& o, std::string_view value) {
       o.report = std::string(value);
       return true;
     },
     [] { return std::string("a path"); }, "--report"},
    bool_item<&parsed_options::track>("track", "--track"),
    bool_item<&parsed_options::require_clean>("require_clean", "--require-clean"),
    bool_item<&parsed_options::cgroup>("cgroup", "the opposite of --no-cgroup"),
    bool_item<&parsed_options::pid_namespace>("namespace", "the opposite of --no-namespace"),
};

void read_environment_options(parsed_options& opts) {
  const char* text = std::getenv("GPUGUARD_RUN_OPTIONS");
  if (text == nullptr) { return; }
  detail::print_option_errors("gpuguard run: GPUGUARD_RUN_OPTIONS", detail::apply_option_items(text, environment_keys, opts));
}

// CMD's environment: ours, without GPUGUARD_RUN_OPTIONS, with LD_PRELOAD and GPUGUARD_OPTIONS
// extended as asked.
std::vector<std::string> command_environment(const std::string& preload, const std::vector<std::string>& options) {
  std::vector<std::string> env;
  std::optional<std::string> ld_preload;
  std::optional<std::string> gpuguard_options;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("GPUGUARD_RUN_OPTIONS=", 0) == 0) { continue; }
    if (entry.rfind("LD_PRELOAD=", 0) == 0) {
      ld_preload = std::string(entry.substr(std::strlen("LD_PRELOAD=")));
      continue;
    }
    if (entry.rfind("GPUGUARD_OPTIONS=", 0) == 0) {
      gpuguard_options = std::string(entry.substr(std::strlen("GPUGUARD_OPTIONS=")));
      continue;
    }
    env.emplace_back(entry);
  }
  if (!preload.empty()) {
    // LD_PRELOAD takes ':' or ' ' between entries; ours goes first, the rest is kept.
    bool present = false;
    if (ld_preload) {
      std::size_t begin = 0;
      while (begin <= ld_preload->size()) {
        std::size_t end = ld_preload->find_first_of(": ", begin);
        if (end == std::string::npos) { end = ld_preload->size(); }
        present = present || ld_preload->compare(begin, end - begin, preload) == 0;
        begin = end + 1;
      }
    }
    if (!present) { ld_preload = ld_preload && !ld_preload->empty() ? preload + ":" + *ld_preload : preload; }
  }
  for (const std::string& o : options) {
    gpuguard_options = gpuguard_options && !gpuguard_options->empty() ? *gpuguard_options + ":" + o : o;
  }
  if (ld_preload) { env.push_back("LD_PRELOAD=" + *ld_preload); }
  if (gpuguard_options) { env.push_back("GPUGUARD_OPTIONS=" + *gpuguard_options); }
  return env;
}

}  // namespace

int run_main(int argc, char** argv) {
  parsed_options opts;
  read_environment_options(opts);
  run_config config;
  // The command line: CLI11 stops at the first argument that is not an option (prefix_command), and
  // leaves it and everything after it, '--' included, to CMD.
  CLI::App app;
  describe_command(app, help_text);
  app.prefix_command();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string grace;
  std::string report;
  std::string device_prefix;
  const CLI::Option* grace_given = app.add_option("--grace", grace, "time between SIGTERM and SIGKILL for the leftovers (default 5)")->type_name("SECONDS");
  const CLI::Option* report_given = app.add_option("--report", report, "write a JSON report (schema gpuguard.run version 1, run.md)")->type_name("PATH");
  const CLI::Option* prefix_given = app.add_option("--device-prefix", device_prefix,
                 "device files that count as holding a GPU (default /dev/nvidia)")
      ->type_name("PATH")
      ->envname("GPUGUARD_DEVICE_PREFIX");
  bool no_cgroup = false;
  bool no_namespace = false;
  bool require_clean = false;
  bool track = false;
  app.add_flag("--no-cgroup", no_cgroup, "do not make the job's cgroup: its PID namespace, else the subreaper path")
      ->disable_flag_override();
  app.add_flag("--no-namespace", no_namespace, "without the cgroup, do not make the job's PID namespace: the subreaper path alone")
      ->disable_flag_override();
  app.add_flag("--require-clean", require_clean, "after the job, exit 125 unless the GPU is clean within the grace period")
      ->disable_flag_override();
  app.add_flag("--track", track, "track CMD's allocations: prepend libgpuguard_preload.so to LD_PRELOAD")
      ->disable_flag_override();
  app.add_option("--options", opts.options, "append these items to CMD's GPUGUARD_OPTIONS (options.md)")
      ->type_name("K=V:...")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);
  if (const std::optional<int> rc = parse_command_line(app, help_text.words, argc, argv)) { return *rc; }
  if (track) { opts.track = true; }
  if (no_cgroup) { opts.cgroup = false; }
  if (no_namespace) { opts.pid_namespace = false; }
  if (require_clean) { opts.require_clean = true; }
  if (grace_given->count() > 0) {
    opts.grace_ms = detail::parse_grace_ms(grace);
    if (!opts.grace_ms) {
      return usage_error(help_text.words, "bad --grace value '" + grace + "': expected seconds, e.g. 5 or 0.5, from 0 to 86400");
    }
  }
  if (report_given->count() > 0) {
    if (report.empty()) { return usage_error(help_text.words, "--report needs a path"); }
    opts.report = report;
  }
  if (prefix_given->count() > 0) {
    if (device_prefix.empty()) { return usage_error(help_text.words, "--device-prefix needs a path"); }
    opts.device_prefix = device_prefix;
  }
  for (const std::string& o : opts.options) {
    if (o.empty()) { return usage_error(help_text.words, "--options needs K=V items"); }
  }
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-') {
    return usage_error(help_text.words, "unknown option '" + rest.front() + "'");
  }
  if (rest.empty()) { return usage_error(help_text.words, "no command given: gpuguard run [OPTIONS] -- CMD [ARGS...]"); }
  config.command = std::move(rest);
  if (config.command.front().empty()) { return usage_error(help_text.words, "the command is an empty string"); }
  if (opts.grace_ms) { config.grace_ms = *opts.grace_ms; }
  if (opts.device_prefix) { config.device_prefix = *opts.device_prefix; }
  config.use_cgroup = opts.cgroup.value_or(true);
  config.use_namespace = opts.pid_namespace.value_or(true);
  config.require_clean = opts.require_clean.value_or(false);
  if (opts.report && !opts.report->empty()) {
    config.report_path = detail::expand_path(*opts.report);
    const std::string dir = directory_of(config.report_path);
    if (::access(dir.c_str(), W_OK) != 0) {
      return usage_error(help_text.words, "cannot write the report '" + config.report_path + "': " + dir + ": " + std::strerror(errno));
    }
  }
  std::string preload;
  if (opts.track.value_or(false)) {
    std::string looked;
    preload = find_preload_library(looked);
    if (preload.empty()) {
      std::fprintf(stderr,
                   "gpuguard run: --track: libgpuguard_preload.so not found; looked in: %s "
                   "(build it, or set GPUGUARD_PRELOAD_LIBRARY=PATH)\n",
                   looked.c_str());
      return 2;
    }
  }
  config.environment = command_environment(preload, opts.options);
  // With --track each process that used CUDA leaves a record here; the summary reads them.
  const std::string track_dir = preload.empty() ? std::string() : make_track_dir();
  if (!track_dir.empty()) { config.environment.push_back("GPUGUARD_TRACK_DIR=" + track_dir); }

  run_outcome outcome;
  try {
    outcome = supervise(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpuguard run: %s\n", e.what());
    if (!track_dir.empty()) { static_cast<void>(::rmdir(track_dir.c_str())); }
    return 1;
  }
  if (outcome.how == run_outcome::end::not_started) {
    std::fprintf(stderr, "gpuguard run: cannot start '%s': %s%s\n", printable_on_one_line(config.command.front()).c_str(),
                 outcome.setup_failed ? "fork: " : "", std::strerror(outcome.exec_error));
    if (!track_dir.empty()) { static_cast<void>(::rmdir(track_dir.c_str())); }
  } else {
    write_track_summary(track_dir, stderr);
    std::fputs(run_summary_line(config, outcome).c_str(), stderr);
    for (const process_postmortem& p : outcome.postmortems) { std::fputs(postmortem_text(p).c_str(), stderr); }
  }
  if (!config.report_path.empty()) {
    if (std::string error; !detail::write_file_atomically(config.report_path, run_report_json(config, outcome), &error)) {
      std::fprintf(stderr, "gpuguard run: cannot write the report: %s\n", error.c_str());
    }
  }
  return outcome.exit_status;
}

}  // namespace gpuguard::cli
