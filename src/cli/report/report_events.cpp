// Reading one line of the event log into a typed record (report_events.hpp): the JSON is parsed by
// the bounded reader (json.hpp), then each event's fields are read through `fields`, which keeps the
// first thing wrong as the line's reason. The integer fields of each record are listed in a table
// (name, member, what values it takes), so a record's reader reads like the schema it checks.
#include "report/report_events.hpp"

#include "util/format.hpp"
#include "json.hpp"

#include <cstdio>
#include <limits>

namespace gpuguard::cli::report {

namespace {

constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();
// Nesting deeper than any event of version 1 needs (a frame inside a site inside an event is 4).
constexpr std::size_t event_max_depth = 32;

// ---- field access ------------------------------------------------------------------------------

// The first `max_bytes` bytes of UTF-8 `text`, fewer when that would cut a character.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) { return text; }
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) >> 6) == 0x2) { --cut; }  // not inside a character
  return text.substr(0, cut);
}

// `text` as a record keeps it: whole up to max_string_bytes, else cut and marked with an ellipsis
// and its length, "name… (102400 bytes)", so that the page says it was cut and by how much.
std::string kept_string(std::string_view text) {
  if (text.size() <= max_string_bytes) { return std::string(text); }
  return std::string(utf8_prefix(text, max_string_bytes)) + "\xe2\x80\xa6 (" + std::to_string(text.size()) + " bytes)";
}

// What an integer field may hold.
enum class number_kind { count, device, integer };

// Reads the fields of one event (or of an object inside it), keeping the first thing wrong as the
// reason to skip the line. Getters return a harmless default once something is wrong, so callers
// read every field they need and check ok() once.
class fields {
 public:
  fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  [[nodiscard]] bool ok() const noexcept { return error_.empty(); }
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  void set_error(std::string message) {
    if (error_.empty()) { error_ = std::move(message); }
  }

  std::int64_t number(std::string_view name, number_kind kind) {
    switch (kind) {
      case number_kind::count: return at_least(name, 0, "a non-negative integer");
      case number_kind::device: return at_least(name, -1, "an integer >= -1");
      case number_kind::integer: break;
    }
    return at_least(name, int64_min, "an integer");
  }
  std::int64_t count(std::string_view name) { return number(name, number_kind::count); }
  std::int64_t device(std::string_view name) { return number(name, number_kind::device); }
  std::optional<std::int64_t> optional_number(std::string_view name, number_kind kind) {
    if (!has(name)) { return std::nullopt; }
    return number(name, kind);
  }

  std::string string(std::string_view name) {
    const json* v = typed(name, &json::is_string, "a string");
    return v != nullptr ? kept_string(v->get_ref<const std::string&>()) : std::string();
  }
  std::optional<std::string> optional_string(std::string_view name) {
    if (!has(name)) { return std::nullopt; }
    return string(name);
  }
  bool boolean(std::string_view name) {
    const json* v = typed(name, &json::is_boolean, "true or false");
    return v != nullptr && v->get<bool>();
  }
  double real(std::string_view name) {
    const json* v = typed(name, &json::is_number, "a number");
    return v != nullptr ? v->get<double>() : 0.0;
  }
  const json* array(std::string_view name) { return typed(name, &json::is_array, "an array"); }
  const json* object(std::string_view name) { return typed(name, &json::is_object, "an object"); }

  // The field's path in the event ("sites[2].frames"); a name from the log (a misuse key) escaped
  // as in JSON, so that a reason stays one printable line.
  [[nodiscard]] std::string path(std::string_view name) const {
    const std::string quoted = detail::json_string(name);
    return where_ + quoted.substr(1, quoted.size() - 2);
  }
  [[nodiscard]] bool has(std::string_view name) const { return member(object_, name) != nullptr; }

 private:
  const json* get(std::string_view name) {
    const json* v = member(object_, name);
    if (v == nullptr) { set_error("field \"" + path(name) + "\" is missing"); }
    return v;
  }

  const json* typed(std::string_view name, bool (json::*is)() const noexcept, const char* expected) {
    const json* v = get(name);
    if (v == nullptr) { return nullptr; }
    if (!((*v).*is)()) {
      wrong(name, expected, *v);
      return nullptr;
    }
    return v;
  }

