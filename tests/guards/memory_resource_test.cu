// One typed suite over every memory_resource, in the manner of RMM's resource tests: the plain,
// stream-ordered, pinned, managed and host resources, the tracking resource over each, and the
// caching pool over cudaMalloc, cudaMallocAsync and host memory (and tracked over the first and
// the last). What
// every resource promises (memory_resource.hpp): size 0 gives nullptr, nullptr frees nothing,
// memory is aligned like cudaMalloc's and usable where its kind says, is_equal is by type, and
// the tracking resource's ledger figures move by exactly what was asked. Host resources run
// everywhere; the CUDA ones skip with the reason where no GPU is usable (and fail under
// GPUGUARD_REQUIRE_GPU=1, as every GPU test does).
#include "gpu_test.hpp"

#include <gpuguard/gpuguard.hpp>
#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/pool_memory_resource.hpp>
#include <gpuguard/core/tracking_resource.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace {

using gpuguard::memory_kind;

// Each case names its resource, whether it needs a GPU, and the kind its memory is.
template <class Resource, bool Gpu, memory_kind Kind>
struct plain_case {
  static constexpr bool needs_gpu = Gpu;
  static constexpr memory_kind kind = Kind;
  static constexpr bool tracked = false;
  static constexpr bool pooled = false;
  struct holder {
    Resource resource;
    gpuguard::memory_resource& get() { return resource; }
  };
};

template <class Upstream, bool Gpu, memory_kind Kind>
struct tracked_case {
  static constexpr bool needs_gpu = Gpu;
  static constexpr memory_kind kind = Kind;
  static constexpr bool tracked = true;
  static constexpr bool pooled = false;
  struct holder {
    Upstream upstream;
    gpuguard::tracking_resource resource{
        upstream, Kind == memory_kind::device || Kind == memory_kind::managed ? gpuguard::current_device()
                                                                               : gpuguard::host_device_id};
    gpuguard::memory_resource& get() { return resource; }
  };
};

// The caching pool over `Upstream`, tracked or not.
template <class Upstream, bool Gpu, memory_kind Kind, bool Tracked>
struct pool_case {
  static constexpr bool needs_gpu = Gpu;
  static constexpr memory_kind kind = Kind;
  static constexpr bool tracked = Tracked;
  static constexpr bool pooled = true;
  static int device() { return Kind == memory_kind::device ? gpuguard::current_device() : gpuguard::host_device_id; }
  struct holder {
    Upstream upstream;
    gpuguard::pool_memory_resource pool{upstream, device()};
    gpuguard::tracking_resource tracked_pool{pool, device()};
    gpuguard::memory_resource& get() {
      return Tracked ? static_cast<gpuguard::memory_resource&>(tracked_pool) : static_cast<gpuguard::memory_resource&>(pool);
    }
  };
};

}  // namespace

// The cases, as named types so that test names say which resource (memory_resource_suite.X<resource_case::cuda>).
namespace resource_case {
struct cuda : plain_case<gpuguard::cuda_memory_resource, true, memory_kind::device> {};
struct cuda_async : plain_case<gpuguard::cuda_async_memory_resource, true, memory_kind::device> {};
struct pinned : plain_case<gpuguard::pinned_memory_resource, true, memory_kind::pinned_host> {};
struct managed : plain_case<gpuguard::managed_memory_resource, true, memory_kind::managed> {};
struct host : plain_case<gpuguard::host_memory_resource, false, memory_kind::host> {};
struct tracked_cuda : tracked_case<gpuguard::cuda_memory_resource, true, memory_kind::device> {};
struct tracked_cuda_async : tracked_case<gpuguard::cuda_async_memory_resource, true, memory_kind::device> {};
struct tracked_pinned : tracked_case<gpuguard::pinned_memory_resource, true, memory_kind::pinned_host> {};
struct tracked_managed : tracked_case<gpuguard::managed_memory_resource, true, memory_kind::managed> {};
struct tracked_host : tracked_case<gpuguard::host_memory_resource, false, memory_kind::host> {};
struct pool_cuda : pool_case<gpuguard::cuda_memory_resource, true, memory_kind::device, false> {};
struct pool_cuda_async : pool_case<gpuguard::cuda_async_memory_resource, true, memory_kind::device, false> {};
struct pool_host : pool_case<gpuguard::host_memory_resource, false, memory_kind::host, false> {};
struct tracked_pool_cuda : pool_case<gpuguard::cuda_memory_resource, true, memory_kind::device, true> {};
struct tracked_pool_host : pool_case<gpuguard::host_memory_resource, false, memory_kind::host, true> {};
}  // namespace resource_case

namespace {

template <class Case>
class memory_resource_suite : public gpuguard_test::gpu_test {
 protected:
  void SetUp() override {
    if (Case::needs_gpu) {
      gpu_test::SetUp();
      if (IsSkipped() || HasFailure()) { return; }
    }
    holder_ = std::make_unique<typename Case::holder>();
  }
  void TearDown() override {
    if (holder_ != nullptr && Case::needs_gpu) { GPUGUARD_CUDA_TRY(cudaDeviceSynchronize()); }
    holder_.reset();
  }
  gpuguard::memory_resource& resource() { return holder_->get(); }
  // The ledger's figure for the device the resource records under.
  static std::size_t ledger_bytes() {
    const int device = Case::kind == memory_kind::device || Case::kind == memory_kind::managed
                           ? gpuguard::current_device()
                           : gpuguard::host_device_id;
    return gpuguard::device_counters(device).current_bytes;
  }

