// What tracking offers the rest of the compiled core. Internal to libgpuguard.
#pragma once

#include <gpuguard/options.hpp>

namespace gpuguard::detail {

/// The options that tracking (enable_tracking) or the ledger's reporting (enable_ledger_reporting)
/// was turned on with, into `out`; false, and `out` unchanged, when neither is on.
bool reporting_options(options& out);

}  // namespace gpuguard::detail
