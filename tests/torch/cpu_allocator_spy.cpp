// A stand-in, on the CPU, for observe mode's trace tracker: PyTorch's CPU allocator wrapped so that
// each allocation is recorded into gpuguard's ledger. It lives in a shared library of its own whose
// name begins "libgpuguard", as the adapter's tracker does, so that the adapter's rule for which
// frames a stack passes over covers it (tests/torch/torch_cpu_test.cpp).
#include "cpu_allocator_spy.hpp"

#include <gpuguard/core/allocation_source.hpp>
#include <gpuguard/core/ledger.hpp>

#include <c10/core/CPUAllocator.h>

namespace {

struct recording_cpu_allocator final : c10::Allocator {
  c10::Allocator* real = nullptr;
  c10::DataPtr allocate(std::size_t bytes) override {
    c10::DataPtr data = real->allocate(bytes);
    gpuguard::record_allocation(
        gpuguard::allocation_event{data.get(), bytes, gpuguard::host_device_id, nullptr, gpuguard::memory_kind::host});
    return data;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { real->copy_data(dest, src, count); }
};

}  // namespace

namespace gpuguard_test {

void record_cpu_allocations(bool on) {
  static recording_cpu_allocator spy;
  if (spy.real == nullptr) { spy.real = c10::GetCPUAllocator(); }
  // SetCPUAllocator keeps the allocator of the highest priority so far: each call outbids the last.
  static std::uint8_t priority = 100;
  c10::SetCPUAllocator(on ? static_cast<c10::Allocator*>(&spy) : spy.real, ++priority);
}

}  // namespace gpuguard_test
