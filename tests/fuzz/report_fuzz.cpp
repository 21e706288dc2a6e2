// A seeded mutation fuzzer for the event-log reader of `gpuguard report` (src/cli/report/report_events.cpp,
// report_page_data.cpp and the page it fills, report_html.cpp), for ctest: it starts from logs (tests/fuzz/report_corpus),
// mutates lines, fields, numbers and bytes, and reads every mutated log twice, with the default
// limits and with tiny ones (so that every thinning path runs). On every log it checks what the
// reader promises: no exception but std::bad_alloc; each skipped line's reason one printable
// line; the counts add up (lines read, used, skipped, the reasons listed); the page's data is
// JSON whose every thinned list stays within its limit and whose series keep their maximum;
// the same log gives the same data; the data's size is bounded by the log's; and nothing in the
// log can open or close an element of the page (every '<' in it is the template's).
// Built with the reader under ASan and UBSan.
//
// usage: report_fuzz CORPUS_DIR [--seed N] [--iterations N] [--seconds S]
#include "fuzz_driver.hpp"
#include "json.hpp"
#include "report/report_html.hpp"
#include "report/report_page_data.hpp"

#include <algorithm>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace {

using gpuguard::cli::json;

const std::vector<std::string> dictionary = {
    "{", "}", "[", "]", ",", ":", "\"", "\\\"", "\\n", "\\u0000", "\\u001b", "\\ud800", "\\udc00", "</script>",
    "<!--", "<script>", "&amp;", "null", "true", "false", "-1", "0", "-0", "1.5", "1e308", "1e999", "-1e999",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "18446744073709551616",
    "\"v\":1", "\"v\":2", "\"type\":", "\"t\":", "\"device\":", "\"thread\":", "\"depth\":", "\"dur\":",
    "\"name\":", "\"sites\":[", "\"frames\":[", "\"devices\":[", "\"schema\":\"gpuguard.events\"",
    "\"start\"", "\"device\"", "\"thread\"", "\"mem\"", "\"op\"", "\"alert\"", "\"dropped\"", "\"sites\"",
    "\"leaks\"", "\"end\"", "\"crash\"", "\"live_bytes\":", "\"peak_bytes\":", "\"used_bytes\":", "\"total_bytes\":",
    "\"exception\":true", "\"count\":", "\"total\":", "\xc3\xa4", "\xff", "\xed\xa0\x80"};

// Whole lines the mutations insert: every event type, with edge values.
const std::vector<std::string> extra_lines = {
    R"({"v":1,"type":"start","t":0,"schema":"gpuguard.events","pid":1,"program":"</script><script>alert(1)</script>","unix_ns":-1})",
    R"({"v":1,"type":"device","t":1,"device":-1,"name":"<title>x</title>","total_bytes":9223372036854775807})",
    R"({"v":1,"type":"mem","t":9223372036854775807,"device":2147483648,"live_bytes":9223372036854775807,"peak_bytes":-1,"allocations":1,"frees":2})",
    R"({"v":1,"type":"mem","t":-9223372036854775808,"device":-1,"live_bytes":0,"peak_bytes":0,"allocations":0,"frees":0,"used_bytes":1,"total_bytes":0})",
    R"({"v":1,"type":"op","t":5,"name":"","thread":-7,"depth":1000000,"dur":9223372036854775807,"alloc_bytes":1,"free_bytes":1,"net_bytes":-9223372036854775808,"peak_bytes":1,"allocs":1,"frees":1,"exception":true,"device":0,"used_before":1,"used_after":2})",
    R"({"v":1,"type":"thread","t":1,"thread":3,"tid":-1,"name":"\u0000\u001b[2J"})",
    R"({"v":1,"type":"alert","t":3,"kind":"device_full","device":0,"used_bytes":1,"total_bytes":1,"fraction":1.0,"message":"<b>\n"})",
    R"({"v":1,"type":"dropped","t":4,"count":9223372036854775807,"total":9223372036854775807})",
    R"({"v":1,"type":"sites","t":5,"sites":[{"site":1,"device":0,"tag":"","bytes":1,"count":1,"frames":[{"address":"0x1","function":"</script>","file":"f","line":1}]}]})",
    R"({"v":1,"type":"leaks","t":6,"total_bytes":1,"total_count":1,"sites":[{"site":1,"device":0,"tag":"x","bytes":1,"count":1,"frames":[]}]})",
    R"({"v":1,"type":"end","t":7,"reason":"exit","dropped":0,"devices":[],"misuse":{"unknown_pointer":0,"double_free":0,"wrong_size":0,"wrong_device":0}})",
    R"({"v":1,"type":"start","t":0,"schema":"gpuguard.events\n\u001b[31mforged","pid":1,"program":"p","unix_ns":0})",
    R"({"v":1,"type":"gpu_temperature","t":1,"celsius":70})",
    R"({"v":1,"type":"crash","t":5,"signal":"</script>","code":-9223372036854775808,"address":"
","thread":77,"crash_file":"]0;x","devices":[{"device":-1,"live_bytes":1,"live_count":2,"peak_bytes":3}],"sites":[],"frames":["0x1"]})",
    R"({"v":1,"type":"op","t":1,"name":"deep","thread":1,"depth":0,"dur":1,"alloc_bytes":0,"free_bytes":0,"net_bytes":0,"peak_bytes":0,"allocs":0,"frees":0,"exception":false,"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]})"};

