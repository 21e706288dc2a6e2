// GPUGUARD_OPTIONS parsing: every key, every kind of bad input and its exact message, and what
// process_options() does in a real process (child processes, so the parent's once-only state is
// never touched).
#include <algorithm>
#include <gpuguard/core/options.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace {

using gpuguard::device_mode;
using gpuguard::options;
using gpuguard::parse_options;
using gpuguard::python_frames_mode;
using gpuguard::stack_mode;

using errors = std::vector<std::string>;

// Parses text that must be entirely valid.
options parse_ok(std::string_view text, const options& base = {}) {
  const auto parsed = parse_options(text, base);
  EXPECT_EQ(parsed.errors, errors{}) << "text: " << text;
  return parsed.values;
}

// The one error of text, which must leave every option as in `base`.
std::string one_error(std::string_view text) {
  const auto parsed = parse_options(text);
  EXPECT_EQ(parsed.errors.size(), 1U) << "text: " << text;
  const options defaults;
  EXPECT_EQ(parsed.values.stacks, defaults.stacks);
  EXPECT_EQ(parsed.values.stack_sample, defaults.stack_sample);
  EXPECT_EQ(parsed.values.stack_depth, defaults.stack_depth);
  EXPECT_EQ(parsed.values.fast_unwind, defaults.fast_unwind);
  EXPECT_EQ(parsed.values.abort_on_error, defaults.abort_on_error);
  EXPECT_EQ(parsed.values.leak_report, defaults.leak_report);
  EXPECT_EQ(parsed.values.leak_json, defaults.leak_json);
  EXPECT_EQ(parsed.values.leak_exitcode, defaults.leak_exitcode);
  EXPECT_EQ(parsed.values.leak_sites, defaults.leak_sites);
  EXPECT_EQ(parsed.values.device, defaults.device);
  EXPECT_EQ(parsed.values.host_capacity, defaults.host_capacity);
  EXPECT_EQ(parsed.values.strict, defaults.strict);
  EXPECT_EQ(parsed.values.text_log, defaults.text_log);
  EXPECT_EQ(parsed.values.jsonl_log, defaults.jsonl_log);
  EXPECT_EQ(parsed.values.trace_file, defaults.trace_file);
  EXPECT_EQ(parsed.values.prometheus_file, defaults.prometheus_file);
  EXPECT_EQ(parsed.values.prometheus_interval_ms, defaults.prometheus_interval_ms);
  EXPECT_EQ(parsed.values.prometheus_job, defaults.prometheus_job);
  EXPECT_EQ(parsed.values.nvtx, defaults.nvtx);
  EXPECT_EQ(parsed.values.sample_ms, defaults.sample_ms);
  EXPECT_EQ(parsed.values.op_device_query, defaults.op_device_query);
  EXPECT_EQ(parsed.values.alert_fraction, defaults.alert_fraction);
  EXPECT_EQ(parsed.values.alert_hysteresis, defaults.alert_hysteresis);
  EXPECT_EQ(parsed.values.alert_op_growth, defaults.alert_op_growth);
  EXPECT_EQ(parsed.values.queue_capacity, defaults.queue_capacity);
  EXPECT_EQ(parsed.values.hooks, defaults.hooks);
  EXPECT_EQ(parsed.values.crash_file, defaults.crash_file);
  EXPECT_EQ(parsed.values.cleanup_timeout, defaults.cleanup_timeout);
  return parsed.errors.empty() ? std::string() : parsed.errors.front();
}

std::string bad_value(std::string_view value, std::string_view key, std::string_view expected) {
  return "bad value '" + std::string(value) + "' for key '" + std::string(key) + "': expected " +
         std::string(expected) + "; ignored";
}

constexpr const char* boolean_expected = "one of 0, 1, true, false, yes, no";
constexpr const char* bytes_expected =
    "a byte count (digits, then optionally K, M, G, T, KiB, MiB, GiB or TiB) of at most "
    "18446744073709551615";

