// The consumer's LibTorch program: links gpuguard::torch (find_package(gpuguard COMPONENTS torch),
// or the adapter target of a vendored gpuguard) and asks the adapter its state.
#include <gpuguard/torch.hpp>

#include <cstdio>
#include <cstring>

int main() {
  if (std::strcmp(gpuguard::torch::to_string(gpuguard::torch::current_state()), "off") != 0) { return 1; }
  std::printf("consumer_torch: ok (libgpuguard_torch linked and loaded)\n");
  return 0;
}
