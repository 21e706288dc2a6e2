// The consumer's host half: uses the guards, and on a GPU calls into the .cu half.
#include <gpuguard/gpuguard.hpp>

#include <cstdio>
#include <vector>

#if defined(CONSUMER_HAS_CUDA)
int consumer_kernel_sum(const gpuguard::device_array<int>& values);
#endif

int main() {
  gpuguard::host_memory_resource host;
  const gpuguard::device_array<int> on_host(std::vector<int>{1, 2, 3}, {}, host);
  if (on_host.to_host() != std::vector<int>{1, 2, 3}) { return 1; }
#if defined(CONSUMER_HAS_CUDA)
  if (gpuguard::has_device()) {
    const gpuguard::device_array<int> values(std::vector<int>(1000, 2));
    if (consumer_kernel_sum(values) != 2000) { return 1; }
    std::printf("consumer: ok (host and GPU)\n");
    return 0;
  }
#endif
  std::printf("consumer: ok (host only: no GPU here)\n");
  return 0;
}