TEST(options, defaults) {
  const options o;
  EXPECT_EQ(o.stacks, stack_mode::all);
  EXPECT_EQ(o.stack_sample, 64U);
  EXPECT_EQ(o.stack_depth, 16U);
  EXPECT_TRUE(o.fast_unwind);
  EXPECT_EQ(o.python_frames, python_frames_mode::user);
  EXPECT_FALSE(o.abort_on_error);
  EXPECT_TRUE(o.leak_report);
  EXPECT_EQ(o.leak_json, "");
  EXPECT_EQ(o.leak_exitcode, 0);
  EXPECT_EQ(o.leak_sites, 20U);
  EXPECT_EQ(o.device, device_mode::automatic);
  EXPECT_EQ(o.host_capacity, 0U);
  EXPECT_FALSE(o.strict);
  EXPECT_EQ(o.text_log, "stderr");
  EXPECT_EQ(o.jsonl_log, "");
  EXPECT_EQ(o.trace_file, "");
  EXPECT_EQ(o.prometheus_file, "");
  EXPECT_EQ(o.prometheus_interval_ms, 10000U);
  EXPECT_EQ(o.prometheus_job, "");
  EXPECT_TRUE(o.nvtx);
  EXPECT_EQ(o.sample_ms, 50U);
  EXPECT_FALSE(o.op_device_query);
  EXPECT_DOUBLE_EQ(o.alert_fraction, 0.8);
  EXPECT_DOUBLE_EQ(o.alert_hysteresis, 0.05);
  EXPECT_EQ(o.alert_op_growth, 0U);
  EXPECT_EQ(o.queue_capacity, 16384U);
  EXPECT_TRUE(o.hooks);
  EXPECT_EQ(o.crash_file, "");
  EXPECT_EQ(o.cleanup_timeout, 30U);
}

TEST(options, hooks_and_crash_file) {
  const options o = parse_ok("hooks=0:crash_file=/var/tmp/crash-%p.json");
  EXPECT_FALSE(o.hooks);
  EXPECT_EQ(o.crash_file, "/var/tmp/crash-%p.json");
  EXPECT_EQ(one_error("hooks=off"), bad_value("off", "hooks", boolean_expected));
}

TEST(options, cleanup_timeout) {
  EXPECT_EQ(parse_ok("cleanup_timeout=0").cleanup_timeout, 0U);
  EXPECT_EQ(parse_ok("cleanup_timeout=5").cleanup_timeout, 5U);
  EXPECT_EQ(parse_ok("cleanup_timeout=86400").cleanup_timeout, 86400U);
  for (const char* bad : {"", "-1", "86401", "1.5", "30s", "4294967296", "99999999999999999999"}) {
    EXPECT_EQ(one_error(std::string("cleanup_timeout=") + bad),
              bad_value(bad, "cleanup_timeout", "an integer in 0..86400")) << bad;
  }
}

TEST(options, output_paths) {
  const options o = parse_ok("text_log=/tmp/ops-%p.txt:jsonl_log=run.jsonl:trace_file=t.json:prometheus_file=/var/lib/node_exporter/gpuguard.prom");
  EXPECT_EQ(o.text_log, "/tmp/ops-%p.txt");
  EXPECT_EQ(o.jsonl_log, "run.jsonl");
  EXPECT_EQ(o.trace_file, "t.json");
  EXPECT_EQ(o.prometheus_file, "/var/lib/node_exporter/gpuguard.prom");
  EXPECT_EQ(parse_ok("text_log=off").text_log, "off");
  EXPECT_EQ(parse_ok("text_log=stdout").text_log, "stdout");
}

TEST(options, prometheus_job_is_any_text_escaped_only_when_written) {
  EXPECT_EQ(parse_ok("prometheus_job=llm-7b \"sweep\" #3").prometheus_job, "llm-7b \"sweep\" #3");
  EXPECT_EQ(parse_ok("prometheus_job=a=b").prometheus_job, "a=b");
  EXPECT_EQ(parse_ok("prometheus_job=x:prometheus_job=").prometheus_job, "") << "empty: back to $SLURM_JOB_ID";
}

TEST(options, output_integers_and_booleans) {
  const options o = parse_ok("prometheus_interval_ms=100:sample_ms=1:queue_capacity=64:nvtx=0:op_device_query=yes");
  EXPECT_EQ(o.prometheus_interval_ms, 100U);
  EXPECT_EQ(o.sample_ms, 1U);
  EXPECT_EQ(o.queue_capacity, 64U);
  EXPECT_FALSE(o.nvtx);
  EXPECT_TRUE(o.op_device_query);
  EXPECT_EQ(parse_ok("queue_capacity=1048576").queue_capacity, 1048576U);
  EXPECT_EQ(one_error("queue_capacity=63"), bad_value("63", "queue_capacity", "an integer in 64..1048576"));
  EXPECT_EQ(one_error("queue_capacity=1048577"), bad_value("1048577", "queue_capacity", "an integer in 64..1048576"));
  EXPECT_EQ(one_error("queue_capacity=16777216"), bad_value("16777216", "queue_capacity", "an integer in 64..1048576"));
  EXPECT_EQ(one_error("sample_ms=0"), bad_value("0", "sample_ms", "an integer in 1..60000"));
  EXPECT_EQ(one_error("prometheus_interval_ms=99"),
            bad_value("99", "prometheus_interval_ms", "an integer in 100..3600000"));
  EXPECT_EQ(one_error("nvtx=on"), bad_value("on", "nvtx", boolean_expected));
}