 private:
  std::unique_ptr<typename Case::holder> holder_;
};

using every_resource =
    testing::Types<resource_case::cuda, resource_case::cuda_async, resource_case::pinned, resource_case::managed,
                   resource_case::host, resource_case::tracked_cuda, resource_case::tracked_cuda_async,
                   resource_case::tracked_pinned, resource_case::tracked_managed, resource_case::tracked_host,
                   resource_case::pool_cuda, resource_case::pool_cuda_async, resource_case::pool_host,
                   resource_case::tracked_pool_cuda, resource_case::tracked_pool_host>;
TYPED_TEST_SUITE(memory_resource_suite, every_resource);

TYPED_TEST(memory_resource_suite, size_zero_is_nullptr_and_freeing_nullptr_does_nothing) {
  gpuguard::memory_resource& r = this->resource();
  const std::size_t before = TestFixture::ledger_bytes();
  void* ptr = r.allocate(0);
  EXPECT_EQ(ptr, nullptr);
  r.deallocate(nullptr, 0);
  r.deallocate(nullptr, 128);
  EXPECT_EQ(TestFixture::ledger_bytes(), before) << "nothing reached the ledger";
}

TYPED_TEST(memory_resource_suite, reports_its_kind_and_equals_itself_and_its_own_type_only) {
  gpuguard::memory_resource& r = this->resource();
  EXPECT_EQ(r.kind(), TypeParam::kind);
  EXPECT_TRUE(r.is_equal(r));
  gpuguard::host_memory_resource other_host;
  gpuguard::cuda_memory_resource other_cuda;
  // A resource of another type cannot free this one's memory.
  gpuguard::memory_resource& different = TypeParam::kind == memory_kind::host ? static_cast<gpuguard::memory_resource&>(other_cuda)
                                                                              : static_cast<gpuguard::memory_resource&>(other_host);
  EXPECT_FALSE(r.is_equal(different));
  if (TypeParam::pooled) {
    typename TypeParam::holder twin;
    EXPECT_FALSE(r.is_equal(twin.get())) << "a pool frees only what it handed out";
  } else if (!TypeParam::tracked) {
    typename TypeParam::holder twin;
    if (TypeParam::kind == memory_kind::host) {
      EXPECT_FALSE(r.is_equal(twin.get())) << "a host resource counts its own bytes against its own capacity";
    } else {
      EXPECT_TRUE(r.is_equal(twin.get())) << "stateless CUDA resources of one type are interchangeable";
    }
  }
}

class sizes {
 public:
  static std::vector<std::size_t> all() { return {1, 255, 256, 257, 4096, 1 << 20, (8 << 20) + 3}; }
};

TYPED_TEST(memory_resource_suite, every_size_is_aligned_usable_and_given_back_exactly) {
  gpuguard::memory_resource& r = this->resource();
  const std::size_t before = TestFixture::ledger_bytes();
  for (const std::size_t bytes : sizes::all()) {
    SCOPED_TRACE(bytes);
    void* ptr = r.allocate(bytes);
    ASSERT_NE(ptr, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ptr) % 256, 0U) << "aligned like cudaMalloc's memory";
    if (TypeParam::tracked) { EXPECT_EQ(TestFixture::ledger_bytes(), before + bytes); }
    // Write a pattern where the memory lives and read it back through the host.
    std::vector<unsigned char> back(bytes, 0);
    if (TypeParam::kind == memory_kind::host) {
      std::memset(ptr, 0x5a, bytes);
      std::memcpy(back.data(), ptr, bytes);
    } else if (TypeParam::kind == memory_kind::pinned_host) {
      std::memset(ptr, 0x5a, bytes);  // host memory that CUDA knows: copied by CUDA
      GPUGUARD_CUDA_TRY(cudaMemcpy(back.data(), ptr, bytes, cudaMemcpyDefault));
    } else {
      GPUGUARD_CUDA_TRY(cudaMemset(ptr, 0x5a, bytes));
      GPUGUARD_CUDA_TRY(cudaMemcpy(back.data(), ptr, bytes, cudaMemcpyDefault));
    }
    EXPECT_EQ(back.front(), 0x5a);
    EXPECT_EQ(back.back(), 0x5a);
    r.deallocate(ptr, bytes);
    if (TypeParam::tracked) { EXPECT_EQ(TestFixture::ledger_bytes(), before); }
  }
  EXPECT_EQ(TestFixture::ledger_bytes(), before);
}

TYPED_TEST(memory_resource_suite, many_live_blocks_are_distinct_and_all_come_back) {
  gpuguard::memory_resource& r = this->resource();
  const std::size_t before = TestFixture::ledger_bytes();
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) { blocks.push_back(r.allocate(1024 + static_cast<std::size_t>(i))); }
  std::vector<void*> sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "no address handed out twice";
  if (TypeParam::tracked) {
    std::size_t total = 0;
    for (int i = 0; i < 64; ++i) { total += 1024 + static_cast<std::size_t>(i); }
    EXPECT_EQ(TestFixture::ledger_bytes(), before + total);
  }
  for (int i = 0; i < 64; ++i) { r.deallocate(blocks[static_cast<std::size_t>(i)], 1024 + static_cast<std::size_t>(i)); }
  EXPECT_EQ(TestFixture::ledger_bytes(), before);
}

}  // namespace
