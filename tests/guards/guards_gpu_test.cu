// The guards on a real GPU: memory taken and given back as the driver sees it, on every exit path.
#include "gpu_test.hpp"

#include <gpuguard/gpuguard.hpp>

#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

namespace {

using gpuguard_test::device_used_bytes;
using gpuguard_test::gpu_test;

constexpr std::size_t mib = 1024 * 1024;
// cudaMemGetInfo moves in pages; a few MiB of slack absorbs the driver's own bookkeeping.
constexpr std::size_t slack = 4 * mib;

__global__ void add_one(int* data, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) { data[i] += 1; }
}

void launch_add_one(int* data, std::size_t n, cudaStream_t stream) {
  if (n == 0) { return; }
  add_one<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(data, n);
  GPUGUARD_CUDA_TRY(cudaGetLastError(), std::string("add_one<<<...>>>"));
}

void expect_near_bytes(std::size_t actual, std::size_t expected) {
  const std::size_t diff = actual > expected ? actual - expected : expected - actual;
  EXPECT_LE(diff, slack) << "actual " << actual << " expected " << expected;
}

class device_buffer_gpu : public gpu_test {};

TEST_F(device_buffer_gpu, memory_taken_while_alive_and_back_at_scope_exit) {
  const std::size_t baseline = device_used_bytes();
  {
    const gpuguard::device_buffer buffer(256 * mib);
    EXPECT_GE(device_used_bytes(), baseline + 256 * mib - slack);
    EXPECT_EQ(buffer.device(), gpuguard::current_device());
  }
  expect_near_bytes(device_used_bytes(), baseline);
}

TEST_F(device_buffer_gpu, memory_back_after_an_exception) {
  const std::size_t baseline = device_used_bytes();
  auto step = [] {
    const gpuguard::device_buffer a(128 * mib);
    const gpuguard::device_array<float> b(32 * mib);
    std::vector<gpuguard::device_buffer> more;
    more.emplace_back(64 * mib);
    more.emplace_back(64 * mib);
    throw std::runtime_error("failure mid-step");
  };
  EXPECT_THROW(step(), std::runtime_error);
  expect_near_bytes(device_used_bytes(), baseline);
}

