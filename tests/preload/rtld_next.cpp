// Two libraries that define the same function, and a program that asks the second one, through
// dlsym(RTLD_NEXT), for the definition after it: 1 (the first library's) is right whatever is
// preloaded. A dlsym interposer that resolved RTLD_NEXT relative to itself would answer 2.
#include <cstdio>

#include <dlfcn.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

#if defined(RTLD_NEXT_LIBRARY_SECOND)
EXPORT int gpuguard_probe() { return 2; }
EXPORT int gpuguard_probe_next() {
  auto next = reinterpret_cast<int (*)()>(::dlsym(RTLD_NEXT, "gpuguard_probe"));
  return next != nullptr ? next() : -1;
}
#elif defined(RTLD_NEXT_LIBRARY_FIRST)
EXPORT int gpuguard_probe() { return 1; }
#else
extern "C" int gpuguard_probe_next();
int main() {
  std::printf("rtld_next: %d\n", gpuguard_probe_next());
  return 0;
}
#endif