TEST(options, alert_fractions) {
  EXPECT_DOUBLE_EQ(parse_ok("alert_fraction=0.95").alert_fraction, 0.95);
  EXPECT_DOUBLE_EQ(parse_ok("alert_fraction=0").alert_fraction, 0.0);
  EXPECT_DOUBLE_EQ(parse_ok("alert_fraction=1").alert_fraction, 1.0);
  EXPECT_DOUBLE_EQ(parse_ok("alert_fraction=1.0").alert_fraction, 1.0);
  EXPECT_DOUBLE_EQ(parse_ok("alert_hysteresis=0.1").alert_hysteresis, 0.1);
  const std::string expected = "a decimal number in 0..1 (e.g. 0.8)";
  for (const char* bad : {"", ".5", "0.", "1.", "0.8.", "0..5", "1.01", "2", "-0.5", "+0.5", "0,8", "0.8 ", "80%",
                          "1e-1", "nan", "inf", "0x1"}) {
    EXPECT_EQ(one_error(std::string("alert_fraction=") + bad), bad_value(bad, "alert_fraction", expected)) << bad;
  }
  EXPECT_EQ(one_error("alert_hysteresis=big"), bad_value("big", "alert_hysteresis", expected));
}

TEST(options, alert_op_growth_is_a_byte_count) {
  EXPECT_EQ(parse_ok("alert_op_growth=512M").alert_op_growth, std::size_t{512} << 20);
  EXPECT_EQ(parse_ok("alert_op_growth=0").alert_op_growth, 0U);
  EXPECT_EQ(one_error("alert_op_growth=1.5G"), bad_value("1.5G", "alert_op_growth", bytes_expected));
}

TEST(options, empty_text_gives_base) {
  options base;
  base.stack_depth = 7;
  base.leak_json = "x.json";
  const options o = parse_ok("", base);
  EXPECT_EQ(o.stack_depth, 7U);
  EXPECT_EQ(o.leak_json, "x.json");
  EXPECT_EQ(o.stacks, stack_mode::all);
}

TEST(options, empty_items_are_skipped) {
  EXPECT_EQ(parse_ok(":").stacks, stack_mode::all);
  EXPECT_EQ(parse_ok(":::").stacks, stack_mode::all);
  const options o = parse_ok(":stacks=sampled::stack_depth=3:");
  EXPECT_EQ(o.stacks, stack_mode::sampled);
  EXPECT_EQ(o.stack_depth, 3U);
  EXPECT_EQ(parse_ok("::leak_sites=5::").leak_sites, 5U);
}

TEST(options, stacks) {
  EXPECT_EQ(parse_ok("stacks=off", [] { options b; b.stacks = stack_mode::all; return b; }()).stacks,
            stack_mode::off);
  EXPECT_EQ(parse_ok("stacks=sampled").stacks, stack_mode::sampled);
  EXPECT_EQ(parse_ok("stacks=all").stacks, stack_mode::all);
  const std::string expected = "one of off, sampled, all";
  EXPECT_EQ(one_error("stacks=ALL"), bad_value("ALL", "stacks", expected));
  EXPECT_EQ(one_error("stacks="), bad_value("", "stacks", expected));
  EXPECT_EQ(one_error("stacks=all "), bad_value("all ", "stacks", expected));
  EXPECT_EQ(one_error("stacks=1"), bad_value("1", "stacks", expected));
}

TEST(options, python_frames) {
  EXPECT_EQ(parse_ok("python_frames=off").python_frames, python_frames_mode::off);
  EXPECT_EQ(parse_ok("python_frames=all").python_frames, python_frames_mode::all);
  EXPECT_EQ(parse_ok("python_frames=user", [] { options b; b.python_frames = python_frames_mode::off; return b; }())
                .python_frames,
            python_frames_mode::user);
  const std::string expected = "one of user, all, off";
  EXPECT_EQ(one_error("python_frames=0"), bad_value("0", "python_frames", expected));
  EXPECT_EQ(one_error("python_frames=USER"), bad_value("USER", "python_frames", expected));
  EXPECT_STREQ(gpuguard::to_string(python_frames_mode::all), "all");
}