TEST_F(device_buffer_gpu, out_of_memory_is_clear_and_leaves_no_sticky_error) {
  const std::size_t huge = std::size_t{1} << 50;
  try {
    const gpuguard::device_buffer buffer(huge);
    FAIL() << "1 PiB was granted";
  } catch (const gpuguard::out_of_memory& error) {
    EXPECT_EQ(std::string(error.what()),
              "cudaMalloc(" + std::to_string(huge) + " bytes) on device " +
                  std::to_string(gpuguard::current_device()) +
                  ": cudaErrorMemoryAllocation: out of memory");
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const gpuguard::device_buffer after(mib);  // the device is still usable
  EXPECT_EQ(after.size(), mib);
}

TEST_F(device_buffer_gpu, frees_on_its_own_device_whatever_is_current) {
  const int count = gpuguard::device_count();
  const int last = count - 1;
  std::size_t used_on_last = 0;
  gpuguard::device_buffer buffer;
  {
    GPUGUARD_SCOPED_DEVICE(last);
    used_on_last = device_used_bytes();
    buffer = gpuguard::device_buffer(64 * mib);
    EXPECT_EQ(buffer.device(), last);
  }
  GPUGUARD_CUDA_TRY(cudaSetDevice(0));
  buffer = gpuguard::device_buffer();  // frees on `last` although device 0 is current
  EXPECT_EQ(gpuguard::current_device(), 0);
  GPUGUARD_SCOPED_DEVICE(last);
  expect_near_bytes(device_used_bytes(), used_on_last);
}

class sizes_gpu : public gpu_test, public testing::WithParamInterface<std::size_t> {};

TEST_P(sizes_gpu, kernel_through_guards_round_trip) {
  const std::size_t n = GetParam();
  const gpuguard::stream stream;
  std::vector<int> host(n);
  std::iota(host.begin(), host.end(), 0);
  gpuguard::device_array<int> array(host, stream);
  launch_add_one(array.data(), n, stream.get());
  const std::vector<int> back = array.to_host();
  ASSERT_EQ(back.size(), n);
  for (std::size_t i = 0; i < n; ++i) { ASSERT_EQ(back[i], static_cast<int>(i) + 1) << i; }
}

TEST_P(sizes_gpu, stream_ordered_buffer_freed_on_its_stream) {
  const std::size_t n = GetParam();
  gpuguard::cuda_async_memory_resource pool;
  const gpuguard::stream stream;
  {
    gpuguard::device_array<int> array(n, stream, pool);
    EXPECT_EQ(array.stream(), stream.view());
    if (n != 0) { GPUGUARD_CUDA_TRY(cudaMemsetAsync(array.data(), 0, array.size_bytes(), stream.get())); }
    launch_add_one(array.data(), n, stream.get());
    const std::vector<int> back = array.to_host();
    for (const int x : back) { ASSERT_EQ(x, 1); }
  }
  stream.synchronize();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(sizes, sizes_gpu,
                         testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{1000},
                                         std::size_t{1} << 24));

TEST_F(device_buffer_gpu, stream_ordered_pool_returns_memory_after_sync) {
  gpuguard::cuda_async_memory_resource pool;
  const gpuguard::stream stream;
  const std::size_t baseline = device_used_bytes();
  {
    const gpuguard::device_buffer buffer(512 * mib, stream, pool);
    stream.synchronize();
    EXPECT_GE(device_used_bytes(), baseline + 512 * mib - slack);
  }
  // The default pool's release threshold is 0: memory goes back to the driver at the next sync.
  stream.synchronize();
  expect_near_bytes(device_used_bytes(), baseline);
}

class scoped_device_gpu : public gpu_test {};

TEST_F(scoped_device_gpu, restores_the_previous_device_on_every_exit_path) {
  const int last = gpuguard::device_count() - 1;
  GPUGUARD_CUDA_TRY(cudaSetDevice(0));
  {
    GPUGUARD_SCOPED_DEVICE(last);
    EXPECT_EQ(gpuguard::current_device(), last);
  }
  EXPECT_EQ(gpuguard::current_device(), 0);
  try {
    GPUGUARD_SCOPED_DEVICE(last);
    GPUGUARD_CUDA_TRY(cudaSetDevice(last));
    throw std::runtime_error("leave by exception");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(gpuguard::current_device(), 0);
}

TEST_F(scoped_device_gpu, bad_device_is_a_clear_error_and_changes_nothing) {
  const int before = gpuguard::current_device();
  const int bad = gpuguard::device_count() + 3;
  try {
    const gpuguard::scoped_device guard(bad);
    FAIL() << "no exception";
  } catch (const gpuguard::cuda_error& error) {
    EXPECT_EQ(error.status(), cudaErrorInvalidDevice);
    EXPECT_NE(std::string(error.what()).find("cudaSetDevice(" + std::to_string(bad) + ")"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(gpuguard::current_device(), before);
}

class pinned_gpu : public gpu_test {};

TEST_F(pinned_gpu, pinned_staging_to_device_and_back) {
  constexpr std::size_t n = 1 << 20;
  const gpuguard::stream stream;
  gpuguard::pinned_buffer<int> staging(n);
  std::iota(staging.begin(), staging.end(), 5);
  gpuguard::device_array<int> array(n, stream);
  GPUGUARD_CUDA_TRY(cudaMemcpyAsync(array.data(), staging.data(), n * sizeof(int),
                                    cudaMemcpyHostToDevice, stream.get()));
  launch_add_one(array.data(), n, stream.get());
  GPUGUARD_CUDA_TRY(cudaMemcpyAsync(staging.data(), array.data(), n * sizeof(int),
                                    cudaMemcpyDeviceToHost, stream.get()));
  stream.synchronize();
  EXPECT_EQ(staging[0], 6);
  EXPECT_EQ(staging[n - 1], static_cast<int>(n) + 5);
  cudaPointerAttributes attributes{};
  GPUGUARD_CUDA_TRY(cudaPointerGetAttributes(&attributes, staging.data()));
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
}

TEST_F(pinned_gpu, managed_memory_visible_from_host_and_kernel) {
  constexpr std::size_t n = 4096;
  gpuguard::managed_memory_resource managed;
  const gpuguard::stream stream;
  gpuguard::device_array<int> array(n, stream, managed);
  std::fill(array.data(), array.data() + n, 41);  // managed memory is host-accessible
  launch_add_one(array.data(), n, stream.get());
  stream.synchronize();
  EXPECT_EQ(array.data()[0], 42);
  EXPECT_EQ(array.data()[n - 1], 42);
  cudaPointerAttributes attributes{};
  GPUGUARD_CUDA_TRY(cudaPointerGetAttributes(&attributes, array.data()));
  EXPECT_EQ(attributes.type, cudaMemoryTypeManaged);
}

class stream_event_gpu : public gpu_test {};

TEST_F(stream_event_gpu, event_measures_elapsed_time_and_moves) {
  const gpuguard::stream stream;
  gpuguard::event start;
  gpuguard::event stop;
  gpuguard::device_array<int> array(1 << 24, stream);
  start.record(stream);
  for (int i = 0; i < 10; ++i) { launch_add_one(array.data(), array.size(), stream.get()); }
  stop.record(stream);
  gpuguard::event moved(std::move(stop));
  moved.synchronize();
  EXPECT_TRUE(moved.ready());
  EXPECT_GT(gpuguard::elapsed_time(start, moved).count(), 0.0F);
}

TEST_F(stream_event_gpu, owned_stream_is_non_blocking_and_destroyed_on_its_device) {
  gpuguard::stream a;
  unsigned int flags = 0;
  GPUGUARD_CUDA_TRY(cudaStreamGetFlags(a.get(), &flags));
  EXPECT_EQ(flags & cudaStreamNonBlocking, cudaStreamNonBlocking);
  const unsigned long errors = gpuguard::teardown_error_count();
  gpuguard::stream b(std::move(a));
  b = gpuguard::stream();
  EXPECT_EQ(gpuguard::teardown_error_count(), errors);
}

}  // namespace
