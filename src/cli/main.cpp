// The `gpuguard` command: one executable, one subcommand per job. Each subcommand lives in its own
// file and has the signature `int NAME_main(int argc, char** argv)` (argv[0] is the subcommand).
// Usage errors exit 2 with a message naming the bad input, as docs/design.md's contracts say.
#include "commands.hpp"
#include "docs_path.hpp"

#include <cstdio>
#include <cstring>
#include <string_view>

namespace {

struct command {
  const char* name;
  int (*main)(int, char**);
  const char* summary;
};

constexpr command commands[] = {
    {"run", gpuguard::cli::run_main, "run a command so that no process of it outlives it holding GPU memory"},
    {"doctor", gpuguard::cli::doctor_main, "find the processes that hold GPU memory, and why"},
    {"report", gpuguard::cli::report_main, "render a JSONL event log as one self-contained HTML page"},
    {"symbolize", gpuguard::cli::symbolize_main, "resolve the frames of a crash record to functions and lines"},
};

void print_usage(std::FILE* out) {
  std::fputs("usage: gpuguard COMMAND [ARGS...]\n"
             "       gpuguard COMMAND --help\n"
             "\n"
             "commands:\n", out);
  for (const command& c : commands) { std::fprintf(out, "  %-10s %s\n", c.name, c.summary); }
  std::fprintf(out, "\nDocs: %s (outputs.md, hooks.md, run.md, doctor.md, report.md, formats.md, options.md)\n", gpuguard::cli::docs_dir().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("gpuguard %s\n", GPUGUARD_VERSION);
    return 0;
  }
  for (const command& c : commands) {
    if (name == c.name) { return c.main(argc - 1, argv + 1); }
  }
  std::fprintf(stderr, "gpuguard: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
