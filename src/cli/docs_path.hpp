// Where a command's --help says gpuguard's docs are: installed, share/doc/gpuguard beside the
// program's bin/ (found from the program's own path, so any install prefix works); for a program
// run from its build tree, the source tree's docs/.
#pragma once

#include "util/program_path.hpp"

#include <filesystem>
#include <string>
#include <system_error>

// The installed docs relative to the installed program (CMake passes its own install layout).
#ifndef GPUGUARD_DOCDIR_FROM_BINDIR
#define GPUGUARD_DOCDIR_FROM_BINDIR "../share/doc/gpuguard"
#endif

namespace gpuguard::cli {

/// The directory that holds run.md, doctor.md and the rest: the first of the installed docs and
/// the source tree's that exists, else a description of where an install puts them.
inline std::string docs_dir() {
  namespace fs = std::filesystem;
  std::error_code error;
  const std::string program = detail::program_path();
  if (!program.empty()) {
    const fs::path installed = fs::weakly_canonical(fs::path(program).parent_path() / GPUGUARD_DOCDIR_FROM_BINDIR, error);
    if (!error && fs::is_directory(installed, error)) { return installed.string(); }
  }
#ifdef GPUGUARD_SOURCE_DOCDIR
  if (fs::is_directory(GPUGUARD_SOURCE_DOCDIR, error)) { return GPUGUARD_SOURCE_DOCDIR; }
#endif
  return "share/doc/gpuguard under gpuguard's install prefix";
}

/// "Docs: DIR/FILE", the last line of a command's --help (with the blank line before it).
inline std::string docs_line(const char* file) { return "\nDocs: " + docs_dir() + "/" + file; }

}  // namespace gpuguard::cli
