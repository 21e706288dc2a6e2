// Misuse reports and counts (src/ledger/misuse.hpp): each kind says what was wrong and what the
// free then did, names the sites it knows and says when a stack is missing; the counts add up.
#include "ledger/misuse.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace {

using gpuguard::misuse_kind;
using gpuguard::detail::misuse_report;

std::string report_text(const misuse_report& m) {
  std::FILE* out = std::tmpfile();
  if (out == nullptr) { return "(no temporary file)"; }
  gpuguard::detail::write_misuse_report(out, m, gpuguard::no_site);
  std::string text(static_cast<std::size_t>(std::ftell(out)), '\0');
  std::rewind(out);
  const std::size_t read = std::fread(text.data(), 1, text.size(), out);
  text.resize(read);
  std::fclose(out);
  return text;
}

misuse_report of(misuse_kind kind, bool interposed = false) {
  return {interposed, kind, reinterpret_cast<const void*>(0x1000), 64, 128, 1, 0, gpuguard::no_site, gpuguard::no_site};  // NOLINT(performance-no-int-to-ptr)
}

TEST(misuse_report, each_kind_says_what_was_wrong_and_what_was_done) {
  const std::string wrong_size = report_text(of(misuse_kind::wrong_size));
  EXPECT_NE(wrong_size.find("free with the wrong size"), std::string::npos) << wrong_size;
  EXPECT_NE(wrong_size.find("freed as 64 bytes but allocated as 128 on device 0; freed with 128"), std::string::npos) << wrong_size;
  const std::string wrong_device = report_text(of(misuse_kind::wrong_device));
  EXPECT_NE(wrong_device.find("allocated on device 0, freed while device 1 was current; freed on device 0"),
            std::string::npos) << wrong_device;
  const std::string twice = report_text(of(misuse_kind::double_free));
  EXPECT_NE(twice.find("was already freed; this free is ignored"), std::string::npos) << twice;
  EXPECT_NE(twice.find("first freed at: (no stack"), std::string::npos) << twice;
  const std::string twice_interposed = report_text(of(misuse_kind::double_free, true));
  EXPECT_NE(twice_interposed.find("passed on to CUDA as the program made it"), std::string::npos) << twice_interposed;
  const std::string unknown = report_text(of(misuse_kind::unknown_pointer));
  EXPECT_NE(unknown.find("was never allocated through gpuguard's tracking; not freed"), std::string::npos) << unknown;
  EXPECT_EQ(unknown.find("allocated at"), std::string::npos) << "an unknown pointer has no allocation site";
  for (const std::string& text : {wrong_size, wrong_device, twice, unknown}) {
    EXPECT_NE(text.find("this free at: (no stack: set GPUGUARD_OPTIONS=stacks=all)"), std::string::npos) << text;
  }
}

TEST(misuse_counters, count_read_and_clear) {
  gpuguard::detail::misuse_counters counts;
  counts.count(misuse_kind::double_free);
  counts.count(misuse_kind::double_free);
  counts.count(misuse_kind::wrong_device);
  counts.untracked_frees.fetch_add(3);
  const gpuguard::misuse_counts m = counts.read();
  EXPECT_EQ(m.double_free, 2U);
  EXPECT_EQ(m.wrong_device, 1U);
  EXPECT_EQ(m.unknown_pointer, 0U);
  EXPECT_EQ(m.total(), 3U) << "untracked frees are not misuse";
  counts.clear();
  EXPECT_EQ(counts.read().total(), 0U);
  EXPECT_EQ(counts.untracked_frees.load(), 0U);
}

TEST(misuse_kind, names) {
  EXPECT_STREQ(gpuguard::to_string(misuse_kind::unknown_pointer), "free of an unknown pointer");
  EXPECT_STREQ(gpuguard::to_string(misuse_kind::wrong_device), "free on a different device");
}

}  // namespace