TEST(options, stack_sample) {
  EXPECT_EQ(parse_ok("stack_sample=1").stack_sample, 1U);
  EXPECT_EQ(parse_ok("stack_sample=1000").stack_sample, 1000U);
  EXPECT_EQ(parse_ok("stack_sample=1000000").stack_sample, 1000000U);
  EXPECT_EQ(parse_ok("stack_sample=007").stack_sample, 7U);
  const std::string expected = "an integer in 1..1000000";
  EXPECT_EQ(one_error("stack_sample=many"), bad_value("many", "stack_sample", expected));
  EXPECT_EQ(one_error("stack_sample=0"), bad_value("0", "stack_sample", expected));
  EXPECT_EQ(one_error("stack_sample=1000001"), bad_value("1000001", "stack_sample", expected));
  EXPECT_EQ(one_error("stack_sample=-5"), bad_value("-5", "stack_sample", expected));
  EXPECT_EQ(one_error("stack_sample=+5"), bad_value("+5", "stack_sample", expected));
  EXPECT_EQ(one_error("stack_sample= 5"), bad_value(" 5", "stack_sample", expected));
  EXPECT_EQ(one_error("stack_sample=5x"), bad_value("5x", "stack_sample", expected));
  EXPECT_EQ(one_error("stack_sample=0x10"), bad_value("0x10", "stack_sample", expected));
  EXPECT_EQ(one_error("stack_sample=1.5"), bad_value("1.5", "stack_sample", expected));
  EXPECT_EQ(one_error("stack_sample="), bad_value("", "stack_sample", expected));
}

TEST(options, stack_depth) {
  EXPECT_EQ(parse_ok("stack_depth=1").stack_depth, 1U);
  EXPECT_EQ(parse_ok("stack_depth=64").stack_depth, 64U);
  const std::string expected = "an integer in 1..64";
  EXPECT_EQ(one_error("stack_depth=0"), bad_value("0", "stack_depth", expected));
  EXPECT_EQ(one_error("stack_depth=65"), bad_value("65", "stack_depth", expected));
  EXPECT_EQ(one_error("stack_depth=deep"), bad_value("deep", "stack_depth", expected));
}

TEST(options, booleans) {
  const auto value_of = [](const std::string& k, const options& o) {
    return k == "abort_on_error" ? o.abort_on_error : k == "leak_report" ? o.leak_report
                                                    : k == "fast_unwind" ? o.fast_unwind : o.strict;
  };
  for (const char* key : {"abort_on_error", "leak_report", "strict", "fast_unwind"}) {
    const std::string k = key;
    options all_false;
    all_false.abort_on_error = all_false.leak_report = all_false.strict = all_false.fast_unwind = false;
    for (const char* yes : {"1", "true", "yes"}) {
      const options o = parse_ok(k + "=" + yes, all_false);
      const bool value = value_of(k, o);
      EXPECT_TRUE(value) << k << "=" << yes;
    }
    options all_true;
    all_true.abort_on_error = all_true.leak_report = all_true.strict = all_true.fast_unwind = true;
    for (const char* no : {"0", "false", "no"}) {
      const options o = parse_ok(k + "=" + no, all_true);
      const bool value = value_of(k, o);
      EXPECT_FALSE(value) << k << "=" << no;
    }
    for (const char* bad : {"", "2", "TRUE", "on", "off", "y", "01"}) {
      EXPECT_EQ(one_error(k + "=" + bad), bad_value(bad, k, boolean_expected)) << k << "=" << bad;
    }
  }
}

TEST(options, leak_json) {
  EXPECT_EQ(parse_ok("leak_json=/tmp/leaks.json").leak_json, "/tmp/leaks.json");
  EXPECT_EQ(parse_ok("leak_json=a b=c").leak_json, "a b=c");
  options base;
  base.leak_json = "old.json";
  EXPECT_EQ(parse_ok("leak_json=", base).leak_json, "");
}

TEST(options, leak_exitcode) {
  EXPECT_EQ(parse_ok("leak_exitcode=0", [] { options b; b.leak_exitcode = 9; return b; }()).leak_exitcode, 0);
  EXPECT_EQ(parse_ok("leak_exitcode=1").leak_exitcode, 1);
  EXPECT_EQ(parse_ok("leak_exitcode=255").leak_exitcode, 255);
  const std::string expected = "an integer in 0..255";
  EXPECT_EQ(one_error("leak_exitcode=256"), bad_value("256", "leak_exitcode", expected));
  EXPECT_EQ(one_error("leak_exitcode=-1"), bad_value("-1", "leak_exitcode", expected));
  EXPECT_EQ(one_error("leak_exitcode=one"), bad_value("one", "leak_exitcode", expected));
}

