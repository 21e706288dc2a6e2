// GPUGUARD_OPTIONS parsing: every key, every kind of bad input, and the exact message for each.
#include <gpuguard/options.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

TEST(options, defaults) {
  const gpuguard::options o = gpuguard::parse_options("").values;
  EXPECT_EQ(o.stacks, gpuguard::stack_mode::off);
  EXPECT_EQ(o.stack_sample, 64U);
  EXPECT_EQ(o.stack_depth, 16U);
  EXPECT_FALSE(o.abort_on_error);
  EXPECT_TRUE(o.leak_report);
  EXPECT_EQ(o.leak_json, "");
  EXPECT_EQ(o.leak_exitcode, 0);
  EXPECT_EQ(o.device, gpuguard::device_mode::automatic);
  EXPECT_EQ(o.host_capacity, 0U);
  EXPECT_FALSE(o.strict);
}

TEST(options, every_key_with_a_good_value) {
  const gpuguard::parsed_options p = gpuguard::parse_options(
      "stacks=sampled:stack_sample=8:stack_depth=32:abort_on_error=1:leak_report=no:"
      "leak_json=/tmp/l.json:leak_exitcode=23:leak_sites=5:device=async:host_capacity=1KiB:strict=true");
  EXPECT_TRUE(p.errors.empty()) << p.errors.front();
  const gpuguard::options& o = p.values;
  EXPECT_EQ(o.stacks, gpuguard::stack_mode::sampled);
  EXPECT_EQ(o.stack_sample, 8U);
  EXPECT_EQ(o.stack_depth, 32U);
  EXPECT_TRUE(o.abort_on_error);
  EXPECT_FALSE(o.leak_report);
  EXPECT_EQ(o.leak_json, "/tmp/l.json");
  EXPECT_EQ(o.leak_exitcode, 23);
  EXPECT_EQ(o.leak_sites, 5U);
  EXPECT_EQ(o.device, gpuguard::device_mode::async);
  EXPECT_EQ(o.host_capacity, 1024U);
  EXPECT_TRUE(o.strict);
}

TEST(options, byte_suffixes) {
  EXPECT_EQ(gpuguard::parse_options("host_capacity=4G").values.host_capacity, std::size_t{4} << 30);
  EXPECT_EQ(gpuguard::parse_options("host_capacity=3MiB").values.host_capacity, std::size_t{3} << 20);
  EXPECT_EQ(gpuguard::parse_options("host_capacity=2T").values.host_capacity, std::size_t{2} << 40);
  EXPECT_EQ(gpuguard::parse_options("host_capacity=0").values.host_capacity, 0U);
}

TEST(options, empty_items_and_stray_separators_are_skipped) {
  const gpuguard::parsed_options p = gpuguard::parse_options("::stacks=all:::leak_exitcode=3:");
  EXPECT_TRUE(p.errors.empty());
  EXPECT_EQ(p.values.stacks, gpuguard::stack_mode::all);
  EXPECT_EQ(p.values.leak_exitcode, 3);
}

struct bad_case {
  const char* text;
  const char* message;
};

class bad_input : public testing::TestWithParam<bad_case> {};

TEST_P(bad_input, one_message_naming_key_and_value_and_the_rest_still_applies) {
  const std::string text = std::string(GetParam().text) + ":leak_exitcode=7";
  const gpuguard::parsed_options p = gpuguard::parse_options(text);
  ASSERT_EQ(p.errors.size(), 1U) << text;
  EXPECT_EQ(p.errors[0], GetParam().message);
  EXPECT_EQ(p.values.leak_exitcode, 7) << "the good item after the bad one still applies";
  const gpuguard::options defaults;
  EXPECT_EQ(p.values.stacks, defaults.stacks);
  EXPECT_EQ(p.values.stack_sample, defaults.stack_sample);
  EXPECT_EQ(p.values.host_capacity, defaults.host_capacity);
}

