// EXPECT: use of deleted function.*stream
#include <gpuguard/stream.hpp>
void f(gpuguard::stream& a) {
#ifdef GPUGUARD_COMPILE_FAIL_CONTROL
  gpuguard::stream b(std::move(a));
#else
  gpuguard::stream b(a);
#endif
}
