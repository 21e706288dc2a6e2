#include "report/report_html.hpp"

#include "report_script_js.hpp"
#include "report_style_css.hpp"
#include "report_template_html.hpp"

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

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string script_safe_json(std::string_view json) {
  std::string out;
  out.reserve(json.size() + json.size() / 16);
  for (const char c : json) {
    switch (c) {
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default: out += c;
    }
  }
  return out;
}

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
