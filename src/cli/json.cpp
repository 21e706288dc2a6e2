#include "json.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace gpuguard::cli {

const json_value* json_value::find(std::string_view name) const noexcept {
  const auto* members = std::get_if<json_object>(&value_);
  if (members == nullptr) { return nullptr; }
  for (const auto& member : *members) {
    if (member.first == name) { return &member.second; }
  }
  return nullptr;
}

const char* kind_name(json_value::kind k) noexcept {
  switch (k) {
    case json_value::kind::null: return "null";
    case json_value::kind::boolean: return "boolean";
    case json_value::kind::integer: return "integer";
    case json_value::kind::number: return "number";
    case json_value::kind::string: return "string";
    case json_value::kind::array: return "array";
    case json_value::kind::object: return "object";
  }
  return "?";
}

namespace {

// The parser proper: recursive descent over the text, with the depth checked before every descent
// so that the C++ stack stays bounded whatever the input.
class parser {
 public:
  parser(std::string_view text, std::size_t max_depth) : text_(text), max_depth_(max_depth) {}

  std::optional<json_value> parse_document() {
    skip_whitespace();
    std::optional<json_value> value = parse_value(0);
    if (!value) { return std::nullopt; }
    skip_whitespace();
    if (pos_ != text_.size()) { return fail("unexpected " + describe_here() + " after the value"); }
    return value;
  }

  json_error& error() { return error_; }

 private:
  std::optional<json_value> parse_value(std::size_t depth) {
    if (pos_ >= text_.size()) { return fail("unexpected end of input, expected a value"); }
    switch (text_[pos_]) {
      case '{': return parse_object(depth);
      case '[': return parse_array(depth);
      case '"': {
        std::string s;
        if (!parse_string(s)) { return std::nullopt; }
        return json_value(std::move(s));
      }
      case 't': return parse_literal("true", json_value(true));
      case 'f': return parse_literal("false", json_value(false));
      case 'n': return parse_literal("null", json_value());
      default: break;
    }
    const char c = text_[pos_];
    if (c == '-' || (c >= '0' && c <= '9')) { return parse_number(); }
    return fail("unexpected " + describe_here() + ", expected a value");
  }

  std::optional<json_value> parse_literal(std::string_view word, json_value value) {
    if (text_.substr(pos_, word.size()) != word) {
      return fail("invalid literal, expected '" + std::string(word) + "'");
    }
    pos_ += word.size();
    return value;
  }

  std::optional<json_value> parse_object(std::size_t depth) {
    if (depth + 1 > max_depth_) {
      return fail("nesting deeper than " + std::to_string(max_depth_) + " levels");
    }
    ++pos_;  // '{'
    json_object members;
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return json_value(std::move(members));
    }
    for (;;) {
      skip_whitespace();
      if (peek() != '"') {
        return fail(pos_ >= text_.size() ? "unexpected end of input in an object"
                                         : "expected a member name (a string), got " + describe_here());
      }
      std::string name;
      if (!parse_string(name)) { return std::nullopt; }
      skip_whitespace();
      if (peek() != ':') {
        return fail(pos_ >= text_.size() ? "unexpected end of input in an object"
                                         : "expected ':' after a member name, got " + describe_here());
      }
      ++pos_;
      skip_whitespace();
      std::optional<json_value> value = parse_value(depth + 1);
      if (!value) { return std::nullopt; }
      members.emplace_back(std::move(name), std::move(*value));
      skip_whitespace();
      const char c = peek();
      if (c == ',') {
        ++pos_;
        continue;
      }
      if (c == '}') {
        ++pos_;
        return json_value(std::move(members));
      }
      return fail(pos_ >= text_.size() ? "unexpected end of input in an object"
                                       : "expected ',' or '}' in an object, got " + describe_here());
    }
  }

