// EXPECT: use of deleted function.*event
#include <gpuguard/event.hpp>
void f(gpuguard::event& a, gpuguard::event& c) {
#ifdef GPUGUARD_COMPILE_FAIL_CONTROL
  c = std::move(a);
#else
  c = a;
#endif
}