  std::int64_t at_least(std::string_view name, std::int64_t minimum, const char* expected) {
    const json* v = get(name);
    if (v == nullptr) { return 0; }
    if (!v->is_number_integer() || v->get<std::int64_t>() < minimum) {
      wrong(name, expected, *v);
      return 0;
    }
    return v->get<std::int64_t>();
  }

  void wrong(std::string_view name, const char* expected, const json& v) {
    std::string actual;
    if (v.is_number_integer()) {
      actual = std::to_string(v.get<std::int64_t>());
    } else if (v.is_number()) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", v.get<double>());
      actual = text;
    } else {
      actual = std::string("a JSON ") + kind_name(v);
    }
    set_error("field \"" + path(name) + "\" must be " + expected + ", not " + actual);
  }

  const json& object_;
  std::string where_;
  std::string error_;
};

// A field of a record: its name in the log and where it goes, an integer (with what it may hold),
// a string or a number. A record's plain fields are a table of these, read in its order (the first
// thing wrong is the reason given).
template <typename Record>
struct record_field {
  constexpr record_field(const char* field_name, std::int64_t Record::*to, number_kind what = number_kind::count)
      : name(field_name), integer(to), kind(what) {}
  constexpr record_field(const char* field_name, std::string Record::*to) : name(field_name), text(to) {}
  constexpr record_field(const char* field_name, double Record::*to) : name(field_name), real(to) {}

  const char* name;
  std::int64_t Record::*integer = nullptr;
  number_kind kind = number_kind::count;
  std::string Record::*text = nullptr;
  double Record::*real = nullptr;
};

template <typename Record, std::size_t N>
void read_fields(fields& f, Record& record, const record_field<Record> (&table)[N]) {
  for (const record_field<Record>& field : table) {
    if (field.integer != nullptr) {
      record.*field.integer = f.number(field.name, field.kind);
    } else if (field.text != nullptr) {
      record.*field.text = f.string(field.name);
    } else {
      record.*field.real = f.real(field.name);
    }
  }
}

// A record whose fields are all in `table`, read from `f`.
template <typename Record, std::size_t N>
Record read_record(fields& f, const record_field<Record> (&table)[N]) {
  Record record;
  read_fields(f, record, table);
  return record;
}

// The objects of the array field `name` of `parent`, each read by `read_one(fields&)` into a Row;
// the first `keep` are kept, all are checked. What is wrong with one goes to `parent`.
template <typename Row, typename ReadOne>
kept_rows<Row> read_rows(fields& parent, std::string_view name, std::size_t keep, ReadOne read_one) {
  kept_rows<Row> out;
  const json* list = parent.array(name);
  if (list == nullptr) { return out; }
  for (const json& item : *list) {
    const std::string here = parent.path(name) + "[" + std::to_string(out.total) + "]";
    if (!item.is_object()) {
      parent.set_error("\"" + here + "\" must be an object, not a JSON " + kind_name(item));
      return out;
    }
    fields f(item, here + ".");
    Row row = read_one(f);
    if (!f.ok()) {
      parent.set_error(f.error());
      return out;
    }
    if (out.rows.size() < keep) { out.rows.push_back(std::move(row)); }
    ++out.total;
  }
  return out;
}

// A site's stack: [{address, function, file, line}], innermost first.
constexpr record_field<frame> frame_fields[] = {
    {"address", &frame::address}, {"function", &frame::function}, {"file", &frame::file}, {"line", &frame::line}};

std::vector<frame> read_frames(fields& site) {
  return read_rows<frame>(site, "frames", max_frames_kept, [](fields& f) { return read_record(f, frame_fields); }).rows;
}

// The `sites` list of a `sites` or `leaks` line: each row's fields from `table`, its stack, and
// what `more(fields&, Row&)` reads of its kind; the first `keep` kept.
template <typename Row, std::size_t N, typename More>
kept_rows<Row> read_site_list(fields& f, std::size_t keep, const record_field<Row> (&table)[N], More more) {
  return read_rows<Row>(f, "sites", keep, [&](fields& s) {
    Row row = read_record(s, table);
    row.frames = read_frames(s);
    more(s, row);
    return row;
  });
}

// `stack_backend`, optional on start, sites, leaks and end: "" when absent.
std::string read_backend(fields& f) { return f.optional_string("stack_backend").value_or(std::string()); }

// ---- one reader per event type -----------------------------------------------------------------

