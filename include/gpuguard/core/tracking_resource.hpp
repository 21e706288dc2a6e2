/**
 * @file tracking_resource.hpp
 * @brief A resource adaptor that records every allocation and free of its upstream in the ledger.
 *        Needs the compiled core (`gpuguard::gpuguard`).
 */
#pragma once

#include <gpuguard/config.hpp>
#include <gpuguard/memory_resource.hpp>

#include <cstddef>

namespace gpuguard {

/**
 * Wraps any resource (plain, stream-ordered, pinned, managed, host) and records into the ledger.
 * Frees go to the upstream with the size and on the device that were recorded, so a free with
 * the wrong size or while another device is current is reported and still done correctly. A
 * double free or a pointer the ledger never saw is reported and *not* passed on: passing it would
 * corrupt the upstream.
 */
class GPUGUARD_API tracking_resource final : public memory_resource {
 public:
  /// `device` is the device this resource's memory belongs to (host_device_id for host and
  /// pinned memory). The upstream must outlive this resource.
  tracking_resource(memory_resource& upstream, int device) noexcept;

  [[nodiscard]] memory_resource& upstream() const noexcept { return *upstream_; }
  [[nodiscard]] int device() const noexcept { return device_; }

 private:
  void* do_allocate(std::size_t bytes, stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, stream_view stream) noexcept override;
  [[nodiscard]] memory_kind do_kind() const noexcept override;
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override;

  memory_resource* upstream_;
  int device_;
  memory_kind kind_;
};

}  // namespace gpuguard