TEST(options, leak_sites) {
  EXPECT_EQ(parse_ok("leak_sites=1").leak_sites, 1U);
  EXPECT_EQ(parse_ok("leak_sites=100000").leak_sites, 100000U);
  const std::string expected = "an integer in 1..100000";
  EXPECT_EQ(one_error("leak_sites=0"), bad_value("0", "leak_sites", expected));
  EXPECT_EQ(one_error("leak_sites=100001"), bad_value("100001", "leak_sites", expected));
}

TEST(options, device) {
  EXPECT_EQ(parse_ok("device=auto", [] { options b; b.device = device_mode::host; return b; }()).device,
            device_mode::automatic);
  EXPECT_EQ(parse_ok("device=cuda").device, device_mode::cuda);
  EXPECT_EQ(parse_ok("device=async").device, device_mode::async);
  EXPECT_EQ(parse_ok("device=host").device, device_mode::host);
  const std::string expected = "one of auto, cuda, async, host";
  EXPECT_EQ(one_error("device=automatic"), bad_value("automatic", "device", expected));
  EXPECT_EQ(one_error("device=gpu"), bad_value("gpu", "device", expected));
  EXPECT_EQ(one_error("device="), bad_value("", "device", expected));
}

TEST(options, torch_upstream) {
  EXPECT_EQ(options{}.torch_upstream, gpuguard::torch_upstream_mode::pool) << "the caching pool by default";
  EXPECT_EQ(parse_ok("torch_upstream=async").torch_upstream, gpuguard::torch_upstream_mode::async);
  EXPECT_EQ(parse_ok("torch_upstream=pool", [] { options b; b.torch_upstream = gpuguard::torch_upstream_mode::async; return b; }())
                .torch_upstream,
            gpuguard::torch_upstream_mode::pool);
  EXPECT_EQ(one_error("torch_upstream=cuda"), bad_value("cuda", "torch_upstream", "one of pool, async"));
  EXPECT_STREQ(gpuguard::to_string(gpuguard::torch_upstream_mode::async), "async");
}

TEST(options, host_capacity) {
  constexpr std::size_t kib = 1024;
  EXPECT_EQ(parse_ok("host_capacity=0").host_capacity, 0U);
  EXPECT_EQ(parse_ok("host_capacity=0G").host_capacity, 0U);
  EXPECT_EQ(parse_ok("host_capacity=12345").host_capacity, 12345U);
  EXPECT_EQ(parse_ok("host_capacity=1K").host_capacity, kib);
  EXPECT_EQ(parse_ok("host_capacity=1KiB").host_capacity, kib);
  EXPECT_EQ(parse_ok("host_capacity=3M").host_capacity, 3 * kib * kib);
  EXPECT_EQ(parse_ok("host_capacity=3MiB").host_capacity, 3 * kib * kib);
  EXPECT_EQ(parse_ok("host_capacity=4G").host_capacity, std::size_t{4} << 30);
  EXPECT_EQ(parse_ok("host_capacity=4GiB").host_capacity, std::size_t{4} << 30);
  EXPECT_EQ(parse_ok("host_capacity=2T").host_capacity, std::size_t{2} << 40);
  EXPECT_EQ(parse_ok("host_capacity=2TiB").host_capacity, std::size_t{2} << 40);
  EXPECT_EQ(parse_ok("host_capacity=18446744073709551615").host_capacity, SIZE_MAX);
  EXPECT_EQ(parse_ok("host_capacity=17179869183G").host_capacity, std::size_t{17179869183} << 30);
  EXPECT_EQ(parse_ok("host_capacity=16777215T").host_capacity, std::size_t{16777215} << 40);

  for (const char* bad : {"", "G", "4g", "4 G", "4GB", "4Gi", "4B", "4KIB", "-1", "+1", "1.5G", "4G ", "0x10",
                          "17179869184G", "16777216T", "18446744073709551616", "99999999999999999999K"}) {
    EXPECT_EQ(one_error(std::string("host_capacity=") + bad), bad_value(bad, "host_capacity", bytes_expected))
        << bad;
  }
}

TEST(options, integer_overflow_for_every_integer_key) {
  const std::string huge = "99999999999999999999";
  EXPECT_EQ(one_error("stack_sample=" + huge), bad_value(huge, "stack_sample", "an integer in 1..1000000"));
  EXPECT_EQ(one_error("stack_depth=" + huge), bad_value(huge, "stack_depth", "an integer in 1..64"));
  EXPECT_EQ(one_error("leak_exitcode=" + huge), bad_value(huge, "leak_exitcode", "an integer in 0..255"));
  EXPECT_EQ(one_error("leak_sites=" + huge), bad_value(huge, "leak_sites", "an integer in 1..100000"));
  EXPECT_EQ(one_error("host_capacity=" + huge), bad_value(huge, "host_capacity", bytes_expected));
  // Values that fit in 32 or 64 bits but wrap when narrowed must not sneak through.
  EXPECT_EQ(one_error("stack_depth=4294967297"), bad_value("4294967297", "stack_depth", "an integer in 1..64"));
  EXPECT_EQ(one_error("leak_exitcode=4294967296"),
            bad_value("4294967296", "leak_exitcode", "an integer in 0..255"));
  EXPECT_EQ(one_error("leak_sites=18446744073709551617"),
            bad_value("18446744073709551617", "leak_sites", "an integer in 1..100000"));
}

