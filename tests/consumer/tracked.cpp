// The consumer's tracked program: links gpuguard::gpuguard (libgpuguard.so, found at run time from
// where it was installed or built) and records one allocation into the ledger.
#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/tracking.hpp>

#include <cstdio>
#include <vector>

int main() {
  std::vector<char> block(4096);
  gpuguard::record_allocation({block.data(), block.size(), gpuguard::host_device_id, nullptr, gpuguard::memory_kind::host});
  if (gpuguard::device_counters(gpuguard::host_device_id).current_bytes != block.size()) { return 1; }
  if (!gpuguard::record_free(block.data(), block.size(), gpuguard::host_device_id, nullptr).known) { return 1; }
  if (gpuguard::collect_leaks().count != 0) { return 1; }
  std::printf("consumer_tracked: ok (libgpuguard linked and loaded)\n");
  return 0;
}
