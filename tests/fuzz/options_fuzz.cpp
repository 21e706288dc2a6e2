// A seeded mutation fuzzer for the GPUGUARD_OPTIONS parser (src/options/options.cpp), for ctest: it starts
// from the corpus (tests/fuzz/options_corpus), mutates bytes, items, keys and values, and checks on
// every input what docs/options.md promises: no exception but std::bad_alloc, each message one
// printable line naming the key or item, at most one message per item, the same result twice, every
// accepted value inside its documented range, and a text of valid items alone giving no message.
// Built with the parser's source under AddressSanitizer and UndefinedBehaviorSanitizer.
//
// usage: options_fuzz CORPUS_DIR [--seed N] [--iterations N] [--seconds S]
// The run ends at whichever limit comes first; a failure prints the input (escaped) and exits 1.
#include "fuzz_driver.hpp"

#include <gpuguard/core/options.hpp>

#include <algorithm>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace {

using gpuguard::options;

// Keys, values and separators the mutations splice in: every key, good and bad values.
const std::vector<std::string> dictionary = {
    "stacks", "stack_sample", "stack_depth", "abort_on_error", "leak_report", "leak_json", "leak_exitcode",
    "leak_sites", "device", "host_capacity", "strict", "text_log", "jsonl_log", "trace_file", "prometheus_file",
    "prometheus_interval_ms", "nvtx", "sample_ms", "op_device_query", "alert_fraction", "alert_hysteresis",
    "alert_op_growth", "queue_capacity", "hooks", "crash_file", "cleanup_timeout", "torch",
    "=", ":", "::", "0", "1", "64", "65", "255", "256", "86400", "86401", "1048576", "1048577", "4294967295",
    "4294967296", "18446744073709551615", "18446744073709551616", "99999999999999999999", "0.", ".5", "0.8",
    "1.0", "1.01", "0..5", "-1", "+1", "4G", "4GiB", "16T", "17179869184G", "K", "KiB", "off", "all",
    "sampled", "auto", "cuda", "async", "host", "observe", "swap_in", "true", "yes", "no", "%p", "\xc3\xa4",
    std::string(1, '\0'), "\x7f", "\n", " "};

using gpuguard_fuzz::escaped;

std::size_t item_count(std::string_view text) {
  std::size_t items = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ':') {
      items += i > start ? 1 : 0;
      start = i + 1;
    }
  }
  return items;
}

bool same(const options& a, const options& b) {
  return a.stacks == b.stacks && a.stack_sample == b.stack_sample && a.stack_depth == b.stack_depth &&
         a.abort_on_error == b.abort_on_error && a.leak_report == b.leak_report && a.leak_json == b.leak_json &&
         a.leak_exitcode == b.leak_exitcode && a.leak_sites == b.leak_sites && a.device == b.device &&
         a.host_capacity == b.host_capacity && a.strict == b.strict && a.text_log == b.text_log &&
         a.jsonl_log == b.jsonl_log && a.trace_file == b.trace_file && a.prometheus_file == b.prometheus_file &&
         a.prometheus_interval_ms == b.prometheus_interval_ms && a.nvtx == b.nvtx && a.sample_ms == b.sample_ms &&
         a.op_device_query == b.op_device_query && a.alert_fraction == b.alert_fraction &&
         a.alert_hysteresis == b.alert_hysteresis && a.alert_op_growth == b.alert_op_growth &&
         a.queue_capacity == b.queue_capacity && a.hooks == b.hooks && a.crash_file == b.crash_file &&
         a.cleanup_timeout == b.cleanup_timeout && a.torch == b.torch;
}

// What must hold for one input; returns the broken promise, or "" when all hold.
std::string check(const std::string& text) {
  gpuguard::parsed_options first;
  try {
    first = gpuguard::parse_options(text);
  } catch (const std::bad_alloc&) {
    return "";  // the one exception the parser may throw
  } catch (...) {
    return "parse_options threw";
  }
  const gpuguard::parsed_options second = gpuguard::parse_options(text);
  if (!same(first.values, second.values) || first.errors != second.errors) { return "two parses differ"; }
  if (first.errors.size() > item_count(text)) { return "more messages than items"; }
  for (const std::string& error : first.errors) {
    if (error.empty() || error.size() > 4 * text.size() + 200) { return "a message of unbounded length"; }
    for (const char c : error) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte < 0x20 || byte >= 0x7f) { return "a message with a non-printable byte: " + escaped(error); }
    }
    if (error.find("; ignored") == std::string::npos) { return "a message that does not say ignored: " + error; }
  }
  const options& o = first.values;
  const bool in_range =
      o.stack_sample >= 1 && o.stack_sample <= 1000000 && o.stack_depth >= 1 && o.stack_depth <= 64 &&
      o.leak_exitcode >= 0 && o.leak_exitcode <= 255 && o.leak_sites >= 1 && o.leak_sites <= 100000 &&
      o.prometheus_interval_ms >= 100 && o.prometheus_interval_ms <= 3600000 && o.sample_ms >= 1 &&
      o.sample_ms <= 60000 && o.alert_fraction >= 0.0 && o.alert_fraction <= 1.0 && o.alert_hysteresis >= 0.0 &&
      o.alert_hysteresis <= 1.0 && o.queue_capacity >= 64 && o.queue_capacity <= gpuguard::max_queue_capacity &&
      o.cleanup_timeout <= 86400;
  if (!in_range) { return "an accepted value outside its documented range"; }
  // The items that were accepted, written again without the rejected ones, give no message.
  if (!first.errors.empty()) { return ""; }
  const gpuguard::parsed_options again = gpuguard::parse_options(text, first.values);
  if (!again.errors.empty() || !same(again.values, first.values)) { return "a valid text is not a fixed point"; }
  return "";
}

// One to four steps: a whole item key=value, a splice of another corpus entry, or a byte-level
// change (a flipped bit, a random byte, a deleted run, a repeated piece, a dictionary word, digits).
std::string next_input(gpuguard_fuzz::random_source& random, const std::vector<std::string>& corpus) {
  std::string text = random.pick(corpus);
  const std::size_t steps = 1 + random.below(4);
  for (std::size_t i = 0; i < steps; ++i) {
    switch (random.below(4)) {
      case 0: {  // a whole item key=value
        const std::string& key = dictionary[random.below(27)];
        text.append(":").append(key).append("=").append(random.pick(dictionary));
        break;
      }
      case 1: {  // splice another corpus entry
        const std::string& other = random.pick(corpus);
        text = text.substr(0, random.below(text.size() + 1)) + other.substr(random.below(other.size() + 1));
        break;
      }
      default: random.mutate_bytes(text, dictionary); break;
    }
  }
  if (text.size() > 4096) { text.resize(4096); }
  return text;
}

}  // namespace

int main(int argc, char** argv) { return gpuguard_fuzz::run("options_fuzz", argc, argv, check, next_input); }
