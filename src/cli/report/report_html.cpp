#include "report/report_html.hpp"

#include "report_script_js.hpp"
#include "report_style_css.hpp"
#include "report_template_html.hpp"

#include <algorithm>
#include <iterator>

namespace gpuguard::cli {

namespace {

template <std::size_t N>
std::string join(const std::string_view (&chunks)[N]) {
  std::string out;
  std::size_t size = 0;
  for (std::string_view chunk : chunks) { size += chunk.size(); }
  out.reserve(size);
  for (std::string_view chunk : chunks) { out.append(chunk); }
  return out;
}

}  // namespace

namespace {

// A character of the text and what stands for it in the output.
struct escape {
  char c;
  std::string_view as;
};

// `text` with every character that `escapes` names replaced by what stands for it.
template <std::size_t N>
std::string escaped(std::string_view text, const escape (&escapes)[N]) {
  std::string out;
  out.reserve(text.size() + text.size() / 16);
  for (const char c : text) {
    const escape* found = std::find_if(std::begin(escapes), std::end(escapes), [c](const escape& e) { return e.c == c; });
    if (found != std::end(escapes)) {
      out += found->as;
    } else {
      out += c;
    }
  }
  return out;
}

constexpr escape html_escapes[] = {{'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&quot;"}, {'\'', "&#39;"}};
// In a JSON string or between its tokens these mean the same, and no `</script>` or `<!--` can end
// or change the script element.
constexpr escape script_escapes[] = {{'<', "\\u003c"}, {'>', "\\u003e"}, {'&', "\\u0026"}};

}  // namespace

std::string html_escape(std::string_view text) { return escaped(text, html_escapes); }

std::string script_safe_json(std::string_view json) { return escaped(json, script_escapes); }

std::string render_report_html(std::string_view title, std::string_view data_json) {
  const std::string page = join(assets::report_template_html);
  const std::string style = join(assets::report_style_css);
  const std::string script = join(assets::report_script_js);
  const std::string escaped_title = html_escape(title);
  const std::string data = script_safe_json(data_json);
  const struct {
    std::string_view marker;
    const std::string* value;
  } slots[] = {{"{{TITLE}}", &escaped_title}, {"{{STYLE}}", &style}, {"{{SCRIPT}}", &script}, {"{{DATA}}", &data}};

  // One pass over the template: what is filled in is never searched for markers again.
  std::string out;
  out.reserve(page.size() + style.size() + script.size() + data.size() + 2 * escaped_title.size());
  std::size_t pos = 0;
  while (pos < page.size()) {
    const std::size_t open = page.find("{{", pos);
    if (open == std::string::npos) {
      out.append(page, pos, std::string::npos);
      break;
    }
    out.append(page, pos, open - pos);
    bool filled = false;
    for (const auto& slot : slots) {
      if (page.compare(open, slot.marker.size(), slot.marker) == 0) {
        out += *slot.value;
        pos = open + slot.marker.size();
        filled = true;
        break;
      }
    }
    if (!filled) {
      out += "{{";
      pos = open + 2;
    }
  }
  return out;
}

}  // namespace gpuguard::cli
