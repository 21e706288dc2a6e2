// The bug both adapter tests plant (a tensor kept past its step) and how they judge where the leak
// report says it came from: a live site must begin with the function that kept it.
#pragma once

#include <gpuguard/core/ledger.hpp>
#include <gpuguard/core/tracking.hpp>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstddef>
#include <string>
#include <vector>

namespace gpuguard_test {

inline std::vector<torch::Tensor>& kept_by_mistake() {
  static std::vector<torch::Tensor> kept;
  return kept;
}

__attribute__((noinline)) inline void remember_activations_by_mistake(const torch::Tensor& x) {
  kept_by_mistake().push_back(x * 2);  // the bug: a reference kept past its step
}

/// Succeeds when a live site of at least `min_bytes` has `function` in its first frame; the
/// failure lists every site's frames.
inline testing::AssertionResult a_site_begins_with(const std::string& function, std::size_t min_bytes) {
  std::string seen;
  for (const gpuguard::leak_site& site : gpuguard::collect_leaks().sites) {
    if (site.bytes >= min_bytes && !site.frames.empty() && site.frames.front().function.find(function) != std::string::npos) {
      return testing::AssertionSuccess();
    }
    seen += "site of " + std::to_string(site.bytes) + " bytes:\n";
    for (const gpuguard::frame_info& frame : site.frames) {
      seen += "  " + frame.function + " " + frame.file + ":" + std::to_string(frame.line) + "\n";
    }
  }
  return testing::AssertionFailure() << "no live site of " << min_bytes << " bytes or more begins with " << function
                                     << "; the sites:\n" << seen;
}

}  // namespace gpuguard_test
