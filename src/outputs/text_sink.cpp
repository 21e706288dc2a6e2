// The text sink: one line per operation scope, alert and drop, on stderr or into a file
// (text_log). Its line format is in docs/formats.md.
#include "outputs/output_file.hpp"
#include "outputs/sinks.hpp"
#include "util/format.hpp"

#include <cinttypes>
#include <cstdio>
#include <string>

namespace gpuguard::detail {

namespace {

// ---- text lines ---------------------------------------------------------------------------------

class text_sink final : public sink {
 public:
  explicit text_sink(failure_reporter report) : file_("text_log", report) {}
  bool open(const std::string& where, std::string* error) { return file_.open(where, true, error); }

  void op(const op_result& op) override {
    file_.buffer() += op_line(op);
    file_.buffer() += '\n';
    file_.maybe_flush();
  }
  void alert(const gpuguard::alert& fired) override {
    file_.buffer() += fired.message;
    file_.buffer() += '\n';
  }
  void dropped(std::uint64_t count, std::uint64_t total, std::int64_t /*time_ns*/) override {
    char line[160];
    std::snprintf(line, sizeof line,
                  "[gpuguard] %" PRIu64 " events dropped: the output queue was full (%" PRIu64
                  " since the start; raise queue_capacity)\n", count, total);
    file_.buffer() += line;
  }
  void flush() override { file_.flush(); }

 private:
  output_file file_;
};

}  // namespace

std::string op_line(const op_result& op) {
  std::string line = "[gpuguard] ";
  line.append(std::size_t{2} * op.depth, ' ');
  line += op.name_view();
  line += ": ";
  line += format_signed_bytes(op.net_bytes);
  line += " (peak +";
  line += format_bytes(op.peak_bytes);
  line += ", ";
  line += std::to_string(op.allocs);
  line += op.allocs == 1 ? " alloc" : " allocs";
  if (op.frees != 0) {
    line += ", ";
    line += std::to_string(op.frees);
    line += op.frees == 1 ? " free" : " frees";
  }
  line += ") ";
  line += format_duration(op.duration_ns);
  if (op.device_queried) {
    line += ", device " + std::to_string(op.device) + " used " + format_bytes(op.used_before) +
            " -> " + format_bytes(op.used_after);
    if (op.pool_queried) {
      line += " (pool reserved " + format_signed_bytes(op.pool_reserved_delta) + ", pool used " +
              format_signed_bytes(op.pool_used_delta) + ")";
    }
  }
  if (op.framework != nullptr) {
    line += "; ";
    line += op.framework;
    line += " allocated " + format_signed_bytes(op.framework_allocated_delta) + ", reserved " +
            format_signed_bytes(op.framework_reserved_delta);
  }
  if (op.exception) { line += " [exception]"; }
  return line;
}

std::unique_ptr<sink> make_text_sink(const std::string& where, failure_reporter report, std::string* error) {
  return opened(std::make_unique<text_sink>(report), error, where);
}

}  // namespace gpuguard::detail