std::vector<std::string> split_lines(const std::string& text, bool& last_unterminated) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      lines.push_back(text.substr(start));
      last_unterminated = true;
      return lines;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  last_unterminated = false;
  return lines;
}

const json* at(const json& v, const char* key) { return gpuguard::cli::member(v, key); }

std::int64_t integer(const json* v) { return v != nullptr && v->is_number_integer() ? v->get<std::int64_t>() : -1; }

std::size_t array_size(const json* v) { return v != nullptr && v->is_array() ? v->size() : 0; }

// The page's time axis, run.work, spans everything drawn on it: every series point, the start of
// every allocation band and alert, and every operation scope from its start to its end.
std::string check_work_span(const json& d) {
  std::vector<std::pair<std::int64_t, std::int64_t>> drawn;  // from, to
  const auto each = [](const json* list, auto f) {
    for (std::size_t i = 0; i < array_size(list); ++i) { f(list->at(i)); }
  };
  const json* devices = at(d, "devices");
  each(devices, [&](const json& device) {
    for (const char* name : {"live", "peak", "used"}) {
      const json* series = at(device, name);
      if (series == nullptr || series->is_null()) { continue; }
      each(at(*series, "t"), [&](const json& t) { drawn.emplace_back(integer(&t), integer(&t)); });
    }
    const json* timeline = at(device, "timeline");
    if (timeline != nullptr) { each(at(*timeline, "t"), [&](const json& t) { drawn.emplace_back(integer(&t), integer(&t)); }); }
  });
  each(at(d, "alerts"), [&](const json& alert) { drawn.emplace_back(integer(at(alert, "t")), integer(at(alert, "t"))); });
  each(at(d, "ops"), [&](const json& op) {
    const std::int64_t t = integer(at(op, "t"));
    const std::int64_t dur = integer(at(op, "dur"));
    constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
    drawn.emplace_back(t, dur > most - t ? most : t + dur);
  });
  const json* run = at(d, "run");
  const json* work = run != nullptr ? at(*run, "work") : nullptr;
  if (work == nullptr || work->is_null()) { return drawn.empty() ? "" : "things drawn on the time axis, but no work span"; }
  const std::int64_t first = integer(at(*work, "start_ns"));
  const std::int64_t last = integer(at(*work, "end_ns"));
  if (first < 0 || first > last) { return "the work span is not a span"; }
  for (const auto& [from, to] : drawn) {
    if (from < first || to > last) { return "something drawn lies outside the work span (the time axis)"; }
  }
  return "";
}

