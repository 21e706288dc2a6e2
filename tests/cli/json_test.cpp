// The command-line tool's JSON parser (src/cli/json.hpp): every kind of value, every escape, and
// every kind of malformed input with the position it is reported at; nesting is bounded so that
// hostile input cannot overflow the stack.
#include "json.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace gpuguard::cli {
namespace {

json_value parse_ok(const std::string& text) {
  json_error error;
  std::optional<json_value> value = parse_json(text, &error);
  EXPECT_TRUE(value.has_value()) << "'" << text << "': " << error.message << " at " << error.offset;
  return value.value_or(json_value());
}

TEST(json, scalars) {
  EXPECT_TRUE(parse_ok("null").is_null());
  EXPECT_TRUE(parse_ok("true").as_bool());
  EXPECT_FALSE(parse_ok("false").as_bool());
  EXPECT_EQ(parse_ok("0").as_integer(), 0);
  EXPECT_EQ(parse_ok("-0").as_integer(), 0);
  EXPECT_EQ(parse_ok("123").as_integer(), 123);
  EXPECT_EQ(parse_ok("-45").as_integer(), -45);
  EXPECT_EQ(parse_ok("\"text\"").as_string(), "text");
  EXPECT_EQ(parse_ok("\"\"").as_string(), "");
}

TEST(json, integers_are_exact_int64_and_others_are_doubles) {
  EXPECT_EQ(parse_ok("9223372036854775807").as_integer(), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(parse_ok("-9223372036854775808").as_integer(), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(parse_ok("1795000000000000123").as_integer(), 1795000000000000123);  // beyond 2^53
  const json_value big = parse_ok("9223372036854775808");
  EXPECT_EQ(big.type(), json_value::kind::number);
  EXPECT_DOUBLE_EQ(big.as_double(), 9223372036854775808.0);
  EXPECT_EQ(parse_ok("1.0").type(), json_value::kind::number);
  EXPECT_DOUBLE_EQ(parse_ok("1.5").as_double(), 1.5);
  EXPECT_DOUBLE_EQ(parse_ok("-0.25").as_double(), -0.25);
  EXPECT_DOUBLE_EQ(parse_ok("1e3").as_double(), 1000.0);
  EXPECT_DOUBLE_EQ(parse_ok("1E+3").as_double(), 1000.0);
  EXPECT_DOUBLE_EQ(parse_ok("-1.25e-2").as_double(), -0.0125);
  EXPECT_TRUE(parse_ok("7").is_number());
  EXPECT_DOUBLE_EQ(parse_ok("7").as_double(), 7.0);
}

TEST(json, arrays_and_objects_nest) {
  const json_value v = parse_ok(R"({"a": [1, 2.5, "x", null, true, {"b": []}], "c": {}, "d": {"e": {"f": -1}}})");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.as_object().size(), 3u);
  const json_value* a = v.find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->is_array());
  ASSERT_EQ(a->as_array().size(), 6u);
  EXPECT_EQ(a->as_array()[0].as_integer(), 1);
  EXPECT_DOUBLE_EQ(a->as_array()[1].as_double(), 2.5);
  EXPECT_EQ(a->as_array()[2].as_string(), "x");
  EXPECT_TRUE(a->as_array()[3].is_null());
  EXPECT_TRUE(a->as_array()[4].as_bool());
  EXPECT_TRUE(a->as_array()[5].find("b")->as_array().empty());
  EXPECT_TRUE(v.find("c")->as_object().empty());
  EXPECT_EQ(v.find("d")->find("e")->find("f")->as_integer(), -1);
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(a->find("a"), nullptr);  // not an object
  EXPECT_TRUE(parse_ok("[]").as_array().empty());
  EXPECT_TRUE(parse_ok("[[[]]]").as_array()[0].as_array()[0].as_array().empty());
}

TEST(json, members_keep_document_order_and_find_returns_the_first_duplicate) {
  const json_value v = parse_ok(R"({"z":1,"a":2,"z":3})");
  ASSERT_EQ(v.as_object().size(), 3u);
  EXPECT_EQ(v.as_object()[0].first, "z");
  EXPECT_EQ(v.as_object()[1].first, "a");
  EXPECT_EQ(v.find("z")->as_integer(), 1);
}

TEST(json, whitespace_around_and_between_tokens) {
  const json_value v = parse_ok(" \t\r\n{ \"a\" :\n[ 1 ,\t2 ] } \n");
  EXPECT_EQ(v.find("a")->as_array().size(), 2u);
}

TEST(json, string_escapes) {
  EXPECT_EQ(parse_ok(R"("\" \\ \/ \b \f \n \r \t")").as_string(), "\" \\ / \b \f \n \r \t");
  EXPECT_EQ(parse_ok(R"("\u0041\u00e9\u20AC")").as_string(), "A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(parse_ok(R"("\u0000")").as_string(), std::string(1, '\0'));
  EXPECT_EQ(parse_ok(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");  // a surrogate pair
  EXPECT_EQ(parse_ok(R"("\uDBFF\uDFFF")").as_string(), "\xF4\x8F\xBF\xBF");  // U+10FFFF
  EXPECT_EQ(parse_ok("\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"").as_string(), "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(parse_ok(R"("</script>")").as_string(), "</script>");
  EXPECT_EQ(parse_ok(R"({"\u006bey":1})").find("key")->as_integer(), 1);
}

struct malformed_case {
  const char* name;
  std::string text;
  std::size_t offset;
  const char* message;  // a part of the message
};

class json_malformed : public ::testing::TestWithParam<malformed_case> {};

TEST_P(json_malformed, is_rejected_with_its_position) {
  const malformed_case& c = GetParam();
  json_error error;
  EXPECT_FALSE(parse_json(c.text, &error).has_value()) << c.text;
  EXPECT_EQ(error.offset, c.offset) << c.text << ": " << error.message;
  EXPECT_NE(error.message.find(c.message), std::string::npos) << c.text << ": " << error.message;
  EXPECT_FALSE(parse_json(c.text).has_value());  // without an error out-parameter as well
}

INSTANTIATE_TEST_SUITE_P(
    json, json_malformed,
    ::testing::Values(
        malformed_case{"empty", "", 0, "unexpected end of input"},
        malformed_case{"only_whitespace", "  \n", 3, "unexpected end of input"},
        malformed_case{"open_object", "{", 1, "end of input in an object"},
        malformed_case{"open_array", "[", 1, "unexpected end of input"},
        malformed_case{"array_after_comma", "[1,", 3, "unexpected end of input"},
        malformed_case{"trailing_comma_array", "[1,]", 3, "expected a value"},
        malformed_case{"trailing_comma_object", R"({"a":1,})", 7, "expected a member name"},
        malformed_case{"missing_colon", R"({"a" 1})", 5, "expected ':'"},
        malformed_case{"unquoted_name", "{a:1}", 1, "expected a member name"},
        malformed_case{"missing_value", R"({"a":})", 5, "expected a value"},
        malformed_case{"missing_comma", "[1 2]", 3, "expected ',' or ']'"},
        malformed_case{"object_missing_comma", R"({"a":1 "b":2})", 7, "expected ',' or '}'"},
        malformed_case{"unclosed_object", R"({"a":1)", 6, "end of input in an object"},
        malformed_case{"unclosed_array", "[1", 2, "end of input in an array"},
        malformed_case{"bad_true", "tru", 0, "expected 'true'"},
        malformed_case{"bad_null", "nul", 0, "expected 'null'"},
        malformed_case{"capital_true", "True", 0, "expected a value"},
        malformed_case{"leading_zero", "01", 1, "leading zero"},
        malformed_case{"lone_minus", "-", 1, "expected a digit"},
        malformed_case{"minus_letter", "-a", 1, "expected a digit"},
        malformed_case{"no_fraction_digits", "1.", 2, "after the decimal point"},
        malformed_case{"leading_dot", ".5", 0, "expected a value"},
        malformed_case{"no_exponent_digits", "1e", 2, "exponent"},
        malformed_case{"exponent_sign_only", "1e+", 3, "exponent"},
        malformed_case{"plus_sign", "+1", 0, "expected a value"},
        malformed_case{"nan", "NaN", 0, "expected a value"},
        malformed_case{"infinity", "-Infinity", 1, "expected a digit"},
        malformed_case{"huge_exponent", "1e400", 0, "out of range"},
        malformed_case{"hex_number", "0x10", 1, "after the value"},
        malformed_case{"unterminated_string", "\"abc", 4, "end of input in a string"},
        malformed_case{"control_character", "\"a\x01z\"", 2, "control character"},
        malformed_case{"raw_newline_in_string", "\"a\nb\"", 2, "control character"},
        malformed_case{"bad_escape", R"("a\x")", 2, "invalid escape '\\x'"},
        malformed_case{"escape_at_end", "\"\\", 2, "end of input in a string escape"},
        malformed_case{"short_unicode_escape", R"("\u12")", 5, "invalid hex digit"},
        malformed_case{"bad_hex_digit", R"("\u12G4")", 5, "invalid hex digit 'G'"},
        malformed_case{"unicode_escape_at_end", "\"\\u00", 5, "end of input in a \\u escape"},
        malformed_case{"lone_high_surrogate", R"("\ud800")", 1, "high surrogate"},
        malformed_case{"high_then_letter", R"("\ud800\u0041")", 1, "high surrogate"},
        malformed_case{"lone_low_surrogate", R"("\udc00")", 1, "lone low surrogate"},
        malformed_case{"invalid_utf8_byte", "\"\xFF\"", 1, "invalid UTF-8"},
        malformed_case{"overlong_utf8", "\"\xC0\xAF\"", 1, "invalid UTF-8"},
        malformed_case{"utf8_surrogate", "\"\xED\xA0\x80\"", 1, "invalid UTF-8"},
        malformed_case{"truncated_utf8", "\"\xE2\x82\"", 1, "invalid UTF-8"},
        malformed_case{"above_u10ffff", "\"\xF4\x90\x80\x80\"", 1, "invalid UTF-8"},
        malformed_case{"two_values", "1 2", 2, "after the value"},
        malformed_case{"garbage_after_object", "{} x", 3, "after the value"},
        malformed_case{"two_strings", R"("a""b")", 3, "after the value"},
        malformed_case{"comment", "// c", 0, "expected a value"},
        malformed_case{"trailing_comment", "[1]/* c */", 3, "after the value"},
        malformed_case{"single_quotes", "'a'", 0, "expected a value"},
        malformed_case{"nul_byte_after_value", std::string("1\0", 2), 1, "after the value"},
        malformed_case{"truncated_jsonl_line", R"({"v":1,"type":"mem","t":9000000,"device":0,"live_by)", 51,
                       "end of input in a string"}),
    [](const ::testing::TestParamInfo<malformed_case>& case_info) { return std::string(case_info.param.name); });

std::string nested(std::size_t depth, char open, char close, const std::string& inner) {
  std::string text;
  for (std::size_t i = 0; i < depth; ++i) { text += open == '{' ? "{\"k\":" : std::string(1, open); }
  text += inner;
  text.append(depth, close);
  return text;
}

TEST(json, nesting_up_to_the_limit_parses) {
  json_error error;
  EXPECT_TRUE(parse_json(nested(json_default_max_depth, '[', ']', "1"), &error).has_value()) << error.message;
  EXPECT_TRUE(parse_json(nested(json_default_max_depth, '{', '}', "1"), &error).has_value()) << error.message;
  EXPECT_TRUE(parse_json("[[1]]", &error, 2).has_value());
}

TEST(json, nesting_beyond_the_limit_is_an_error) {
  json_error error;
  EXPECT_FALSE(parse_json(nested(json_default_max_depth + 1, '[', ']', "1"), &error).has_value());
  EXPECT_EQ(error.offset, json_default_max_depth);
  EXPECT_NE(error.message.find("nesting deeper than 128 levels"), std::string::npos) << error.message;
  EXPECT_FALSE(parse_json("[[[1]]]", &error, 2).has_value());
  EXPECT_EQ(error.offset, 2u);
  EXPECT_FALSE(parse_json(R"({"a":{"b":{}}})", &error, 2).has_value());
  EXPECT_EQ(error.offset, 10u);
}

TEST(json, hostile_nesting_cannot_overflow_the_stack) {
  // A million openers: far deeper than any stack would survive if the parser recursed freely.
  const std::string arrays(1000000, '[');
  json_error error;
  EXPECT_FALSE(parse_json(arrays, &error).has_value());
  EXPECT_NE(error.message.find("nesting"), std::string::npos);
  std::string objects;
  for (int i = 0; i < 200000; ++i) { objects += "{\"a\":"; }
  EXPECT_FALSE(parse_json(objects, &error).has_value());
  EXPECT_NE(error.message.find("nesting"), std::string::npos);
}

TEST(json, kind_names) {
  EXPECT_STREQ(kind_name(json_value::kind::null), "null");
  EXPECT_STREQ(kind_name(json_value::kind::boolean), "boolean");
  EXPECT_STREQ(kind_name(json_value::kind::integer), "integer");
  EXPECT_STREQ(kind_name(json_value::kind::number), "number");
  EXPECT_STREQ(kind_name(json_value::kind::string), "string");
  EXPECT_STREQ(kind_name(json_value::kind::array), "array");
  EXPECT_STREQ(kind_name(json_value::kind::object), "object");
  EXPECT_EQ(parse_ok("{}").type(), json_value::kind::object);
  EXPECT_EQ(parse_ok("[]").type(), json_value::kind::array);
}

}  // namespace
}  // namespace gpuguard::cli