INSTANTIATE_TEST_SUITE_P(
    cases, bad_input,
    testing::Values(
        bad_case{"stackz=all", "unknown key 'stackz' (value 'all'); ignored"},
        bad_case{"verbose", "item 'verbose' has no '='; ignored"},
        bad_case{"=", "unknown key '' (value ''); ignored"},
        bad_case{"stacks=all=x", "bad value 'all=x' for key 'stacks': expected one of off, sampled, all; ignored"},
        bad_case{"stack_sample=many",
                 "bad value 'many' for key 'stack_sample': expected an integer in 1..1000000; ignored"},
        bad_case{"stack_sample=0",
                 "bad value '0' for key 'stack_sample': expected an integer in 1..1000000; ignored"},
        bad_case{"stack_sample=99999999999999999999",
                 "bad value '99999999999999999999' for key 'stack_sample': expected an integer in 1..1000000; ignored"},
        bad_case{"leak_exitcode=-1", "bad value '-1' for key 'leak_exitcode': expected an integer in 0..255; ignored"},
        bad_case{"leak_exitcode=256", "bad value '256' for key 'leak_exitcode': expected an integer in 0..255; ignored"},
        bad_case{"device=gpu", "bad value 'gpu' for key 'device': expected one of auto, cuda, async, host; ignored"},
        bad_case{"abort_on_error=maybe",
                 "bad value 'maybe' for key 'abort_on_error': expected one of 0, 1, true, false, yes, no; ignored"},
        bad_case{"host_capacity=17179869184G",
                 "bad value '17179869184G' for key 'host_capacity': expected a byte count (digits, then optionally "
                 "K, M, G, T, KiB, MiB, GiB or TiB) of at most 18446744073709551615; ignored"},
        bad_case{"st\xc3\xa4" "cks=all", "unknown key 'st\\xc3\\xa4cks' (value 'all'); ignored"},
        bad_case{"stacks=a\x01", "bad value 'a\\x01' for key 'stacks': expected one of off, sampled, all; ignored"}));

TEST(options, a_rejected_item_keeps_the_base_value) {
  gpuguard::options base;
  base.stack_sample = 9;
  const gpuguard::parsed_options p = gpuguard::parse_options("stack_sample=x", base);
  EXPECT_EQ(p.values.stack_sample, 9U);
}

TEST(options, last_valid_duplicate_wins) {
  EXPECT_EQ(gpuguard::parse_options("stacks=all:stacks=sampled").values.stacks, gpuguard::stack_mode::sampled);
  const gpuguard::parsed_options p = gpuguard::parse_options("stacks=all:stacks=bogus");
  EXPECT_EQ(p.values.stacks, gpuguard::stack_mode::all);
  EXPECT_EQ(p.errors.size(), 1U);
}

TEST(options, spellings) {
  EXPECT_STREQ(gpuguard::to_string(gpuguard::device_mode::automatic), "auto");
  EXPECT_STREQ(gpuguard::to_string(gpuguard::stack_mode::sampled), "sampled");
}

/// Runs process_options() in a child with GPUGUARD_OPTIONS=`value`: its stderr and exit status.
std::pair<std::string, int> child_process_options(const char* value) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    ::setenv("GPUGUARD_OPTIONS", value, 1);
    static_cast<void>(gpuguard::process_options());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string err;
  char buffer[256];
  ssize_t n = 0;
  while ((n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0) { err.append(buffer, static_cast<std::size_t>(n)); }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {err, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(process_options, bad_key_is_one_line_and_the_program_goes_on) {
  const auto [err, status] = child_process_options("stacks=all:nonsense=1");
  EXPECT_EQ(err, "gpuguard: GPUGUARD_OPTIONS: unknown key 'nonsense' (value '1'); ignored\n");
  EXPECT_EQ(status, 0);
}

TEST(process_options, strict_makes_a_bad_key_fatal_with_status_2) {
  const auto [err, status] = child_process_options("strict=1:nonsense=1");
  EXPECT_NE(err.find("unknown key 'nonsense'"), std::string::npos) << err;
  EXPECT_EQ(status, 2);
}

}  // namespace
