// `gpuguard report LOG.jsonl -o report.html`: reads a JSONL event log line by line into typed
// records (report_events) folded into the page's data (report_page_data), renders one
// self-contained HTML page (report_html) and writes it through a temporary file and a
// rename. Exit status: 0 page written, 1 log unreadable or page unwritable, 2 usage error.
#include "command_line.hpp"
#include "docs_path.hpp"
#include "commands.hpp"
#include "util/file.hpp"
#include "util/format.hpp"
#include "report/report_html.hpp"
#include "report/report_page_data.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gpuguard::cli {

namespace {

constexpr const char* usage_line = "usage: gpuguard report LOG.jsonl [-o OUTPUT.html] [--title TEXT]";

constexpr const char* description =
    "Renders a gpuguard JSONL event log (written with GPUGUARD_OPTIONS=jsonl_log=PATH; schema\n"
    "gpuguard.events version 1, see formats.md) as ONE self-contained HTML page: no network,\n"
    "no external files; open it in any browser. LOG may be '-' for standard input.\n"
    "\n"
    "The page shows:\n"
    "  - the run: program, pid, start time, duration, stack backend (when the log says)\n"
    "  - per device, a memory timeline: ledger live bytes, the ledger's peak between samples,\n"
    "    device-wide used bytes and the device's capacity; operation scopes as bands on per-thread\n"
    "    lanes (nested scopes one row lower), alerts as markers; hover for details, drag to zoom,\n"
    "    double-click to reset\n"
    "  - per-operation totals by name: calls, time, bytes allocated, largest peak, net, exceptions\n"
    "  - the allocation sites that allocated the most, the leaks at exit with their stacks,\n"
    "    alerts, dropped events and the device counters at exit\n"
    "  - the log lines that could not be used, and why";

constexpr const char* footer =
    "--output: '-' is standard output; the default is LOG with its .jsonl, .json or .log suffix\n"
    "replaced by .html, next to it (required when LOG is '-'). The page is written to a temporary\n"
    "file beside PATH and renamed: PATH is never left half written, and nothing is written when\n"
    "the command fails.\n"
    "\n"
    "A line that cannot be used (not JSON, not an object, a missing or mistyped field, an unknown\n"
    "version) is reported on stderr as 'gpuguard report: LOG:LINE: why' (the first 20; then how\n"
    "many more) and listed in the page; everything else is still shown. A last line cut short (the\n"
    "process ended while writing it) is skipped too, and the summary says so. A file that is no\n"
    "event log at all (empty, a Chrome trace written by trace_file=, binary data, JSON lines of no\n"
    "gpuguard event) is named as what it is, and no page is written. Lines of unknown types and\n"
    "unknown fields are ignored, so newer logs still render. Long logs are read as a stream: memory\n"
    "samples are reduced to a few thousand points per device (each bucket keeps its lowest and\n"
    "highest sample, so peaks survive) and at most 2000 operation bands are drawn per thread\n"
    "(the longest and the biggest); the page says when it thinned anything. Strings are kept to\n"
    "256 bytes: a longer name is cut and shown as 'name… (102400 bytes)'. A one-line summary\n"
    "goes to stdout (to stderr with -o -).\n"
    "\n"
    "exit status:\n"
    "  0  the page was written (even when some lines were skipped)\n"
    "  1  the log could not be read, or the page could not be written (nothing is written)\n"
    "  2  usage error\n"
    "  3  nothing in the log could be used: it is empty or no event log (nothing is written)";

// Lines longer than this are skipped unread: no event of version 1 comes near it.
constexpr std::size_t max_line_bytes = std::size_t{16} << 20;
// Skipped lines named on stderr one by one; past this, one line says how many more there were.
constexpr std::size_t max_stderr_lines = 20;

constexpr command_help help_text{usage_line, description, footer, {"report", true, true}, "report.md"};

int usage_error(const std::string& message) { return cli::usage_error(help_text.words, message); }

// How the output option was spelt, the last time: "-o" or "--output".
std::string output_spelling(int argc, char** argv) {
  for (int i = argc - 1; i > 0; --i) {
    const std::string_view arg = argv[i];
    if (arg == "-o" || arg.rfind("--output", 0) == 0) { return std::string(arg.substr(0, arg.find('='))); }
  }
  return "--output";
}

// Reads a file line by line in fixed-size blocks, so that a hostile line cannot take more than
// max_line_bytes of memory.
class line_reader {
 public:
  explicit line_reader(std::FILE* file) : file_(file), buffer_(std::size_t{1} << 16) {}

