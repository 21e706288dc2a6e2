/// @file
/// @brief What `gpuguard run` says when the job is over: the one summary line on stderr and the
///        JSON report (`--report`, schema `gpuguard.run` version 1, documented in docs/run.md).
#pragma once

#include "run/run_supervisor.hpp"

#include <string>

namespace gpuguard::cli {

/// "[gpuguard run] python3 exited with status 0 after 12.3 s; no process outlived it; no process
/// of it holds a GPU", with the leftovers and the device holders when there were any. Ends in '\n'.
std::string run_summary_line(const run_config& config, const run_outcome& outcome);

/// The report as one JSON document (ends in '\n').
std::string run_report_json(const run_config& config, const run_outcome& outcome);

}  // namespace gpuguard::cli
