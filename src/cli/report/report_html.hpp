/// @file
/// @brief Turns the report's data (report_page_data.hpp) into one self-contained HTML page: the template,
/// style and script embedded in the binary at build time (embed.cmake), the data inlined as JSON.
#pragma once

#include <string>
#include <string_view>

namespace gpuguard::cli {

/// `text` with &, <, >, " and ' as character references, for HTML text and attribute values.
std::string html_escape(std::string_view text);

/// JSON text that is safe inside a <script> element: '<', '>' and '&' (which JSON only allows
/// inside strings) become \u escapes, so no string in the data can close the element ("</script>")
/// or open a comment ("<!--"). JSON.parse gives back the same value.
std::string script_safe_json(std::string_view json);

/// The whole page: `title` (plain text) and `data_json` (report::page_data::data_json) filled into the
/// embedded template.
std::string render_report_html(std::string_view title, std::string_view data_json);

}  // namespace gpuguard::cli