  // The next line without its newline; false at the end of the file or on a read error.
  bool next(std::string& line, bool& terminated, bool& too_long) {
    line.clear();
    terminated = false;
    too_long = false;
    bool any = false;
    for (;;) {
      if (pos_ == size_) {
        if (done_) { return any; }
        size_ = std::fread(buffer_.data(), 1, buffer_.size(), file_);
        pos_ = 0;
        if (size_ == 0) {
          if (std::ferror(file_) != 0) { error_ = errno != 0 ? errno : EIO; }
          done_ = true;
          return any;
        }
      }
      any = true;
      const char* begin = buffer_.data() + pos_;
      const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', size_ - pos_));
      const std::size_t n = newline != nullptr ? static_cast<std::size_t>(newline - begin) : size_ - pos_;
      if (!too_long) {
        if (line.size() + n > max_line_bytes) {
          too_long = true;
          std::string().swap(line);
        } else {
          line.append(begin, n);
        }
      }
      pos_ += n;
      if (newline != nullptr) {
        ++pos_;
        terminated = true;
        return true;
      }
    }
  }

  [[nodiscard]] int error() const noexcept { return error_; }

 private:
  std::FILE* file_;
  std::vector<char> buffer_;
  std::size_t pos_ = 0;
  std::size_t size_ = 0;
  bool done_ = false;
  int error_ = 0;
};

// What a first line that is no event says the file is, or "" when it may be an event log.
std::string what_else(const std::string& first_line) {
  std::size_t controls = 0;
  for (const char ch : first_line.substr(0, 4096)) {
    const auto byte = static_cast<unsigned char>(ch);
    if (byte == 0) { return "binary data (it has NUL bytes)"; }
    controls += byte < 0x09 || (byte > 0x0d && byte < 0x20) ? 1 : 0;
  }
  if (controls * 10 > std::min<std::size_t>(first_line.size(), 4096)) { return "binary data, not text"; }
  // Not UTF-8 (every event log is): a well-formed sequence has a lead byte and its continuations.
  for (std::size_t i = 0; i < first_line.size() && i < 4096;) {
    const auto byte = static_cast<unsigned char>(first_line[i]);
    const std::size_t length = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xe ? 3 : (byte >> 3) == 0x1e ? 4 : 0;
    if (length == 0 || i + length > first_line.size()) { return "binary data, not UTF-8 text"; }
    for (std::size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(first_line[i + k]) >> 6) != 0x2) { return "binary data, not UTF-8 text"; }
    }
    i += length;
  }
  const std::size_t start = first_line.find_first_not_of(" \t\r");
  if (start != std::string::npos && (first_line[start] == '[' || first_line.find("\"traceEvents\"") != std::string::npos)) {
    return "a Chrome trace (written by trace_file=; open it in Perfetto or chrome://tracing), not the event log "
           "(jsonl_log=)";
  }
  return "";
}

// LOG.jsonl -> LOG.html, next to it.
std::string default_output(const std::string& log) {
  for (const char* suffix : {".jsonl", ".json", ".log"}) {
    const std::size_t n = std::strlen(suffix);
    if (log.size() > n && log.compare(log.size() - n, n, suffix) == 0 && log[log.size() - n - 1] != '/') {
      return log.substr(0, log.size() - n) + ".html";
    }
  }
  return log + ".html";
}

std::string base_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// What the command line asks for.
struct report_options {
  std::string log_path;
  std::string output;
  std::string title;
  bool title_given = false;
};

// Reads the command line into `options`. Returns the exit status when the command ends here (help,
// a usage error), nullopt when it goes on.
std::optional<int> parse_options(int argc, char** argv, report_options& options) {
  CLI::App app;
  describe_command(app, help_text);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  const CLI::Option* log_given =
      app.add_option("LOG", options.log_path, "the JSONL event log to read ('-' = standard input)")->type_name("");
  const CLI::Option* output_given =
      app.add_option("-o,--output", options.output, "where to write the page (default: LOG with .html)")->type_name("PATH");
  const CLI::Option* title_given =
      app.add_option("--title", options.title, "the page's title (default: 'gpuguard report: ' and the program's name)")
          ->type_name("TEXT");
  if (const std::optional<int> rc = parse_command_line(app, help_text.words, argc, argv)) { return rc; }
  const bool have_log = log_given->count() > 0;
  const bool have_output = output_given->count() > 0;
  options.title_given = title_given->count() > 0;
  if (have_log && options.log_path.empty()) { return usage_error("the LOG path is empty"); }
  if (have_output && options.output.empty()) {
    return usage_error("option '" + output_spelling(argc, argv) + "' needs a non-empty path");
  }
  if (!have_log) { return usage_error("missing LOG (the JSONL event log to read)"); }
  if (!have_output) {
    if (options.log_path == "-") { return usage_error("missing -o OUTPUT (needed when LOG is standard input)"); }
    options.output = default_output(options.log_path);
  }
  return std::nullopt;
}

