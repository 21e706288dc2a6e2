// Owners over the resource interface, on host memory: sizes, moves, adoption, copies, overrides.
#include <gpuguard/current_resource.hpp>
#include <gpuguard/device_array.hpp>
#include <gpuguard/device_buffer.hpp>
#include <gpuguard/host_memory_resource.hpp>
#include <gpuguard/pinned_buffer.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

/// Host memory that also records what the owners asked of it.
class recording_resource final : public gpuguard::memory_resource {
 public:
  int allocations = 0;
  int deallocations = 0;
  std::size_t last_freed_bytes = 0;
  gpuguard::stream_view last_free_stream{};
  gpuguard::host_memory_resource upstream;

 private:
  void* do_allocate(std::size_t bytes, gpuguard::stream_view stream) override {
    ++allocations;
    return upstream.allocate(bytes, stream);
  }
  void do_deallocate(void* ptr, std::size_t bytes, gpuguard::stream_view stream) noexcept override {
    ++deallocations;
    last_freed_bytes = bytes;
    last_free_stream = stream;
    upstream.deallocate(ptr, bytes, stream);
  }
  [[nodiscard]] gpuguard::memory_kind do_kind() const noexcept override {
    return gpuguard::memory_kind::host;
  }
};

// Host resources never use the stream: a made-up handle shows that owners pass theirs through.
cudaStream_t fake_stream(std::uintptr_t id) {
  return reinterpret_cast<cudaStream_t>(id);  // NOLINT(performance-no-int-to-ptr)
}

class buffer_sizes : public testing::TestWithParam<std::size_t> {};

TEST_P(buffer_sizes, allocates_aligned_remembers_and_frees_on_its_stream) {
  const std::size_t bytes = GetParam();
  recording_resource resource;
  {
    const gpuguard::device_buffer buffer(bytes, fake_stream(0x40), resource);
    EXPECT_EQ(buffer.size(), bytes);
    EXPECT_EQ(buffer.empty(), bytes == 0);
    EXPECT_EQ(buffer.device(), gpuguard::host_device_id);
    EXPECT_EQ(buffer.stream(), gpuguard::stream_view(fake_stream(0x40)));
    EXPECT_EQ(buffer.resource(), &resource);
    EXPECT_EQ(buffer.data() == nullptr, bytes == 0);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.data()) % gpuguard::host_memory_resource::alignment, 0U);
    EXPECT_EQ(resource.upstream.used(), bytes);
  }
  EXPECT_EQ(resource.upstream.used(), 0U);
  EXPECT_EQ(resource.allocations, bytes == 0 ? 0 : 1);
  EXPECT_EQ(resource.deallocations, bytes == 0 ? 0 : 1);
  if (bytes != 0) {
    EXPECT_EQ(resource.last_freed_bytes, bytes);
    EXPECT_EQ(resource.last_free_stream, gpuguard::stream_view(fake_stream(0x40)));
  }
}

TEST_P(buffer_sizes, copies_round_trip) {
  const std::size_t bytes = GetParam();
  gpuguard::host_memory_resource resource;
  gpuguard::device_buffer buffer(bytes, {}, resource);
  std::vector<unsigned char> in(bytes);
  std::iota(in.begin(), in.end(), static_cast<unsigned char>(7));
  buffer.copy_from_host(in.data(), in.size());
  std::vector<unsigned char> out(bytes, 0);
  buffer.copy_to_host(out.data(), out.size());
  EXPECT_EQ(in, out);
}

INSTANTIATE_TEST_SUITE_P(sizes, buffer_sizes,
                         testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{255},
                                         std::size_t{256}, std::size_t{4097}, std::size_t{1} << 20));

TEST(device_buffer, move_construction_transfers_ownership) {
  gpuguard::host_memory_resource resource;
  gpuguard::device_buffer a(1000, {}, resource);
  const void* ptr = a.data();
  gpuguard::device_buffer b(std::move(a));
  EXPECT_EQ(b.data(), ptr);
  EXPECT_EQ(b.size(), 1000U);
  // The moved-from state is the point here.
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
  EXPECT_EQ(a.size(), 0U);       // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
  EXPECT_EQ(resource.used(), 1000U);
}