TEST(options, exact_messages_from_the_brief) {
  EXPECT_EQ(one_error("stackz=all"), "unknown key 'stackz' (value 'all'); ignored");
  EXPECT_EQ(one_error("stack_sample=many"),
            "bad value 'many' for key 'stack_sample': expected an integer in 1..1000000; ignored");
  EXPECT_EQ(one_error("verbose"), "item 'verbose' has no '='; ignored");
  EXPECT_EQ(one_error("leak_exitcode=99999999999999999999"),
            "bad value '99999999999999999999' for key 'leak_exitcode': expected an integer in 0..255; ignored");
}

TEST(options, unknown_keys) {
  EXPECT_EQ(one_error("Stacks=all"), "unknown key 'Stacks' (value 'all'); ignored");
  EXPECT_EQ(one_error(" stacks=all"), "unknown key ' stacks' (value 'all'); ignored");
  EXPECT_EQ(one_error("stacks =all"), "unknown key 'stacks ' (value 'all'); ignored");
  EXPECT_EQ(one_error("=all"), "unknown key '' (value 'all'); ignored");
  EXPECT_EQ(one_error("nope="), "unknown key 'nope' (value ''); ignored");
}

TEST(options, missing_equals) {
  EXPECT_EQ(one_error("stacks"), "item 'stacks' has no '='; ignored");
  EXPECT_EQ(one_error(" "), "item ' ' has no '='; ignored");
  const auto parsed = parse_options("a:stacks=all:b");
  EXPECT_EQ(parsed.errors, (errors{"item 'a' has no '='; ignored", "item 'b' has no '='; ignored"}));
  EXPECT_EQ(parsed.values.stacks, stack_mode::all);
}

TEST(options, stray_separators) {
  EXPECT_EQ(one_error("=="), "unknown key '' (value '='); ignored");
  EXPECT_EQ(one_error("="), "unknown key '' (value ''); ignored");
  EXPECT_EQ(one_error("stacks=all=x"), bad_value("all=x", "stacks", "one of off, sampled, all"));
  EXPECT_EQ(one_error("stacks==all"), bad_value("=all", "stacks", "one of off, sampled, all"));
  EXPECT_EQ(parse_ok("leak_json==x=").leak_json, "=x=");
}

TEST(options, non_printable_bytes_are_escaped) {
  EXPECT_EQ(one_error("st\xc3\xa4" "cks=all"), "unknown key 'st\\xc3\\xa4cks' (value 'all'); ignored");
  EXPECT_EQ(one_error("stacks=a\x01l"), "bad value 'a\\x01l' for key 'stacks': expected one of off, sampled, all; ignored");
  EXPECT_EQ(one_error("x\x7f\x1f\xff"), "item 'x\\x7f\\x1f\\xff' has no '='; ignored");
  EXPECT_EQ(one_error("stack_depth=1\n"), bad_value("1\\x0a", "stack_depth", "an integer in 1..64"));
  EXPECT_EQ(one_error("k=\t"), "unknown key 'k' (value '\\x09'); ignored");
  // An embedded NUL is a byte like any other: shown, not a terminator.
  EXPECT_EQ(one_error(std::string_view("stacks=all\0x", 12)),
            bad_value("all\\x00x", "stacks", "one of off, sampled, all"));
  // A path is never rejected, whatever bytes it holds.
  EXPECT_EQ(parse_ok("leak_json=r\xc3\xa9sum\xc3\xa9.json").leak_json, "r\xc3\xa9sum\xc3\xa9.json");
}

TEST(options, duplicate_keys_last_valid_wins) {
  EXPECT_EQ(parse_ok("stacks=all:stacks=sampled").stacks, stack_mode::sampled);
  EXPECT_EQ(parse_ok("stack_depth=3:stack_depth=9:stack_depth=5").stack_depth, 5U);
  const auto parsed = parse_options("stack_depth=3:stack_depth=99");
  EXPECT_EQ(parsed.values.stack_depth, 3U);
  EXPECT_EQ(parsed.errors, errors{bad_value("99", "stack_depth", "an integer in 1..64")});
}