// Reads the log from `file` (named `shown_path` in messages) into `page`, naming the first skipped
// lines on stderr. Returns the exit status when the command ends here (the file is no event log, or
// cannot be read), nullopt when it goes on.
std::optional<int> read_log(std::FILE* file, const std::string& shown_path, report::page_data& page) {
  line_reader reader(file);
  std::string line;
  bool terminated = false;
  bool too_long = false;
  std::size_t number = 0;
  std::size_t reported = 0;
  while (reader.next(line, terminated, too_long)) {
    ++number;
    if (const std::string other = number == 1 ? what_else(line) : std::string(); !other.empty()) {
      std::fprintf(stderr, "gpuguard report: '%s' is %s: nothing to report\n", shown_path.c_str(), other.c_str());
      return 3;
    }
    std::string problem;
    if (too_long) {
      problem = "line longer than " + detail::format_bytes(max_line_bytes);
      page.add_skipped_line(number, problem);
    } else if (page.add_line(line, number, !terminated, &problem)) {
      continue;
    }
    if (reported++ < max_stderr_lines) {
      std::fprintf(stderr, "gpuguard report: %s:%zu: %s\n", shown_path.c_str(), number, problem.c_str());
    }
  }
  if (reader.error() != 0) {
    std::fprintf(stderr, "gpuguard report: cannot read '%s': %s\n", shown_path.c_str(), std::strerror(reader.error()));
    return 1;
  }
  if (reported > max_stderr_lines) {
    std::fprintf(stderr, "gpuguard report: %s: %zu more lines skipped (not listed)\n", shown_path.c_str(),
                 reported - max_stderr_lines);
  }
  return std::nullopt;
}

// Writes `page` to `output` ('-': standard output) and the one-line summary. Returns the exit status.
int write_page(const std::string& page, const std::string& output, const report::page_data& data) {
  const bool to_stdout = output == "-";
  if (to_stdout) {
    if (std::fwrite(page.data(), 1, page.size(), stdout) != page.size() || std::fflush(stdout) != 0) {
      std::fprintf(stderr, "gpuguard report: cannot write to standard output: %s\n", std::strerror(errno));
      return 1;
    }
  } else if (std::string error; !detail::write_file_atomically(output, page, &error)) {
    std::fprintf(stderr, "gpuguard report: %s\n", error.c_str());
    return 1;
  }
  std::fprintf(to_stdout ? stderr : stdout, "gpuguard report: %zu lines read, %zu events used, %zu lines skipped%s; wrote %s\n",
               data.lines_read(), data.events_used(), data.lines_skipped(),
               data.last_line_cut() ? " (the last line was cut: the process ended while writing it)" : "",
               to_stdout ? "the page to standard output" : output.c_str());
  return 0;
}

}  // namespace

int report_main(int argc, char** argv) {
  report_options options;
  if (const std::optional<int> rc = parse_options(argc, argv, options)) { return *rc; }
  const bool from_stdin = options.log_path == "-";
  const std::string shown_path = from_stdin ? "<stdin>" : options.log_path;
  std::FILE* file = from_stdin ? stdin : std::fopen(options.log_path.c_str(), "rb");
  if (file == nullptr) {
    std::fprintf(stderr, "gpuguard report: cannot open '%s': %s\n", options.log_path.c_str(), std::strerror(errno));
    return 1;
  }
  report::page_data data;
  const std::optional<int> rc = read_log(file, shown_path, data);
  if (!from_stdin) { std::fclose(file); }
  if (rc) { return *rc; }
  if (data.events_used() == 0) {
    std::fprintf(stderr, "gpuguard report: '%s' %s: nothing to report\n", shown_path.c_str(),
                 data.lines_read() == 0
                     ? "is empty"
                     : "has no gpuguard event (schema gpuguard.events, written by jsonl_log=; docs/formats.md)");
    return 3;
  }
  if (!options.title_given) {
    options.title = "gpuguard report: " + base_name(data.program().empty() ? shown_path : data.program());
  }
  return write_page(render_report_html(options.title, data.data_json(options.title, shown_path)), options.output, data);
}

}  // namespace gpuguard::cli