// What must hold for one reading of `lines` with `limits`.
std::string check_reading(const std::vector<std::string>& lines, bool last_unterminated,
                          const gpuguard::cli::report::report_limits& limits, std::size_t input_bytes, std::string& data) {
  gpuguard::cli::report::page_data log(limits);
  std::vector<std::pair<std::size_t, std::string>> skipped;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string reason;
    if (log.add_line(lines[i], i + 1, last_unterminated && i + 1 == lines.size(), &reason)) { continue; }
    if (reason.empty()) { return "line " + std::to_string(i + 1) + ": skipped without a reason"; }
    for (const char c : reason) {
      if (static_cast<unsigned char>(c) < 0x20) {
        return "line " + std::to_string(i + 1) + ": a reason that is not one printable line: " + gpuguard_fuzz::escaped(reason);
      }
    }
    if (reason.size() > gpuguard::cli::report::max_reason_bytes) {
      return "line " + std::to_string(i + 1) + ": a reason over " + std::to_string(gpuguard::cli::report::max_reason_bytes) + " bytes";
    }
    skipped.emplace_back(i + 1, reason);
  }
  if (log.lines_read() != lines.size()) { return "lines_read is not the number of lines"; }
  if (log.lines_skipped() != skipped.size()) { return "lines_skipped is not the number of reasons"; }
  if (log.events_used() + log.lines_skipped() > log.lines_read()) { return "more lines used and skipped than read"; }

  data = log.data_json("fuzz", "fuzz.jsonl");
  if (data.size() > 16 * input_bytes + (std::size_t{256} << 10)) {
    return "the page's data (" + std::to_string(data.size()) + " bytes) is unbounded by the log's";
  }
  gpuguard::cli::json_error error;
  const std::optional<json> parsed = gpuguard::cli::parse_json(data, &error, 1024);
  if (!parsed) { return "the page's data is not JSON: " + error.message; }
  const json& d = *parsed;
  const json* source = at(d, "source");
  if (source == nullptr || integer(at(*source, "lines_read")) != static_cast<std::int64_t>(log.lines_read()) ||
      integer(at(*source, "events_used")) != static_cast<std::int64_t>(log.events_used()) ||
      integer(at(*source, "lines_skipped")) != static_cast<std::int64_t>(log.lines_skipped())) {
    return "the data's source counts differ from the reader's";
  }
  const json* shown = at(d, "skipped") != nullptr ? at(*at(d, "skipped"), "lines") : nullptr;
  if (array_size(shown) != std::min(skipped.size(), limits.max_skipped_shown)) { return "skipped lines listed beyond the limit"; }
  for (std::size_t i = 0; i < array_size(shown); ++i) {
    const json& entry = shown->at(i);
    const json* reason = at(entry, "reason");
    if (integer(at(entry, "line")) != static_cast<std::int64_t>(skipped[i].first) || reason == nullptr ||
        !reason->is_string() || *reason != skipped[i].second) {
      return "a listed skipped line is not the one the reader returned";
    }
  }
  const json* devices = at(d, "devices");
  for (std::size_t i = 0; i < array_size(devices); ++i) {
    for (const char* name : {"live", "peak", "used"}) {
      const json* series = at(devices->at(i), name);
      if (series == nullptr || series->is_null()) { continue; }
      const std::size_t points = array_size(at(*series, "t"));
      if (points != array_size(at(*series, "v")) || points > 4 * limits.max_buckets) {
        return std::string("a device's ") + name + " series is over its bucket limit or ragged";
      }
      const std::int64_t max = integer(at(*series, "max"));
      for (const json& v : *at(*series, "v")) {
        if (!v.is_number_integer() || v.get<std::int64_t>() > max) { return std::string("a device's ") + name + " series exceeds its max"; }
      }
    }
    // The allocation bands: columns of one length, within the limit, each band inside the run.
    const json* timeline = at(devices->at(i), "timeline");
    if (timeline == nullptr) { return "a device without its timeline"; }
    const std::size_t bands = array_size(at(*timeline, "t"));
    if (bands > std::max<std::size_t>(limits.max_bands / 2, 1) * 2 ||
        integer(at(*timeline, "bands_drawn")) != static_cast<std::int64_t>(bands)) {
      return "a device's allocation bands over their limit";
    }
    for (const char* column : {"end", "bytes", "site", "thread", "live_at_end"}) {
      if (array_size(at(*timeline, column)) != bands) { return "a device's allocation band columns are ragged"; }
    }
    for (std::size_t b = 0; b < bands; ++b) {
      if (integer(&at(*timeline, "end")->at(b)) < integer(&at(*timeline, "t")->at(b))) {
        return "an allocation band ends before it starts";
      }
    }
  }
  const json* threads = at(d, "threads");
  std::size_t drawn = 0;
  for (std::size_t i = 0; i < array_size(threads); ++i) {
    const std::int64_t n = integer(at(threads->at(i), "ops_drawn"));
    if (n < 0 || static_cast<std::size_t>(n) > limits.max_ops_per_thread) { return "a thread's bands over the limit"; }
    drawn += static_cast<std::size_t>(n);
  }
  if (array_size(at(d, "ops")) != drawn) { return "the bands drawn are not the threads' ops_drawn"; }
  if (array_size(at(d, "op_summary")) > limits.max_op_names + 1) { return "the operation summary over its limit"; }
  if (array_size(at(d, "alerts")) > limits.max_alerts) { return "alerts over their limit"; }
  return check_work_span(d);
}

