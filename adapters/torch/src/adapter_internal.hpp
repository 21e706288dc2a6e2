// Shared by the adapter's sources: its state, and the swap-in allocator's two calls, which the
// C++ swap-in and the Python pluggable library both use (one allocator, two ways in).
#pragma once

#include <gpuguard/core/op_scope.hpp>
#include <gpuguard/torch.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <mutex>

namespace gpuguard::torch::detail {

std::mutex& setup_mutex();
std::atomic<state>& adapter_state() noexcept;

/// The framework probe scopes read: PyTorch's allocated and reserved bytes of `device`.
bool probe(int device, framework_memory& out) noexcept;

void count_out_of_memory(int device) noexcept;

/// What every way into the adapter does once for the reports: registers the cleanup that frees
/// PyTorch's cuBLAS workspaces before the exit report, and marks PyTorch's libraries and gpuguard's
/// as frames that allocation stacks pass over, so that a site begins in the user's code.
void prepare_reports();

/// The swap-in allocation: cudaMallocAsync on `stream` through gpuguard's tracking, on `device`
/// (made current for the call). Throws c10::OutOfMemoryError when the device is full (with
/// gpuguard's report of what is live on stderr) and c10::Error for other CUDA failures.
void* swap_allocate(std::size_t bytes, int device, cudaStream_t stream);

/// The swap-in free: waits (on the device, not the host) for the work queued so far on every
/// stream the block was recorded on, then frees it on `stream`. Never throws.
void swap_deallocate(void* ptr, std::size_t bytes, int device, cudaStream_t stream) noexcept;

/// Notes that `ptr` is used on `stream` (Tensor::record_stream): its free will wait for `stream`.
void swap_record_stream(void* ptr, cudaStream_t stream);

}  // namespace gpuguard::torch::detail