  std::optional<json_value> parse_array(std::size_t depth) {
    if (depth + 1 > max_depth_) {
      return fail("nesting deeper than " + std::to_string(max_depth_) + " levels");
    }
    ++pos_;  // '['
    json_array items;
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return json_value(std::move(items));
    }
    for (;;) {
      skip_whitespace();
      std::optional<json_value> value = parse_value(depth + 1);
      if (!value) { return std::nullopt; }
      items.push_back(std::move(*value));
      skip_whitespace();
      const char c = peek();
      if (c == ',') {
        ++pos_;
        continue;
      }
      if (c == ']') {
        ++pos_;
        return json_value(std::move(items));
      }
      return fail(pos_ >= text_.size() ? "unexpected end of input in an array"
                                       : "expected ',' or ']' in an array, got " + describe_here());
    }
  }

  // number = [ minus ] int [ frac ] [ exp ]; int = zero / ( digit1-9 *DIGIT )
  std::optional<json_value> parse_number() {
    const std::size_t begin = pos_;
    bool integral = true;
    if (peek() == '-') { ++pos_; }
    if (peek() == '0') {
      ++pos_;
      if (is_digit(peek())) { return fail("leading zero in a number"); }
    } else if (is_digit(peek())) {
      while (is_digit(peek())) { ++pos_; }
    } else {
      return fail("expected a digit in a number");
    }
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!is_digit(peek())) { return fail("expected a digit after the decimal point"); }
      while (is_digit(peek())) { ++pos_; }
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') { ++pos_; }
      if (!is_digit(peek())) { return fail("expected a digit in the exponent"); }
      while (is_digit(peek())) { ++pos_; }
    }
    // strtoll/strtod need a terminated string; numbers are short, so copy.
    const std::string token(text_.substr(begin, pos_ - begin));
    if (integral) {
      errno = 0;
      char* end = nullptr;
      const long long value = std::strtoll(token.c_str(), &end, 10);
      if (errno == 0 && end == token.c_str() + token.size()) {
        return json_value(static_cast<std::int64_t>(value));
      }
      // Out of int64 range: fall through to a double, as other JSON readers do.
    }
    errno = 0;
    char* end = nullptr;
    const double value = std::strtod(token.c_str(), &end);
    if (end != token.c_str() + token.size()) {
      pos_ = begin;
      return fail("invalid number");
    }
    if (errno == ERANGE && (value > 1.0 || value < -1.0)) {
      pos_ = begin;
      return fail("number out of range");
    }
    return json_value(value);
  }

  // Appends the string at pos_ (which is '"') to `out`, decoded; leaves pos_ after the closing '"'.
  bool parse_string(std::string& out) {
    ++pos_;  // '"'
    for (;;) {
      if (pos_ >= text_.size()) {
        fail("unexpected end of input in a string");
        return false;
      }
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c == '\\') {
        if (!parse_escape(out)) { return false; }
        continue;
      }
      if (c < 0x20) {
        fail("unescaped control character in a string");
        return false;
      }
      if (c < 0x80) {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      const std::size_t n = utf8_length();
      if (n == 0) {
        fail("invalid UTF-8 in a string");
        return false;
      }
      out.append(text_.substr(pos_, n));
      pos_ += n;
    }
  }

  bool parse_escape(std::string& out) {
    ++pos_;  // '\\'
    if (pos_ >= text_.size()) {
      fail("unexpected end of input in a string escape");
      return false;
    }
    const char c = text_[pos_];
    switch (c) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': return parse_unicode_escape(out);
      default:
        --pos_;
        fail("invalid escape '\\" + printable(c) + "' in a string");
        return false;
    }
    ++pos_;
    return true;
  }

  // pos_ is at the 'u' of "\uXXXX"; a high surrogate must be followed by "\uDC00".."\uDFFF".
  bool parse_unicode_escape(std::string& out) {
    const std::size_t escape_begin = pos_ - 1;
    std::uint32_t code = 0;
    if (!read_hex4(code)) { return false; }
    if (code >= 0xDC00 && code <= 0xDFFF) {
      pos_ = escape_begin;
      fail("lone low surrogate in a \\u escape");
      return false;
    }
    if (code >= 0xD800 && code <= 0xDBFF) {
      if (text_.substr(pos_, 2) != "\\u") {
        pos_ = escape_begin;
        fail("high surrogate not followed by a low surrogate in a \\u escape");
        return false;
      }
      ++pos_;  // at the second 'u'
      std::uint32_t low = 0;
      if (!read_hex4(low)) { return false; }
      if (low < 0xDC00 || low > 0xDFFF) {
        pos_ = escape_begin;
        fail("high surrogate not followed by a low surrogate in a \\u escape");
        return false;
      }
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, code);
    return true;
  }

  // pos_ is at a 'u'; reads the four hex digits after it and leaves pos_ after them.
  bool read_hex4(std::uint32_t& code) {
    ++pos_;
    code = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      if (pos_ >= text_.size()) {
        fail("unexpected end of input in a \\u escape");
        return false;
      }
      const char c = text_[pos_];
      std::uint32_t digit = 0;
      if (c >= '0' && c <= '9') { digit = static_cast<std::uint32_t>(c - '0'); }
      else if (c >= 'a' && c <= 'f') { digit = static_cast<std::uint32_t>(c - 'a' + 10); }
      else if (c >= 'A' && c <= 'F') { digit = static_cast<std::uint32_t>(c - 'A' + 10); }
      else {
        fail("invalid hex digit '" + printable(c) + "' in a \\u escape");
        return false;
      }
      code = code * 16 + digit;
    }
    return true;
  }

  static void append_utf8(std::string& out, std::uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  // Length of the valid UTF-8 sequence at pos_ (whose first byte is >= 0x80), or 0 if invalid:
  // no overlong forms, no surrogates, nothing above U+10FFFF.
  std::size_t utf8_length() const {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text_[pos_ + k]); };
    const unsigned char c = byte(0);
    std::size_t n = 0;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; }
    else { return 0; }
    if (pos_ + n > text_.size()) { return 0; }
    for (std::size_t k = 1; k < n; ++k) {
      if ((byte(k) & 0xC0) != 0x80) { return 0; }
    }
    if (n == 3 && ((c == 0xE0 && byte(1) < 0xA0) || (c == 0xED && byte(1) >= 0xA0))) { return 0; }
    if (n == 4 && ((c == 0xF0 && byte(1) < 0x90) || (c == 0xF4 && byte(1) >= 0x90))) { return 0; }
    return n;
  }

  void skip_whitespace() noexcept {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') { return; }
      ++pos_;
    }
  }

  [[nodiscard]] char peek() const noexcept { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  static bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

  static std::string printable(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) { return std::string(1, c); }
    char text[8];
    std::snprintf(text, sizeof text, "\\x%02x", u);
    return text;
  }

  std::string describe_here() const {
    if (pos_ >= text_.size()) { return "end of input"; }
    return "character '" + printable(text_[pos_]) + "'";
  }

  std::nullopt_t fail(std::string message) {
    error_.offset = pos_;
    error_.message = std::move(message);
    return std::nullopt;
  }

  std::string_view text_;
  std::size_t max_depth_;
  std::size_t pos_ = 0;
  json_error error_;
};

}  // namespace

std::optional<json_value> parse_json(std::string_view text, json_error* error, std::size_t max_depth) {
  parser p(text, max_depth);
  std::optional<json_value> value = p.parse_document();
  if (!value && error != nullptr) { *error = std::move(p.error()); }
  return value;
}

}  // namespace gpuguard::cli
