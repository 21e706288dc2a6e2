// EXPECT: use of deleted function.*device_array
#include <gpuguard/device_array.hpp>
void f(gpuguard::device_array<float>& a) {
#ifdef GPUGUARD_COMPILE_FAIL_CONTROL
  gpuguard::device_array<float> b(std::move(a));
#else
  gpuguard::device_array<float> b(a);
#endif
}
