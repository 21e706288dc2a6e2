// A seeded mutation fuzzer for the GPUGUARD_OPTIONS parser (src/options.cpp), for ctest: it starts
// from the corpus (tests/fuzz/options_corpus), mutates bytes, items, keys and values, and checks on
// every input what docs/options.md promises: no exception but std::bad_alloc, each message one
// printable line naming the key or item, at most one message per item, the same result twice, every
// accepted value inside its documented range, and a text of valid items alone giving no message.
// Built with the parser's source under AddressSanitizer and UndefinedBehaviorSanitizer.
//
// usage: options_fuzz CORPUS_DIR [--seed N] [--iterations N] [--seconds S]
// The run ends at whichever limit comes first; a failure prints the input (escaped) and exits 1.
#include <gpuguard/options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <new>
#include <random>
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

std::string escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f || c == '\\') {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

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

class mutator {
 public:
  explicit mutator(std::uint64_t seed) : random_(seed) {}

  std::string mutate(std::string text, const std::vector<std::string>& corpus) {
    const int steps = 1 + pick(4);
    for (int i = 0; i < steps; ++i) {
      switch (pick(8)) {
        case 0:  // flip a bit
          if (!text.empty()) { text[at(text)] = static_cast<char>(text[at(text)] ^ (1 << pick(8))); }
          break;
        case 1:  // a random byte
          text.insert(text.begin() + static_cast<std::ptrdiff_t>(at_or_end(text)), static_cast<char>(pick(256)));
          break;
        case 2:  // delete a run
          if (!text.empty()) {
            const std::size_t from = at(text);
            text.erase(from, 1 + pick(static_cast<int>(std::min<std::size_t>(text.size() - from, 16))));
          }
          break;
        case 3:  // a dictionary word
          text.insert(at_or_end(text), dictionary[static_cast<std::size_t>(pick(static_cast<int>(dictionary.size())))]);
          break;
        case 4: {  // a whole item key=value
          const auto& key = dictionary[static_cast<std::size_t>(pick(27))];
          const auto& value = dictionary[static_cast<std::size_t>(pick(static_cast<int>(dictionary.size())))];
          text.append(":").append(key).append("=").append(value);
          break;
        }
        case 5: {  // splice another corpus entry
          const std::string& other = corpus[static_cast<std::size_t>(pick(static_cast<int>(corpus.size())))];
          text = text.substr(0, at_or_end(text)) + other.substr(std::min(other.size(), at_or_end(other)));
          break;
        }
        case 6:  // repeat a piece (long inputs, duplicate keys)
          if (!text.empty()) {
            const std::size_t from = at(text);
            const std::string piece = text.substr(from, 1 + static_cast<std::size_t>(pick(32)));
            for (int n = pick(8); n >= 0; --n) { text += piece; }
          }
          break;
        default:  // digits: long numbers, overflow at every width
          text.insert(at_or_end(text), std::string(static_cast<std::size_t>(1 + pick(25)), static_cast<char>('0' + pick(10))));
          break;
      }
    }
    if (text.size() > 4096) { text.resize(4096); }
    return text;
  }

 private:
  int pick(int n) { return n <= 1 ? 0 : static_cast<int>(random_() % static_cast<std::uint64_t>(n)); }
  std::size_t at(const std::string& s) { return static_cast<std::size_t>(pick(static_cast<int>(s.size()))); }
  std::size_t at_or_end(const std::string& s) { return static_cast<std::size_t>(pick(static_cast<int>(s.size()) + 1)); }

  std::mt19937_64 random_;
};

std::vector<std::string> read_corpus(const std::string& dir) {
  std::vector<std::string> corpus;
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) { return corpus; }
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") { continue; }
    std::string path = dir;
    path.append("/").append(name);
    std::ifstream in(path, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ::closedir(listing);
  std::sort(corpus.begin(), corpus.end());  // readdir's order is not stable: the seed must replay
  return corpus;
}

bool number_arg(const char* text, unsigned long long& out) {
  char* end = nullptr;
  out = std::strtoull(text, &end, 10);
  return text[0] >= '0' && text[0] <= '9' && end != nullptr && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: options_fuzz CORPUS_DIR [--seed N] [--iterations N] [--seconds S]\n");
    return 2;
  }
  unsigned long long seed = 1;
  unsigned long long iterations = 20000;
  unsigned long long seconds = 60;
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    unsigned long long value = 0;
    if (i + 1 >= argc || !number_arg(argv[i + 1], value) ||
        (flag != "--seed" && flag != "--iterations" && flag != "--seconds")) {
      std::fprintf(stderr, "options_fuzz: bad argument '%s'\n", argv[i]);
      return 2;
    }
    (flag == "--seed" ? seed : flag == "--iterations" ? iterations : seconds) = value;
  }
  const std::vector<std::string> corpus = read_corpus(argv[1]);
  if (corpus.empty()) {
    std::fprintf(stderr, "options_fuzz: no corpus in '%s'\n", argv[1]);
    return 2;
  }
  for (const std::string& text : corpus) {
    const std::string broken = check(text);
    if (!broken.empty()) {
      std::fprintf(stderr, "options_fuzz: corpus entry '%s': %s\n", escaped(text).c_str(), broken.c_str());
      return 1;
    }
  }
  mutator mutate(seed);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  unsigned long long done = 0;
  for (; done < iterations && std::chrono::steady_clock::now() < deadline; ++done) {
    const std::string text = mutate.mutate(corpus[done % corpus.size()], corpus);
    const std::string broken = check(text);
    if (!broken.empty()) {
      std::fprintf(stderr, "options_fuzz: seed %llu, input %llu '%s': %s\n", seed, done, escaped(text).c_str(),
                   broken.c_str());
      return 1;
    }
  }
  std::printf("options_fuzz: %llu mutated inputs from %zu corpus entries (seed %llu): every promise held\n", done,
              corpus.size(), seed);
  return 0;
}