TEST(device_buffer, move_assignment_frees_the_target_old_memory_exactly_once) {
  recording_resource resource;
  {
    gpuguard::device_buffer a(100, {}, resource);
    gpuguard::device_buffer b(300, {}, resource);
    b = std::move(a);
    EXPECT_EQ(b.size(), 100U);
    EXPECT_EQ(resource.upstream.used(), 400U);  // the 300 bytes now belong to `a`
  }
  EXPECT_EQ(resource.upstream.used(), 0U);
  EXPECT_EQ(resource.deallocations, 2);
}

TEST(device_buffer, self_move_assignment_keeps_the_memory) {
  gpuguard::host_memory_resource resource;
  gpuguard::device_buffer a(64, {}, resource);
  const void* ptr = a.data();
  gpuguard::device_buffer& alias = a;
  a = std::move(alias);
  EXPECT_EQ(a.data(), ptr);
  EXPECT_EQ(resource.used(), 64U);
}

TEST(device_buffer, release_and_adopt_hand_ownership_back_and_forth) {
  recording_resource resource;
  gpuguard::device_buffer a(512, fake_stream(0x10), resource);
  void* raw = a.release();
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0U);
  EXPECT_EQ(resource.upstream.used(), 512U);
  {
    auto b = gpuguard::device_buffer::adopt(raw, 512, fake_stream(0x10), resource,
                                            gpuguard::host_device_id);
    EXPECT_EQ(b.data(), raw);
  }
  EXPECT_EQ(resource.upstream.used(), 0U);
  EXPECT_EQ(resource.deallocations, 1);
}

TEST(device_buffer, copy_past_the_end_is_an_error_that_changes_nothing) {
  gpuguard::host_memory_resource resource;
  gpuguard::device_buffer buffer(16, {}, resource);
  const std::vector<unsigned char> in(16, 1);
  buffer.copy_from_host(in.data(), in.size());
  const std::vector<unsigned char> big(17, 2);
  try {
    buffer.copy_from_host(big.data(), big.size());
    FAIL() << "no exception";
  } catch (const std::out_of_range& error) {
    EXPECT_STREQ(error.what(),
                 "gpuguard::device_buffer::copy_from_host: 17 bytes at offset 0 exceed the "
                 "buffer's 16 bytes");
  }
  EXPECT_THROW(buffer.copy_to_host(nullptr, 1, 16), std::out_of_range);
  EXPECT_THROW(buffer.copy_to_host(nullptr, 1, SIZE_MAX), std::out_of_range);
  std::vector<unsigned char> out(16, 0);
  buffer.copy_to_host(out.data(), out.size());
  EXPECT_EQ(out, in);
}

TEST(host_memory_resource, capacity_raises_out_of_memory_and_keeps_accounting) {
  gpuguard::host_memory_resource resource(1000);
  gpuguard::device_buffer kept(600, {}, resource);
  try {
    gpuguard::device_buffer too_much(500, {}, resource);
    FAIL() << "no exception";
  } catch (const gpuguard::out_of_memory& error) {
    EXPECT_STREQ(error.what(),
                 "host_memory_resource: allocate(500 bytes) on host: over capacity (1000 bytes, "
                 "600 in use)");
  }
  EXPECT_EQ(resource.used(), 600U);
  const gpuguard::device_buffer fits(400, {}, resource);
  EXPECT_EQ(resource.used(), 1000U);
}

TEST(device_array, typed_round_trip_and_element_count) {
  gpuguard::host_memory_resource resource;
  const std::vector<double> host{1.0, 2.5, -3.0, 4.25};
  const gpuguard::device_array<double> array(host, {}, resource);
  EXPECT_EQ(array.size(), 4U);
  EXPECT_EQ(array.size_bytes(), 4 * sizeof(double));
  EXPECT_EQ(array.to_host(), host);
}

TEST(device_array, empty_array_allocates_nothing) {
  gpuguard::host_memory_resource resource;
  const gpuguard::device_array<int> array(0, {}, resource);
  EXPECT_TRUE(array.empty());
  EXPECT_EQ(array.data(), nullptr);
  EXPECT_TRUE(array.to_host().empty());
}

TEST(device_array, element_count_overflow_is_a_length_error) {
  gpuguard::host_memory_resource resource;
  EXPECT_THROW(gpuguard::device_array<double>(SIZE_MAX / 2, {}, resource), std::length_error);
  EXPECT_EQ(resource.used(), 0U);
}

