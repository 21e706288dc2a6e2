// What the seeded mutation fuzzers (tests/fuzz/*_fuzz.cpp) share: the command line
// (CORPUS_DIR [--seed N] [--iterations N] [--seconds S]), the corpus, a seeded random source with
// the usual byte-level mutations, and the loop that stops at the first broken promise and prints
// the input that broke it, escaped, so that it can be added to the corpus.
//
// A fuzzer supplies check(input) -> "" when every promise held, else what broke, and a mutate
// step. Runs replay exactly from the seed: the corpus is read in sorted order.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace gpuguard_fuzz {

/// The input with every byte outside printable ASCII (and the backslash) as \xNN.
inline std::string escaped(std::string_view text, std::size_t max_bytes = 4000) {
  std::string out;
  for (const char c : text.substr(0, std::min(text.size(), max_bytes))) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f || c == '\\') {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    } else {
      out += c;
    }
  }
  if (text.size() > max_bytes) { out += "...(" + std::to_string(text.size()) + " bytes)"; }
  return out;
}

/// A seeded random source and the byte-level mutations every fuzzer uses.
class random_source {
 public:
  explicit random_source(std::uint64_t seed) : engine_(seed) {}

  /// 0 .. n-1 (0 when n <= 1).
  std::size_t below(std::size_t n) { return n <= 1 ? 0 : static_cast<std::size_t>(engine_() % n); }
  bool one_in(std::size_t n) { return below(n) == 0; }
  template <class T>
  const T& pick(const std::vector<T>& items) { return items[below(items.size())]; }

  /// One byte-level change: a flipped bit, a random byte, a deleted run, a repeated piece, a
  /// word from `dictionary`, or a run of digits (numbers at every width and past every limit).
  void mutate_bytes(std::string& text, const std::vector<std::string>& dictionary) {
    switch (below(6)) {
      case 0:
        if (!text.empty()) {
          const std::size_t at = below(text.size());
          text[at] = static_cast<char>(text[at] ^ (1 << below(8)));
        }
        break;
      case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(below(text.size() + 1)), static_cast<char>(below(256))); break;
      case 2:
        if (!text.empty()) {
          const std::size_t from = below(text.size());
          text.erase(from, 1 + below(std::min<std::size_t>(text.size() - from, 16)));
        }
        break;
      case 3:
        if (!text.empty()) {
          const std::size_t from = below(text.size());
          const std::string piece = text.substr(from, 1 + below(32));
          const std::size_t at = below(text.size() + 1);
          for (std::size_t n = below(8); n-- > 0;) { text.insert(at, piece); }
        }
        break;
      case 4:
        if (!dictionary.empty()) { text.insert(below(text.size() + 1), pick(dictionary)); }
        break;
      default:
        text.insert(below(text.size() + 1), std::string(1 + below(25), static_cast<char>('0' + below(10))));
        break;
    }
  }

 private:
  std::mt19937_64 engine_;
};

/// The files of a directory, sorted by name (readdir's order is not stable: a seed must replay).
inline std::vector<std::string> read_corpus(const std::string& dir) {
  std::vector<std::string> names;
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) { return {}; }
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") { names.push_back(name); }
  }
  ::closedir(listing);
  std::sort(names.begin(), names.end());
  std::vector<std::string> corpus;
  for (const std::string& name : names) {
    std::ifstream in(dir + "/" + name, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return corpus;
}

struct settings {
  std::string corpus_dir;
  unsigned long long seed = 1;
  unsigned long long iterations = 20000;
  unsigned long long seconds = 60;
};

/// Reads CORPUS_DIR [--seed N] [--iterations N] [--seconds S]; false (with a message) on a bad one.
inline bool parse_settings(const char* name, int argc, char** argv, settings& out) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [--seed N] [--iterations N] [--seconds S]\n", name);
    return false;
  }
  out.corpus_dir = argv[1];
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    char* end = nullptr;
    const unsigned long long value = i + 1 < argc ? std::strtoull(argv[i + 1], &end, 10) : 0;
    const bool number = i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9' && end != nullptr && *end == '\0';
    if (!number || (flag != "--seed" && flag != "--iterations" && flag != "--seconds")) {
      std::fprintf(stderr, "%s: bad argument '%s'\n", name, argv[i]);
      return false;
    }
    (flag == "--seed" ? out.seed : flag == "--iterations" ? out.iterations : out.seconds) = value;
  }
  return true;
}

/// The whole run: every corpus entry as it is, then mutated inputs until `iterations` or
/// `seconds` runs out. Returns the process's exit status: 0 every promise held, 1 one broke
/// (the input is printed), 2 a usage error or an empty corpus.
inline int run(const char* name, int argc, char** argv, const std::function<std::string(const std::string&)>& check,
               const std::function<std::string(random_source&, const std::vector<std::string>&)>& next_input) {
  settings s;
  if (!parse_settings(name, argc, argv, s)) { return 2; }
  const std::vector<std::string> corpus = read_corpus(s.corpus_dir);
  if (corpus.empty()) {
    std::fprintf(stderr, "%s: no corpus in '%s'\n", name, s.corpus_dir.c_str());
    return 2;
  }
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const std::string broken = check(corpus[i]);
    if (!broken.empty()) {
      std::fprintf(stderr, "%s: corpus entry %zu '%s': %s\n", name, i, escaped(corpus[i]).c_str(), broken.c_str());
      return 1;
    }
  }
  random_source random(s.seed);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(s.seconds);
  unsigned long long done = 0;
  for (; done < s.iterations && std::chrono::steady_clock::now() < deadline; ++done) {
    const std::string input = next_input(random, corpus);
    const std::string broken = check(input);
    if (!broken.empty()) {
      std::fprintf(stderr, "%s: seed %llu, input %llu '%s': %s\n", name, s.seed, done, escaped(input).c_str(),
                   broken.c_str());
      return 1;
    }
  }
  std::printf("%s: %llu mutated inputs from %zu corpus entries (seed %llu): every promise held\n", name, done,
              corpus.size(), s.seed);
  return 0;
}

}  // namespace gpuguard_fuzz
