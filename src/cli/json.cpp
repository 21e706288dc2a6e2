#include "json.hpp"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

namespace gpuguard::cli {

namespace {

// nlohmann's message quotes the token it was reading ("last read: '...'"), which can be a whole
// string of the input: keep its last bytes, where the problem is, so that a message stays one short
// line.
std::string shortened(std::string_view message) {
  constexpr std::string_view marker = "last read: '";
  constexpr std::size_t kept = 40;
  const std::size_t open = message.find(marker);
  std::string text(message);
  if (open != std::string_view::npos) {
    const std::size_t start = open + marker.size();
    std::size_t close = message.find("'; expected", start);
    if (close == std::string_view::npos) { close = message.size() - (message.back() == '\'' ? 1 : 0); }
    if (close >= start && close - start > kept) {
      text = std::string(message.substr(0, start)) + "..." + std::string(message.substr(close - kept));
    }
  }
  // The token is the input's bytes: those outside printable ASCII are shown as <0xNN> (nlohmann
  // already shows control characters as <U+NNNN>), so that the message is one printable line and
  // valid UTF-8 wherever it is written.
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      char escape[8];
      std::snprintf(escape, sizeof escape, "<0x%02X>", byte);
      out += escape;
    }
  }
  return out;
}

// Builds the document from nlohmann's SAX events, as its own DOM parser does, but stops at the
// depth and member limits (a SAX handler that returns false ends the parse at once) and keeps
// integers that fit as int64, so that is_number_integer() means "exact int64".
class bounded_builder {
 public:
  enum class stop { none, depth, members, syntax };

  bounded_builder(std::size_t max_depth, json_error* error) : max_depth_(max_depth), error_(error) {}

  bool null() { return add(json(nullptr)); }
  bool boolean(bool b) { return add(json(b)); }
  bool number_integer(std::int64_t v) { return add(json(v)); }
  bool number_unsigned(std::uint64_t v) {
    constexpr auto int64_max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    return add(v <= int64_max ? json(static_cast<std::int64_t>(v)) : json(static_cast<double>(v)));
  }
  bool number_float(double v, const std::string& /*text*/) { return add(json(v)); }
  bool string(std::string& s) { return add(json(std::move(s))); }
  bool binary(json::binary_t& /*b*/) { return false; }  // JSON text has no binary values
  bool start_object(std::size_t /*size*/) { return open(json::value_t::object); }
  bool start_array(std::size_t /*size*/) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& name) {
    if (++members_.back() > json_max_members) {
      stopped_ = stop::members;
      return false;
    }
    pending_ = &(*open_.back())[name];
    return true;
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/, const nlohmann::json::exception& e) {
    stopped_ = stop::syntax;
    if (error_ != nullptr) {
      // "[json.exception.parse_error.101] parse error at line 1, column 4: syntax error ..." ->
      // "syntax error ...": the caller says where, as a byte offset.
      std::string_view text = e.what();
      if (const std::size_t id_end = text.find("] "); id_end != std::string_view::npos) { text.remove_prefix(id_end + 2); }
      if (text.rfind("parse error", 0) == 0) {
        if (const std::size_t colon = text.find(": "); colon != std::string_view::npos) { text.remove_prefix(colon + 2); }
      }
      error_->message = shortened(text);
      error_->offset = position > 0 ? position - 1 : 0;  // nlohmann counts the bytes read
    }
    return false;
  }

  [[nodiscard]] stop stopped() const noexcept { return stopped_; }
  [[nodiscard]] json take() { return std::move(root_); }

 private:
  bool add(json value) {
    put(std::move(value));
    return true;
  }
  // Places a value where the document is at, and returns where it went.
  json* put(json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    if (open_.back()->is_array()) {
      open_.back()->push_back(std::move(value));
      return &open_.back()->back();
    }
    *pending_ = std::move(value);
    return pending_;
  }
  bool open(json::value_t type) {
    if (open_.size() >= max_depth_) {
      stopped_ = stop::depth;
      return false;
    }
    // The pointers stay valid: only the innermost open value grows while it is open.
    open_.push_back(put(json(type)));
    members_.push_back(0);
    return true;
  }
  bool close() {
    open_.pop_back();
    members_.pop_back();
    return true;
  }

  std::size_t max_depth_;
  json_error* error_;
  json root_;
  std::vector<json*> open_;
  std::vector<std::size_t> members_;
  json* pending_ = nullptr;
  stop stopped_ = stop::none;
};

// Where a limit was crossed, in text that is valid JSON up to that point (the parser got there):
// the opening bracket one level too deep, or the name of the member one too many.
std::size_t limit_offset(std::string_view text, std::size_t max_depth) {
  constexpr std::size_t in_array = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> members;  // per open level: the members seen, or in_array
  bool in_string = false;
  bool escaped = false;
  bool expect_name = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        if (expect_name) {
          expect_name = false;
          if (++members.back() > json_max_members) { return i; }
        }
        break;
      case '{':
      case '[':
        if (members.size() >= max_depth) { return i; }
        members.push_back(c == '{' ? 0 : in_array);
        expect_name = c == '{';
        break;
      case '}':
      case ']':
        if (!members.empty()) { members.pop_back(); }
        break;
      case ',': expect_name = !members.empty() && members.back() != in_array; break;
      default: break;
    }
  }
  return text.size();
}

}  // namespace

std::optional<json> parse_json(std::string_view text, json_error* error, std::size_t max_depth) {
  // nlohmann's lexer takes a NUL byte for the end of the input (as in a C string), and would accept
  // "1\0junk". No JSON text holds a raw NUL (in a string it is a control character), so the text
  // before the first one is parsed, and the NUL is the error if nothing before it is.
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    json_error before;
    if (!parse_json(text.substr(0, nul), &before, max_depth) && before.offset < nul) {
      if (error != nullptr) { *error = std::move(before); }
    } else if (error != nullptr) {
      error->offset = nul;
      error->message = "a NUL byte, which JSON text cannot hold";
    }
    return std::nullopt;
  }
  bounded_builder builder(max_depth, error);
  if (json::sax_parse(text.begin(), text.end(), &builder)) { return builder.take(); }
  if (error != nullptr) {
    switch (builder.stopped()) {
      case bounded_builder::stop::depth:
        error->offset = limit_offset(text, max_depth);
        error->message = "nesting deeper than " + std::to_string(max_depth) + " levels";
        break;
      case bounded_builder::stop::members:
        error->offset = limit_offset(text, max_depth);
        error->message = "an object with more than " + std::to_string(json_max_members) + " members";
        break;
      case bounded_builder::stop::syntax: break;  // parse_error said it
      case bounded_builder::stop::none:
        error->offset = 0;
        error->message = "not JSON";
        break;
    }
  }
  return std::nullopt;
}

const json* member(const json& object, std::string_view name) {
  if (!object.is_object()) { return nullptr; }
  const auto found = object.find(name);
  return found == object.end() ? nullptr : &*found;
}

const char* kind_name(const json& value) noexcept {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "discarded";
  }
  return "?";
}

}  // namespace gpuguard::cli
