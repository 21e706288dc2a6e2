// Records PyTorch's CPU allocations into gpuguard's ledger while on (tests/torch/cpu_allocator_spy.cpp).
#pragma once

namespace gpuguard_test {

void record_cpu_allocations(bool on);

}  // namespace gpuguard_test