constexpr record_field<mem_event> mem_fields[] = {{"device", &mem_event::device, number_kind::device},
                                                   {"live_bytes", &mem_event::live_bytes},
                                                   {"peak_bytes", &mem_event::peak_bytes},
                                                   {"allocations", &mem_event::allocations},
                                                   {"frees", &mem_event::frees}};
constexpr record_field<alloc_event> alloc_fields[] = {{"device", &alloc_event::device, number_kind::device},
                                                       {"bytes", &alloc_event::bytes},
                                                       {"live_bytes", &alloc_event::live_bytes},
                                                       {"site", &alloc_event::site},
                                                       {"thread", &alloc_event::thread}};
constexpr record_field<mem_step_event> mem_step_fields[] = {{"end", &mem_step_event::end},
                                                             {"device", &mem_step_event::device, number_kind::device},
                                                             {"end_bytes", &mem_step_event::end_bytes},
                                                             {"min_bytes", &mem_step_event::min_bytes},
                                                             {"min_t", &mem_step_event::min_t},
                                                             {"max_bytes", &mem_step_event::max_bytes},
                                                             {"max_t", &mem_step_event::max_t},
                                                             {"allocs", &mem_step_event::allocs}};
constexpr record_field<op_event> op_fields[] = {{"thread", &op_event::thread},
                                                 {"depth", &op_event::depth},
                                                 {"dur", &op_event::dur},
                                                 {"alloc_bytes", &op_event::alloc_bytes},
                                                 {"free_bytes", &op_event::free_bytes},
                                                 {"net_bytes", &op_event::net_bytes, number_kind::integer},
                                                 {"peak_bytes", &op_event::peak_bytes},
                                                 {"allocs", &op_event::allocs},
                                                 {"frees", &op_event::frees}};
constexpr record_field<end_device> end_device_fields[] = {{"device", &end_device::device, number_kind::device},
                                                           {"current_bytes", &end_device::current_bytes},
                                                           {"peak_bytes", &end_device::peak_bytes},
                                                           {"total_bytes", &end_device::total_bytes},
                                                           {"allocations", &end_device::allocations},
                                                           {"frees", &end_device::frees}};
constexpr record_field<crash_device> crash_device_fields[] = {{"device", &crash_device::device, number_kind::device},
                                                               {"live_bytes", &crash_device::live_bytes},
                                                               {"live_count", &crash_device::live_count},
                                                               {"peak_bytes", &crash_device::peak_bytes}};
constexpr record_field<start_event> start_fields[] = {
    {"pid", &start_event::pid}, {"program", &start_event::program}, {"unix_ns", &start_event::unix_ns}};
constexpr record_field<device_event> device_fields[] = {
    {"device", &device_event::device, number_kind::device}, {"name", &device_event::name}, {"total_bytes", &device_event::total_bytes}};
constexpr record_field<thread_event> thread_fields[] = {
    {"thread", &thread_event::thread}, {"tid", &thread_event::tid}, {"name", &thread_event::name}};
constexpr record_field<alert_event> alert_fields[] = {
    {"kind", &alert_event::kind}, {"suppressed", &alert_event::suppressed}, {"message", &alert_event::message}};
constexpr record_field<op_growth_alert> op_growth_fields[] = {{"name", &op_growth_alert::name},
                                                              {"thread", &op_growth_alert::thread},
                                                              {"net_bytes", &op_growth_alert::net_bytes, number_kind::integer},
                                                              {"limit_bytes", &op_growth_alert::limit_bytes}};
constexpr record_field<device_fill_alert> device_fill_fields[] = {{"device", &device_fill_alert::device, number_kind::device},
                                                                  {"fraction", &device_fill_alert::fraction},
                                                                  {"threshold", &device_fill_alert::threshold},
                                                                  {"used_bytes", &device_fill_alert::used_bytes},
                                                                  {"total_bytes", &device_fill_alert::total_bytes}};
constexpr record_field<dropped_event> dropped_fields[] = {{"count", &dropped_event::count}, {"total", &dropped_event::total}};
constexpr record_field<site_row> site_row_fields[] = {
    {"site", &site_row::site}, {"allocs", &site_row::allocs}, {"bytes", &site_row::bytes}};
