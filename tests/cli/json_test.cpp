// The command-line tool's JSON reader (src/cli/json.hpp, nlohmann::ordered_json underneath): every
// kind of value, every escape, and every kind of malformed input with the position it is reported
// at; nesting and an object's members are bounded so that hostile input can neither overflow the
// stack nor take quadratic time.
#include "json.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <limits>
#include <string>

namespace gpuguard::cli {
namespace {

json parse_ok(const std::string& text) {
  json_error error;
  std::optional<json> value = parse_json(text, &error);
  EXPECT_TRUE(value.has_value()) << "'" << text << "': " << error.message << " at " << error.offset;
  return value.value_or(json());
}

TEST(json, scalars) {
  EXPECT_TRUE(parse_ok("null").is_null());
  EXPECT_TRUE(parse_ok("true").get<bool>());
  EXPECT_FALSE(parse_ok("false").get<bool>());
  EXPECT_EQ(parse_ok("0").get<std::int64_t>(), 0);
  EXPECT_EQ(parse_ok("-0").get<std::int64_t>(), 0);
  EXPECT_EQ(parse_ok("123").get<std::int64_t>(), 123);
  EXPECT_EQ(parse_ok("-45").get<std::int64_t>(), -45);
  EXPECT_EQ(parse_ok("\"text\"").get<std::string>(), "text");
  EXPECT_EQ(parse_ok("\"\"").get<std::string>(), "");
}

TEST(json, integers_are_exact_int64_and_others_are_doubles) {
  // Exact int64 whatever its sign: is_number_integer() and a signed value, never nlohmann's unsigned.
  for (const char* text : {"0", "123", "9223372036854775807", "-9223372036854775808"}) {
    EXPECT_EQ(parse_ok(text).type(), json::value_t::number_integer) << text;
    EXPECT_STREQ(kind_name(parse_ok(text)), "integer") << text;
  }
  EXPECT_EQ(parse_ok("9223372036854775807").get<std::int64_t>(), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(parse_ok("-9223372036854775808").get<std::int64_t>(), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(parse_ok("1795000000000000123").get<std::int64_t>(), 1795000000000000123);  // beyond 2^53
  const json big = parse_ok("9223372036854775808");
  EXPECT_EQ(big.type(), json::value_t::number_float);
  EXPECT_FALSE(big.is_number_integer());
  EXPECT_DOUBLE_EQ(big.get<double>(), 9223372036854775808.0);
  EXPECT_EQ(parse_ok("18446744073709551616").type(), json::value_t::number_float);
  EXPECT_EQ(parse_ok("-9223372036854775809").type(), json::value_t::number_float);
  EXPECT_EQ(parse_ok("1.0").type(), json::value_t::number_float);
  EXPECT_STREQ(kind_name(parse_ok("1.0")), "number");
  EXPECT_DOUBLE_EQ(parse_ok("1.5").get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(parse_ok("-0.25").get<double>(), -0.25);
  EXPECT_DOUBLE_EQ(parse_ok("1e3").get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(parse_ok("1E+3").get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(parse_ok("-1.25e-2").get<double>(), -0.0125);
  EXPECT_TRUE(parse_ok("7").is_number());
  EXPECT_DOUBLE_EQ(parse_ok("7").get<double>(), 7.0);
}

TEST(json, arrays_and_objects_nest) {
  const json v = parse_ok(R"({"a": [1, 2.5, "x", null, true, {"b": []}], "c": {}, "d": {"e": {"f": -1}}})");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.size(), 3u);
  const json* a = member(v, "a");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->is_array());
  ASSERT_EQ(a->size(), 6u);
  EXPECT_EQ((*a)[0].get<std::int64_t>(), 1);
  EXPECT_DOUBLE_EQ((*a)[1].get<double>(), 2.5);
  EXPECT_EQ((*a)[2], "x");
  EXPECT_TRUE((*a)[3].is_null());
  EXPECT_TRUE((*a)[4].get<bool>());
  EXPECT_TRUE(member((*a)[5], "b")->empty());
  EXPECT_TRUE(member(v, "c")->is_object());
  EXPECT_TRUE(member(v, "c")->empty());
  EXPECT_EQ(member(*member(*member(v, "d"), "e"), "f")->get<std::int64_t>(), -1);
  EXPECT_EQ(member(v, "missing"), nullptr);
  EXPECT_EQ(member(*a, "a"), nullptr);  // not an object
  EXPECT_TRUE(parse_ok("[]").empty());
  EXPECT_TRUE(parse_ok("[[[]]]")[0][0].empty());
}

TEST(json, members_keep_document_order_and_a_duplicate_keeps_its_first_place_and_last_value) {
  const json v = parse_ok(R"({"z":1,"a":2,"z":3})");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v.begin().key(), "z");
  EXPECT_EQ(std::next(v.begin()).key(), "a");
  EXPECT_EQ(member(v, "z")->get<std::int64_t>(), 3);
  EXPECT_EQ(v.dump(), R"({"z":3,"a":2})");
}

TEST(json, whitespace_around_and_between_tokens) {
  const json v = parse_ok(" \t\r\n{ \"a\" :\n[ 1 ,\t2 ] } \n");
  EXPECT_EQ(member(v, "a")->size(), 2u);
}

TEST(json, string_escapes) {
  EXPECT_EQ(parse_ok(R"("\" \\ \/ \b \f \n \r \t")"), "\" \\ / \b \f \n \r \t");
  EXPECT_EQ(parse_ok(R"("\u0041\u00e9\u20AC")"), "A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(parse_ok(R"("\u0000")"), std::string(1, '\0'));
  EXPECT_EQ(parse_ok(R"("\ud83d\ude00")"), "\xF0\x9F\x98\x80");  // a surrogate pair
  EXPECT_EQ(parse_ok(R"("\uDBFF\uDFFF")"), "\xF4\x8F\xBF\xBF");  // U+10FFFF
  EXPECT_EQ(parse_ok("\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\""), "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(parse_ok(R"("</script>")"), "</script>");
  EXPECT_EQ(member(parse_ok(R"({"\u006bey":1})"), "key")->get<std::int64_t>(), 1);
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
        malformed_case{"empty", "", 0, "value - unexpected end of input; expected '[', '{', or a literal"},
        malformed_case{"only_whitespace", "  \n", 3, "value - unexpected end of input; expected '[', '{', or a literal"},
        malformed_case{"open_object", "{", 1, "object key - unexpected end of input; expected string literal"},
        malformed_case{"open_array", "[", 1, "value - unexpected end of input; expected '[', '{', or a literal"},
        malformed_case{"array_after_comma", "[1,", 3, "value - unexpected end of input; expected '[', '{', or a literal"},
        malformed_case{"trailing_comma_array", "[1,]", 3, "value - unexpected ']'; expected '[', '{', or a literal"},
        malformed_case{"trailing_comma_object", R"({"a":1,})", 7, "object key - unexpected '}'; expected string literal"},
        malformed_case{"missing_colon", R"({"a" 1})", 5, "object separator - unexpected number literal; expected ':'"},
        malformed_case{"unquoted_name", "{a:1}", 1, "object key - invalid literal"},
        malformed_case{"missing_value", R"({"a":})", 5, "value - unexpected '}'; expected '[', '{', or a literal"},
        malformed_case{"missing_comma", "[1 2]", 3, "array - unexpected number literal; expected ']'"},
        malformed_case{"object_missing_comma", R"({"a":1 "b":2})", 9, "object - unexpected string literal; expected '}'"},
        malformed_case{"unclosed_object", R"({"a":1)", 6, "object - unexpected end of input; expected '}'"},
        malformed_case{"unclosed_array", "[1", 2, "array - unexpected end of input; expected ']'"},
        malformed_case{"bad_true", "tru", 3, "value - invalid literal"},
        malformed_case{"bad_null", "nul", 3, "value - invalid literal"},
        malformed_case{"capital_true", "True", 0, "value - invalid literal"},
        malformed_case{"leading_zero", "01", 1, "value - unexpected number literal; expected end of input"},
        malformed_case{"lone_minus", "-", 1, "value - invalid number; expected digit after '-'"},
        malformed_case{"minus_letter", "-a", 1, "value - invalid number; expected digit after '-'"},
        malformed_case{"no_fraction_digits", "1.", 2, "value - invalid number; expected digit after '.'"},
        malformed_case{"leading_dot", ".5", 0, "value - invalid literal"},
        malformed_case{"no_exponent_digits", "1e", 2, "value - invalid number; expected '+', '-', or digit after exponent"},
        malformed_case{"exponent_sign_only", "1e+", 3, "value - invalid number; expected digit after exponent sign"},
        malformed_case{"plus_sign", "+1", 0, "value - invalid literal"},
        malformed_case{"nan", "NaN", 0, "value - invalid literal"},
        malformed_case{"infinity", "-Infinity", 1, "value - invalid number; expected digit after '-'"},
        malformed_case{"huge_exponent", "1e400", 4, "number overflow parsing '1e400'"},
        malformed_case{"hex_number", "0x10", 1, "value - invalid literal"},
        malformed_case{"unterminated_string", "\"abc", 4, "value - invalid string: missing closing quote"},
        malformed_case{"control_character", "\"a\x01z\"", 2, "value - invalid string: control character U+0001 (SOH) must be escaped to \\u0001"},
        malformed_case{"raw_newline_in_string", "\"a\nb\"", 2, "value - invalid string: control character U+000A (LF) must be escaped to \\u000A or \\n"},
        malformed_case{"bad_escape", R"("a\x")", 3, "value - invalid string: forbidden character after backslash"},
        malformed_case{"escape_at_end", "\"\\", 2, "value - invalid string: forbidden character after backslash"},
        malformed_case{"short_unicode_escape", R"("\u12")", 5, "value - invalid string: '\\u' must be followed by 4 hex digits"},
        malformed_case{"bad_hex_digit", R"("\u12G4")", 5, "value - invalid string: '\\u' must be followed by 4 hex digits"},
        malformed_case{"unicode_escape_at_end", "\"\\u00", 5, "value - invalid string: '\\u' must be followed by 4 hex digits"},
        malformed_case{"lone_high_surrogate", R"("\ud800")", 7, "value - invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"},
        malformed_case{"high_then_letter", R"("\ud800\u0041")", 12, "value - invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"},
        malformed_case{"lone_low_surrogate", R"("\udc00")", 6, "value - invalid string: surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF"},
        malformed_case{"invalid_utf8_byte", "\"\xFF\"", 1, "value - invalid string: ill-formed UTF-8 byte"},
        malformed_case{"overlong_utf8", "\"\xC0\xAF\"", 1, "value - invalid string: ill-formed UTF-8 byte"},
        malformed_case{"utf8_surrogate", "\"\xED\xA0\x80\"", 2, "value - invalid string: ill-formed UTF-8 byte"},
        malformed_case{"truncated_utf8", "\"\xE2\x82\"", 3, "value - invalid string: ill-formed UTF-8 byte"},
        malformed_case{"above_u10ffff", "\"\xF4\x90\x80\x80\"", 2, "value - invalid string: ill-formed UTF-8 byte"},
        malformed_case{"two_values", "1 2", 2, "value - unexpected number literal; expected end of input"},
        malformed_case{"garbage_after_object", "{} x", 3, "value - invalid literal"},
        malformed_case{"two_strings", R"("a""b")", 5, "value - unexpected string literal; expected end of input"},
        malformed_case{"comment", "// c", 0, "value - invalid literal"},
        malformed_case{"trailing_comment", "[1]/* c */", 3, "value - invalid literal"},
        malformed_case{"single_quotes", "'a'", 0, "value - invalid literal"},
        malformed_case{"nul_byte_after_value", std::string("1\0", 2), 1, "a NUL byte, which JSON text cannot hold"},
        malformed_case{"truncated_jsonl_line", R"({"v":1,"type":"mem","t":9000000,"device":0,"live_by)", 51,
                       "object key - invalid string: missing closing quote"},
        malformed_case{"long_token_is_shortened", "\"" + std::string(5000, 'a') + "\x01\"", 5001,
                       "invalid string: control character U+0001 (SOH) must be escaped to \\u0001; last read: '...aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa<U+0001>'"}),
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
  EXPECT_STREQ(kind_name(parse_ok("null")), "null");
  EXPECT_STREQ(kind_name(parse_ok("true")), "boolean");
  EXPECT_STREQ(kind_name(parse_ok("-1")), "integer");
  EXPECT_STREQ(kind_name(parse_ok("0.5")), "number");
  EXPECT_STREQ(kind_name(parse_ok("\"s\"")), "string");
  EXPECT_STREQ(kind_name(parse_ok("[]")), "array");
  EXPECT_STREQ(kind_name(parse_ok("{}")), "object");
  EXPECT_EQ(parse_ok("{}").type(), json::value_t::object);
  EXPECT_EQ(parse_ok("[]").type(), json::value_t::array);
}

std::string object_of(std::size_t members) {
  std::string text = "{";
  for (std::size_t i = 0; i < members; ++i) { text += (i == 0 ? "\"k" : ",\"k") + std::to_string(i) + "\":[1,{}]"; }
  return text + "}";
}

TEST(json, members_up_to_the_limit_parse) {
  json_error error;
  const std::optional<json> v = parse_json(object_of(json_max_members), &error);
  ASSERT_TRUE(v.has_value()) << error.message;
  EXPECT_EQ(v->size(), json_max_members);
  // The limit is per object: many objects of that size in one document are fine.
  EXPECT_TRUE(parse_json("[" + object_of(json_max_members) + "," + object_of(json_max_members) + "]", &error).has_value())
      << error.message;
}

TEST(json, members_beyond_the_limit_are_an_error_at_the_first_one_too_many) {
  const std::string text = object_of(json_max_members + 1);
  json_error error;
  EXPECT_FALSE(parse_json(text, &error).has_value());
  const std::string name = "\"k" + std::to_string(json_max_members) + "\"";
  EXPECT_EQ(error.offset, text.find(name));
  EXPECT_EQ(error.message, "an object with more than " + std::to_string(json_max_members) + " members");
  // Nested one level down, and with strings holding braces and commas the count must not see.
  const std::string nested = R"({"a":"{,\",","b":)" + text + "}";
  EXPECT_FALSE(parse_json(nested, &error).has_value());
  EXPECT_EQ(error.offset, nested.find(name));
}

}  // namespace
}  // namespace gpuguard::cli
