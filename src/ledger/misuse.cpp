// Misuse reports and counts (misuse.hpp).
#include "ledger/misuse.hpp"

#include "ledger/python_frames.hpp"
#include "ledger/stacks.hpp"

#include <cinttypes>

namespace gpuguard {

const char* to_string(misuse_kind kind) noexcept {
  switch (kind) {
    case misuse_kind::unknown_pointer: return "free of an unknown pointer";
    case misuse_kind::double_free: return "double free";
    case misuse_kind::wrong_size: return "free with the wrong size";
    case misuse_kind::wrong_device: return "free on a different device";
  }
  return "misuse";
}

namespace detail {

namespace {

void print_site(std::FILE* out, const char* label, site_id site) {
  if (site == no_site) {
    std::fprintf(out, "[gpuguard]   %s: (no stack: set GPUGUARD_OPTIONS=stacks=all)\n", label);
    return;
  }
  std::fprintf(out, "[gpuguard]   %s:\n", label);
  int n = 0;
  for (const frame_info& frame : resolve_site_frames(site_frames(site))) {
    std::fprintf(out, "[gpuguard]     #%d 0x%" PRIxPTR " %s", n++, frame.address,
                 frame.function.empty() ? "??" : frame.function.c_str());
    if (!frame.file.empty()) { std::fprintf(out, " at %s:%zu", frame.file.c_str(), frame.line); }
    std::fputc('\n', out);
  }
}

}  // namespace

void write_misuse_report(std::FILE* out, const misuse_report& m, site_id here) noexcept {
  try {
    std::fprintf(out, "[gpuguard] error: %s: %p", to_string(m.kind), m.ptr);
    switch (m.kind) {
      case misuse_kind::wrong_size:
        std::fprintf(out, " freed as %zu bytes but allocated as %zu on device %d; freed with %zu\n",
                     m.bytes_given, m.bytes_recorded, m.device_recorded, m.bytes_recorded);
        break;
      case misuse_kind::wrong_device:
        std::fprintf(out, " (%zu bytes) allocated on device %d, freed while device %d was current; "
                     "freed on device %d\n", m.bytes_recorded, m.device_recorded, m.device_given,
                     m.device_recorded);
        break;
      case misuse_kind::double_free:
        std::fprintf(out, " (%zu bytes, device %d) was already freed; %s\n", m.bytes_recorded,
                     m.device_recorded, m.interposed ? "passed on to CUDA as the program made it" : "this free is ignored");
        break;
      case misuse_kind::unknown_pointer:
        std::fprintf(out, " (%zu bytes) was never allocated through gpuguard's tracking; not freed\n",
                     m.bytes_given);
        break;
    }
    if (m.kind != misuse_kind::unknown_pointer) { print_site(out, "allocated at", m.allocated_at); }
    if (m.kind == misuse_kind::double_free) { print_site(out, "first freed at", m.freed_at); }
    print_site(out, "this free at", here);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a failing report must not break the free
  }
}

misuse_counts misuse_counters::read() const noexcept {
  misuse_counts m;
  m.unknown_pointer = unknown_pointer.load(std::memory_order_relaxed);
  m.double_free = double_free.load(std::memory_order_relaxed);
  m.wrong_size = wrong_size.load(std::memory_order_relaxed);
  m.wrong_device = wrong_device.load(std::memory_order_relaxed);
  return m;
}

void misuse_counters::clear() noexcept {
  for (auto* count : {&unknown_pointer, &double_free, &wrong_size, &wrong_device, &untracked_frees}) {
    count->store(0, std::memory_order_relaxed);
  }
}

}  // namespace detail

}  // namespace gpuguard
