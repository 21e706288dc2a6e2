// EXPECT: T must be trivially copyable
#include <gpuguard/device_array.hpp>
#include <string>
#ifdef GPUGUARD_COMPILE_FAIL_CONTROL
template class gpuguard::device_array<int>;
#else
template class gpuguard::device_array<std::string>;
#endif
