// EXPECT: use of deleted function.*device_buffer
#include <gpuguard/device_buffer.hpp>
void f(gpuguard::device_buffer& a) {
#ifdef GPUGUARD_COMPILE_FAIL_CONTROL
  gpuguard::device_buffer b(std::move(a));
#else
  gpuguard::device_buffer b(a);
#endif
}
