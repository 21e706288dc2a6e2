// EXPECT: use of deleted function.*scoped_device
#include <gpuguard/device.hpp>
void f(gpuguard::scoped_device& a) {
#ifdef GPUGUARD_COMPILE_FAIL_CONTROL
  static_cast<void>(a.previous());
#else
  gpuguard::scoped_device b(a);
#endif
}