constexpr record_field<leak_row> leak_row_fields[] = {{"site", &leak_row::site},
                                                      {"device", &leak_row::device, number_kind::device},
                                                      {"tag", &leak_row::tag},
                                                      {"bytes", &leak_row::bytes},
                                                      {"count", &leak_row::count}};
constexpr record_field<end_event> end_fields[] = {{"reason", &end_event::reason}, {"dropped", &end_event::dropped}};
constexpr record_field<crash_event> crash_fields[] = {{"signal", &crash_event::signal},
                                                      {"code", &crash_event::code, number_kind::integer},
                                                      {"address", &crash_event::address},
                                                      {"thread", &crash_event::thread},
                                                      {"crash_file", &crash_event::crash_file}};

start_event read_start(fields& f) {
  start_event e;
  const std::string schema = f.string("schema");
  read_fields(f, e, start_fields);
  e.stack_backend = read_backend(f);
  // Quoted as JSON: the log's own text must not add lines (or terminal escapes) to stderr.
  if (f.ok() && schema != "gpuguard.events") {
    f.set_error("schema is " + detail::json_string(schema.substr(0, 64)) + ", not \"gpuguard.events\"");
  }
  return e;
}

mem_event read_mem(fields& f) {
  mem_event e;
  read_fields(f, e, mem_fields);
  e.used_bytes = f.optional_number("used_bytes", number_kind::count);
  e.total_bytes = f.optional_number("total_bytes", number_kind::count);
  if (f.ok() && e.used_bytes.has_value() != e.total_bytes.has_value()) {
    f.set_error(e.used_bytes ? "field \"used_bytes\" without \"total_bytes\"" : "field \"total_bytes\" without \"used_bytes\"");
  }
  return e;
}

alloc_event read_alloc(fields& f, bool alloc) {
  alloc_event e;
  e.alloc = alloc;
  const std::string address = f.string("address");
  read_fields(f, e, alloc_fields);
  if (f.ok() && (address.rfind("0x", 0) != 0 || !detail::parse_hex(address, e.address))) {
    f.set_error("field \"address\" must be a hexadecimal address (\"0x...\"), not " +
                detail::json_string(address.substr(0, 40)));
  }
  return e;
}

mem_step_event read_mem_step(fields& f) {
  mem_step_event e;
  read_fields(f, e, mem_step_fields);
  static_cast<void>(f.count("start_bytes"));  // checked, not drawn: the line before ends there
  static_cast<void>(f.count("frees"));
  if (f.ok() && e.min_bytes > e.max_bytes) { f.set_error("field \"min_bytes\" is above \"max_bytes\""); }
  return e;
}

op_event read_op(fields& f) {
  op_event e;
  e.name = f.string("name");
  read_fields(f, e, op_fields);
  e.exception = f.boolean("exception");
  e.device = f.optional_number("device", number_kind::device);
  if (e.device) {
    e.used_before = f.count("used_before");
    e.used_after = f.count("used_after");
  }
  return e;
}

alert_event read_alert(fields& f) {
  alert_event e = read_record(f, alert_fields);
  if (!f.ok()) { return e; }
  if (e.kind == "op_growth") {
    e.op_growth = read_record(f, op_growth_fields);
  } else if (e.kind == "device_full" || e.kind == "device_recovered") {
    e.device_fill = read_record(f, device_fill_fields);
  } else {
    // A kind this reader does not know: shown with its message only.
    e.device = f.optional_number("device", number_kind::device);
  }
  return e;
}

std::optional<std::vector<std::int64_t>> read_raw_sites(fields& site) {
  if (!site.has("raw_sites")) { return std::nullopt; }
  std::vector<std::int64_t> raw;
  const json* list = site.array("raw_sites");
  if (list == nullptr) { return raw; }
  for (const json& r : *list) {
    if (!r.is_number_integer() || r.get<std::int64_t>() < 0) {
      site.set_error("field \"" + site.path("raw_sites") + "\" must hold non-negative integers");
      return raw;
    }
    if (raw.size() < max_frames_kept) { raw.push_back(r.get<std::int64_t>()); }
  }
  return raw;
}

sites_event read_sites(fields& f) {
  sites_event e;
  e.sampled = f.boolean("sampled");
  e.stack_backend = read_backend(f);
  if (!f.ok()) { return e; }
  e.sites = read_site_list(f, max_sites_kept, site_row_fields,
                           [](fields& s, site_row& row) { row.raw_sites = read_raw_sites(s); });
  return e;
}

