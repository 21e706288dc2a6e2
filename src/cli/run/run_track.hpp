/// @file
/// @brief `gpuguard run --track`: where the tracked processes leave their records, and the
/// supervisor's summary of them (one line per process that used CUDA; docs/run.md).
#pragma once
#include <cstdio>
#include <string>

namespace gpuguard::cli {

/// A new private folder for the records (GPUGUARD_TRACK_DIR), or "" if none could be made (then
/// each process still reports on its own stderr, and the summary is left out).
std::string make_track_dir();

/// Writes one line per record in `dir` (each a process that used CUDA, in pid order) and a total,
/// then removes the folder. A record that cannot be read is named, never fatal.
void write_track_summary(const std::string& dir, std::FILE* out);

}  // namespace gpuguard::cli