TEST(options, rejected_item_keeps_base_and_others_apply) {
  options base;
  base.stack_sample = 500;
  base.leak_exitcode = 7;
  base.device = device_mode::async;
  const auto parsed = parse_options(
      "stacks=sampled:stack_sample=0:nope=1:leak_sites=3:broken:leak_exitcode=300:device=cpu:"
      "host_capacity=1M:strict=1",
      base);
  EXPECT_EQ(parsed.values.stacks, stack_mode::sampled);
  EXPECT_EQ(parsed.values.stack_sample, 500U);
  EXPECT_EQ(parsed.values.leak_sites, 3U);
  EXPECT_EQ(parsed.values.leak_exitcode, 7);
  EXPECT_EQ(parsed.values.device, device_mode::async);
  EXPECT_EQ(parsed.values.host_capacity, std::size_t{1} << 20);
  EXPECT_TRUE(parsed.values.strict);  // strict changes nothing in parsing
  EXPECT_EQ(parsed.values.stack_depth, base.stack_depth);
  EXPECT_EQ(parsed.errors, (errors{
                               bad_value("0", "stack_sample", "an integer in 1..1000000"),
                               "unknown key 'nope' (value '1'); ignored",
                               "item 'broken' has no '='; ignored",
                               bad_value("300", "leak_exitcode", "an integer in 0..255"),
                               bad_value("cpu", "device", "one of auto, cuda, async, host"),
                           }));
}

TEST(options, every_key_at_once) {
  const options o = parse_ok(
      "stacks=sampled:stack_sample=10:stack_depth=32:abort_on_error=yes:leak_report=no:"
      "leak_json=out.json:leak_exitcode=23:leak_sites=50:device=host:host_capacity=2GiB:strict=true");
  EXPECT_EQ(o.stacks, stack_mode::sampled);
  EXPECT_EQ(o.stack_sample, 10U);
  EXPECT_EQ(o.stack_depth, 32U);
  EXPECT_TRUE(o.abort_on_error);
  EXPECT_FALSE(o.leak_report);
  EXPECT_EQ(o.leak_json, "out.json");
  EXPECT_EQ(o.leak_exitcode, 23);
  EXPECT_EQ(o.leak_sites, 50U);
  EXPECT_EQ(o.device, device_mode::host);
  EXPECT_EQ(o.host_capacity, std::size_t{2} << 30);
  EXPECT_TRUE(o.strict);
}

TEST(options, to_string_matches_the_spelling) {
  EXPECT_STREQ(gpuguard::to_string(stack_mode::off), "off");
  EXPECT_STREQ(gpuguard::to_string(stack_mode::sampled), "sampled");
  EXPECT_STREQ(gpuguard::to_string(stack_mode::all), "all");
  EXPECT_STREQ(gpuguard::to_string(device_mode::automatic), "auto");
  EXPECT_STREQ(gpuguard::to_string(device_mode::cuda), "cuda");
  EXPECT_STREQ(gpuguard::to_string(device_mode::async), "async");
  EXPECT_STREQ(gpuguard::to_string(device_mode::host), "host");
  for (const auto mode : {stack_mode::off, stack_mode::sampled, stack_mode::all}) {
    EXPECT_EQ(parse_ok(std::string("stacks=") + gpuguard::to_string(mode)).stacks, mode);
  }
  for (const auto mode : {device_mode::automatic, device_mode::cuda, device_mode::async, device_mode::host}) {
    EXPECT_EQ(parse_ok(std::string("device=") + gpuguard::to_string(mode)).device, mode);
  }
}

// process_options() in a fresh child: what it wrote on stderr and how it ended.
struct child_result {
  std::string stderr_text;
  int status = -1;  // raw waitpid status
  std::string stacks;
};

child_result run_process_options(const char* env_value) {
  int err_pipe[2];
  int out_pipe[2];
  if (pipe(err_pipe) != 0 || pipe(out_pipe) != 0) {
    ADD_FAILURE() << "pipe failed";
    return {};
  }
  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return {};
  }
  if (pid == 0) {
    dup2(err_pipe[1], STDERR_FILENO);
    close(err_pipe[0]);
    close(err_pipe[1]);
    close(out_pipe[0]);
    if (env_value == nullptr) {
      unsetenv("GPUGUARD_OPTIONS");
    } else {
      setenv("GPUGUARD_OPTIONS", env_value, 1);
    }
    const gpuguard::options& first = gpuguard::process_options();
    // Parsed once: a later change to the environment is not seen.
    setenv("GPUGUARD_OPTIONS", "stacks=sampled", 1);
    const gpuguard::options& second = gpuguard::process_options();
    const char* const report = &first == &second ? gpuguard::to_string(second.stacks) : "not-the-same-object";
    const ssize_t written = write(out_pipe[1], report, std::string_view(report).size());
    _exit(written < 0 ? 3 : 0);
  }
  close(err_pipe[1]);
  close(out_pipe[1]);
  const auto read_all = [](int fd) {
    std::string text;
    char buffer[512];
    ssize_t n = 0;
    while ((n = read(fd, buffer, sizeof buffer)) > 0) { text.append(buffer, static_cast<std::size_t>(n)); }
    close(fd);
    return text;
  };
  child_result result;
  result.stderr_text = read_all(err_pipe[0]);
  result.stacks = read_all(out_pipe[0]);
  waitpid(pid, &result.status, 0);
  return result;
}