TEST(pinned_buffer, host_access_through_any_resource) {
  gpuguard::host_memory_resource resource;
  gpuguard::pinned_buffer<int> pinned(8, resource);
  std::iota(pinned.begin(), pinned.end(), 10);
  EXPECT_EQ(pinned[0], 10);
  EXPECT_EQ(pinned[7], 17);
  EXPECT_EQ(pinned.size(), 8U);
  EXPECT_EQ(resource.used(), 8 * sizeof(int));
}

TEST(current_resource, scoped_override_nests_and_restores) {
  gpuguard::host_memory_resource outer;
  gpuguard::host_memory_resource inner;
  gpuguard::memory_resource* const original = gpuguard::get_current_resource(3);
  {
    const gpuguard::scoped_current_resource a(outer, 3);
    EXPECT_EQ(gpuguard::get_current_resource(3), &outer);
    {
      const gpuguard::scoped_current_resource b(inner, 3);
      EXPECT_EQ(gpuguard::get_current_resource(3), &inner);
      EXPECT_EQ(gpuguard::get_current_resource(2), original) << "other devices are untouched";
    }
    EXPECT_EQ(gpuguard::get_current_resource(3), &outer);
  }
  EXPECT_EQ(gpuguard::get_current_resource(3), original);
}

TEST(current_resource, default_is_cuda_malloc_and_host_fallback_is_unset) {
  gpuguard::memory_resource* const resource = gpuguard::get_current_resource(0);
  ASSERT_NE(resource, nullptr);
  EXPECT_TRUE(resource->is_equal(gpuguard::cuda_memory_resource{}));
  EXPECT_EQ(resource->kind(), gpuguard::memory_kind::device);
  EXPECT_EQ(gpuguard::get_current_resource(gpuguard::host_device_id), nullptr);
}

TEST(current_resource, pinned_override_restores) {
  gpuguard::host_memory_resource host;
  EXPECT_EQ(gpuguard::get_current_pinned_resource()->kind(), gpuguard::memory_kind::pinned_host);
  {
    const gpuguard::scoped_current_resource pinned(host, gpuguard::scoped_current_resource::pinned);
    EXPECT_EQ(gpuguard::get_current_pinned_resource(), &host);
    gpuguard::pinned_buffer<float> buffer(4);
    EXPECT_EQ(host.used(), 4 * sizeof(float));
  }
  EXPECT_EQ(gpuguard::get_current_pinned_resource()->kind(), gpuguard::memory_kind::pinned_host);
}

TEST(current_resource, device_ids_out_of_range_are_rejected) {
  gpuguard::host_memory_resource host;
  EXPECT_THROW(static_cast<void>(gpuguard::get_current_resource(gpuguard::max_devices)),
               std::out_of_range);
  EXPECT_THROW(static_cast<void>(gpuguard::get_current_resource(-7)), std::out_of_range);
  EXPECT_THROW(gpuguard::scoped_current_resource(host, 1000), std::out_of_range);
}

TEST(resources, kinds_and_equality) {
  const gpuguard::cuda_memory_resource plain;
  const gpuguard::cuda_async_memory_resource async;
  const gpuguard::pinned_memory_resource pinned;
  const gpuguard::managed_memory_resource managed;
  const gpuguard::host_memory_resource host;
  EXPECT_EQ(plain.kind(), gpuguard::memory_kind::device);
  EXPECT_EQ(async.kind(), gpuguard::memory_kind::device);
  EXPECT_EQ(pinned.kind(), gpuguard::memory_kind::pinned_host);
  EXPECT_EQ(managed.kind(), gpuguard::memory_kind::managed);
  EXPECT_EQ(host.kind(), gpuguard::memory_kind::host);
  EXPECT_TRUE(plain.is_equal(gpuguard::cuda_memory_resource{}));
  EXPECT_FALSE(plain.is_equal(async));
  EXPECT_FALSE(host.is_equal(gpuguard::host_memory_resource{})) << "host pools account separately";
  EXPECT_TRUE(host.is_equal(host));
  EXPECT_STREQ(gpuguard::to_string(gpuguard::memory_kind::pinned_host), "pinned_host");
}

}  // namespace