leaks_event read_leaks(fields& f) {
  leaks_event e;
  e.total_bytes = f.count("total_bytes");
  e.total_count = f.count("total_count");
  e.stack_backend = read_backend(f);
  if (!f.ok()) { return e; }
  e.sites = read_site_list(f, max_leak_sites_kept, leak_row_fields, [](fields& /*s*/, leak_row& /*row*/) {});
  return e;
}

end_event read_end(fields& f) {
  end_event e = read_record(f, end_fields);
  const json* misuse = f.object("misuse");
  e.stack_backend = read_backend(f);
  if (!f.ok()) { return e; }
  e.devices = read_rows<end_device>(f, "devices", std::numeric_limits<std::size_t>::max(),
                                    [](fields& d) { return read_record(d, end_device_fields); })
                  .rows;
  fields counts(*misuse, "misuse.");
  for (const auto& [name, value] : misuse->items()) {
    const std::int64_t n = counts.count(name);
    if (!counts.ok()) { break; }
    e.misuse.emplace_back(kept_string(name), n);
  }
  if (!counts.ok()) { f.set_error(counts.error()); }
  return e;
}

crash_event read_crash(fields& f) {
  crash_event e = read_record(f, crash_fields);
  if (!f.ok()) { return e; }
  e.devices = read_rows<crash_device>(f, "devices", std::numeric_limits<std::size_t>::max(),
                                      [](fields& d) { return read_record(d, crash_device_fields); })
                  .rows;
  return e;
}

// The body of an event of `type`, read from `f` (whose error says what is wrong, if anything).
event_body read_body(std::string_view type, fields& f) {
  if (type == "start") { return read_start(f); }
  if (type == "device") { return read_record(f, device_fields); }
  if (type == "thread") { return read_record(f, thread_fields); }
  if (type == "mem") { return read_mem(f); }
  if (type == "alloc" || type == "free") { return read_alloc(f, type == "alloc"); }
  if (type == "mem_step") { return read_mem_step(f); }
  if (type == "op") { return read_op(f); }
  if (type == "alert") { return read_alert(f); }
  if (type == "dropped") { return read_record(f, dropped_fields); }
  if (type == "sites") { return read_sites(f); }
  if (type == "leaks") { return read_leaks(f); }
  if (type == "end") { return read_end(f); }
  if (type == "crash") { return read_crash(f); }
  return unknown_event{};
}

// `reason` cut to max_reason_bytes at a character boundary (a long key or string quoted in it).
std::string bounded(const std::string& reason) {
  if (reason.size() <= max_reason_bytes) { return reason; }
  return std::string(utf8_prefix(reason, max_reason_bytes - 3)) + "...";
}

// Sets `*why` (when not null) and returns no event.
std::optional<log_event> refuse(refusal* why, const std::string& reason, bool cut = false) {
  if (why != nullptr) { *why = refusal{bounded(reason), cut}; }
  return std::nullopt;
}

}  // namespace

std::optional<log_event> parse_event(std::string_view line, bool unterminated, refusal* why) {
  constexpr const char* cut_line = "the last line was cut (the process ended while writing it)";
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
    return unterminated ? refuse(why, cut_line, true) : refuse(why, "blank line");
  }
  json_error syntax;
  const std::optional<json> value = parse_json(line, &syntax, event_max_depth);
  if (!value) {
    const std::string where = syntax.message + " at column " + std::to_string(syntax.offset + 1);
    return unterminated ? refuse(why, std::string(cut_line) + ": " + where, true) : refuse(why, "not JSON: " + where);
  }
  if (!value->is_object()) { return refuse(why, std::string("a JSON ") + kind_name(*value) + ", not an object"); }
  fields header(*value, "");
  const std::int64_t version = header.number("v", number_kind::integer);
  if (!header.ok()) { return refuse(why, header.error()); }
  if (version != 1) {
    return refuse(why, "unknown version v=" + std::to_string(version) + " (this reader knows version 1)");
  }
  log_event event;
  event.type = header.string("type");
  event.t = header.count("t");
  if (!header.ok()) { return refuse(why, header.error()); }
  fields f(*value, "");
  event.body = read_body(event.type, f);
  if (!f.ok()) { return refuse(why, event.type + ": " + f.error()); }
  return event;
}

}  // namespace gpuguard::cli::report