TEST(process_options, unset_environment_gives_defaults) {
  const child_result r = run_process_options(nullptr);
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
  EXPECT_EQ(r.stderr_text, "");
  EXPECT_EQ(r.stacks, "all");
}

TEST(process_options, reads_the_environment_once) {
  const child_result r = run_process_options("stacks=off");  // not the default
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
  EXPECT_EQ(r.stderr_text, "");
  EXPECT_EQ(r.stacks, "off");
}

TEST(process_options, bad_key_prints_one_line_and_continues) {
  const child_result r = run_process_options("stackz=all:stacks=off");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
  EXPECT_EQ(r.stderr_text, "gpuguard: GPUGUARD_OPTIONS: unknown key 'stackz' (value 'all'); ignored\n");
  EXPECT_EQ(r.stacks, "off");
}

TEST(process_options, one_line_per_error) {
  const child_result r = run_process_options("a:stack_depth=0:st\xc3\xa4" "cks=\x01");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
  EXPECT_EQ(r.stderr_text,
            "gpuguard: GPUGUARD_OPTIONS: item 'a' has no '='; ignored\n"
            "gpuguard: GPUGUARD_OPTIONS: bad value '0' for key 'stack_depth': expected an integer in 1..64; ignored\n"
            "gpuguard: GPUGUARD_OPTIONS: unknown key 'st\\xc3\\xa4cks' (value '\\x01'); ignored\n");
}

TEST(process_options, errors_are_capped_in_count_and_length) {
  // 10,000 bad items: ten lines and a count. A 100 KB bad value: its first 80 bytes and its length.
  std::string many;
  for (int i = 0; i < 10000; ++i) { many += "junk" + std::to_string(i) + ":"; }
  many += "stacks=all";
  const child_result r = run_process_options(many.c_str());
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 11) << r.stderr_text.substr(0, 2000);
  EXPECT_NE(r.stderr_text.find("GPUGUARD_OPTIONS: 9990 more bad items, not shown (each was ignored)\n"), std::string::npos);
  EXPECT_EQ(r.stacks, "all");

  const std::string huge = "stacks=" + std::string(100000, 'x');
  const child_result big = run_process_options(huge.c_str());
  EXPECT_EQ(big.stderr_text, "gpuguard: GPUGUARD_OPTIONS: bad value '" + std::string(80, 'x') +
                                 "'... (100000 bytes) for key 'stacks': expected one of off, sampled, all; ignored\n");
}

TEST(process_options, strict_with_an_error_exits_with_status_2) {
  const child_result r = run_process_options("strict=1:stackz=all:stacks=all");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(r.stderr_text,
            "gpuguard: GPUGUARD_OPTIONS: unknown key 'stackz' (value 'all'); ignored\n"
            "gpuguard: GPUGUARD_OPTIONS: strict=1, stopping\n");
  EXPECT_EQ(r.stacks, "");  // process_options() never returned
}

TEST(process_options, strict_set_after_the_error_is_still_fatal) {
  const child_result r = run_process_options("stackz=all:strict=yes");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
}

TEST(process_options, strict_without_errors_is_harmless) {
  const child_result r = run_process_options("strict=1:stacks=sampled");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
  EXPECT_EQ(r.stderr_text, "");
  EXPECT_EQ(r.stacks, "sampled");
}

TEST(process_options, bad_strict_value_is_just_an_error) {
  const child_result r = run_process_options("strict=maybe:stackz=all");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
  EXPECT_EQ(r.stderr_text,
            "gpuguard: GPUGUARD_OPTIONS: bad value 'maybe' for key 'strict': expected one of 0, 1, true, false, yes, "
            "no; ignored\n"
            "gpuguard: GPUGUARD_OPTIONS: unknown key 'stackz' (value 'all'); ignored\n");
}

}  // namespace
