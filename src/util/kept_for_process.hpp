// Heap objects the library keeps unfreed on purpose and may stop pointing to: a framework probe's
// old slot (a scope may still read it), and, in a child made by fork(), the parent's thread
// objects and sinks (the parent's threads and files own them; the child must not join, flush or
// free them). kept_for_process() tells LeakSanitizer so, in a build that has it, so that its
// leak check at exit reports real leaks only; elsewhere it does nothing.
#pragma once

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPUGUARD_HAVE_LSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define GPUGUARD_HAVE_LSAN 1
#endif

#if defined(GPUGUARD_HAVE_LSAN)
#include <sanitizer/lsan_interface.h>
#endif

namespace gpuguard::detail {

/// Marks `object` (the start of a heap allocation, or null) as deliberately never freed; it and
/// what it points to are then not reported as leaks. Allocates nothing.
inline void kept_for_process(const void* object) noexcept {
#if defined(GPUGUARD_HAVE_LSAN)
  if (object != nullptr) { __lsan_ignore_object(object); }
#else
  static_cast<void>(object);
#endif
}

}  // namespace gpuguard::detail