std::string check(const std::string& text) {
  try {
    bool last_unterminated = false;
    const std::vector<std::string> lines = split_lines(text, last_unterminated);
    gpuguard::cli::report::report_limits tiny;
    tiny.max_buckets = 2;
    tiny.max_ops_per_thread = 2;
    tiny.max_op_names = 2;
    tiny.max_alerts = 1;
    tiny.max_skipped_shown = 1;
    tiny.max_bands = 2;
    for (const gpuguard::cli::report::report_limits& limits : {gpuguard::cli::report::report_limits{}, tiny}) {
      std::string data;
      std::string broken = check_reading(lines, last_unterminated, limits, text.size(), data);
      if (!broken.empty()) { return broken; }
      std::string again;
      broken = check_reading(lines, last_unterminated, limits, text.size(), again);
      if (!broken.empty() || again != data) { return "the same log read twice gives different data"; }
      if (limits.max_buckets != tiny.max_buckets) {
        // The log's strings (the title too) cannot open or close an element of the page (no
        // "</script>", no "<!--"): every '<' of the page is the template's.
        static const std::size_t template_tags = [] {
          const std::string page = gpuguard::cli::render_report_html("t", gpuguard::cli::report::page_data().data_json("t", "p"));
          return static_cast<std::size_t>(std::count(page.begin(), page.end(), '<'));
        }();
        const std::string title = lines.empty() ? std::string() : lines.front().substr(0, 200);
        const std::string page = gpuguard::cli::render_report_html(title, data);
        if (static_cast<std::size_t>(std::count(page.begin(), page.end(), '<')) != template_tags) {
          return "the log's text adds a '<' to the page";
        }
      }
    }
  } catch (const std::bad_alloc&) {
    return "";
  } catch (...) {
    return "the reader threw";
  }
  return "";
}

std::string next_input(gpuguard_fuzz::random_source& random, const std::vector<std::string>& corpus) {
  bool unterminated = false;
  std::vector<std::string> lines = split_lines(random.pick(corpus), unterminated);
  if (lines.size() > 60) {  // a window of the log: short logs, many of them
    const std::size_t from = random.below(lines.size() - 40);
    lines = std::vector<std::string>(lines.begin() + static_cast<std::ptrdiff_t>(from),
                                     lines.begin() + static_cast<std::ptrdiff_t>(std::min(lines.size(), from + 60)));
    if (random.one_in(2)) { lines.insert(lines.begin(), extra_lines.front()); }  // a start line
  }
  const std::size_t steps = 1 + random.below(8);
  for (std::size_t i = 0; i < steps; ++i) {
    const std::size_t at = random.below(lines.size() + 1);
    switch (random.below(7)) {
      case 0: lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), random.pick(extra_lines)); break;
      case 1:  // a line again (a second start, the same op twice)
        if (!lines.empty()) { lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), random.pick(lines)); }
        break;
      case 2:
        if (at < lines.size()) { lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(at)); }
        break;
      case 3:  // many of one line: every limit reached
        if (!lines.empty()) {
          const std::string line = random.pick(lines);
          for (std::size_t n = random.below(200); n-- > 0;) { lines.push_back(line); }
        }
        break;
      case 4:  // a number changed in place
        if (!lines.empty()) {
          std::string& line = lines[random.below(lines.size())];
          const std::size_t digit = line.find_first_of("0123456789", random.below(line.size() + 1));
          if (digit != std::string::npos) {
            const std::size_t end = line.find_first_not_of("0123456789", digit);
            line.replace(digit, end == std::string::npos ? std::string::npos : end - digit,
                         random.pick(std::vector<std::string>{"0", "1", "-1", "9223372036854775807", "9223372036854775808",
                                                              "1e308", "0.5", std::to_string(random.below(100000))}));
          }
        }
        break;
      default:
        if (!lines.empty()) { random.mutate_bytes(lines[random.below(lines.size())], dictionary); }
        break;
    }
  }
  std::string text;
  for (const std::string& line : lines) { text += line + "\n"; }
  if (random.one_in(4) && !text.empty()) { text.pop_back(); }  // a writer that died mid-line
  if (random.one_in(8) && text.size() > 2) { text.resize(random.below(text.size())); }
  return text;
}

}  // namespace

int main(int argc, char** argv) { return gpuguard_fuzz::run("report_fuzz", argc, argv, check, next_input); }
