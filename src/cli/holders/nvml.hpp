/// @file
/// @brief NVML, loaded at run time with dlopen, for `gpuguard doctor` (per-device memory and the
/// memory NVML attributes to each process) and `gpuguard run` (the memory each process holds, for
/// the residue check). No link-time dependency and no nvml.h: the few prototypes and structs used
/// are declared in nvml.cpp from the NVML API reference. A machine without the driver gets a note,
/// never a failure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <sys/types.h>

namespace gpuguard::cli {

/// One process on one device, as NVML lists it (compute, graphics and MPS processes, merged).
struct nvml_process {
  unsigned pid = 0;                   ///< a PID of the namespace the driver sees: the host's
  std::optional<std::uint64_t> bytes; ///< nullopt when NVML does not know (NVML_VALUE_NOT_AVAILABLE)
};

/// One device at one moment.
struct nvml_device {
  unsigned index = 0;
  std::string name;
  std::optional<unsigned> minor;        ///< N of /dev/nvidiaN
  std::optional<std::uint64_t> total;   ///< memory figures, bytes
  std::optional<std::uint64_t> used;    ///< excluding the driver's reservation when NVML reports it
  std::optional<std::uint64_t> reserved;
  std::vector<nvml_process> processes;
  std::string error;                    ///< what could not be read, "" when everything was
};

/// Memory NVML attributes to one process on one device: what a holder record (holder.hpp) keeps.
struct gpu_memory_use {
  unsigned device = 0;                 ///< NVML's device index
  std::optional<std::uint64_t> bytes;  ///< nullopt when NVML cannot say (containers, MIG, old drivers)
};

/// The NVML library to load: GPUGUARD_NVML_LIBRARY when set and not empty, else libnvidia-ml.so.1.
std::string nvml_library_name();

/// Why a session is not available.
enum class nvml_failure {
  none,             ///< it is
  not_loaded,       ///< the dynamic loader could not load the library
  missing_symbols,  ///< the library lacks nvmlInit_v2 (or nvmlInit), or one of `required`
  init_failed,      ///< nvmlInit_v2 returned an error
};

/// The loaded and initialised library. Move-only; the destructor shuts NVML down and unloads it.
class nvml_session {
 public:
  /// Loads `library` (a name for the dynamic loader or a path) and calls nvmlInit_v2. Never throws
  /// for a missing or failing library: available() is then false and error() says why. Each entry
  /// of `required` names entry points of which the library must have at least one (checked before
  /// nvmlInit_v2 is called, which must then be present itself, without falling back to nvmlInit).
  static nvml_session open(const std::string& library,
                           const std::vector<std::vector<const char*>>& required = {});

  nvml_session() = default;
  nvml_session(nvml_session&& other) noexcept;
  nvml_session& operator=(nvml_session&& other) noexcept;
  nvml_session(const nvml_session&) = delete;
  nvml_session& operator=(const nvml_session&) = delete;
  ~nvml_session();

  [[nodiscard]] bool available() const noexcept { return handle_ != nullptr; }
  /// Why NVML is not available ("" when it is).
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  /// Why NVML is not available, as a kind.
  [[nodiscard]] nvml_failure failure() const noexcept { return failure_; }
  /// The bare cause of the failure: the loader's message (not_loaded) or NVML's text for the
  /// status of nvmlInit_v2, its number when NVML has no text (init_failed); "" otherwise.
  [[nodiscard]] const std::string& failure_detail() const noexcept { return failure_detail_; }
  /// The driver's version, "" when unknown.
  [[nodiscard]] const std::string& driver_version() const noexcept { return driver_version_; }

  /// Reads every device now: its memory and its compute, graphics and MPS processes (the _v3
  /// queries, _v2 where those are missing); a process in more than one list of a device is one
  /// entry, with the larger figure. Errors for one device are recorded in its `error`; an error for
  /// the device count leaves the result empty with `*error` set. Both commands read NVML here.
  std::vector<nvml_device> sample(std::string* error) const;

 private:
  void close() noexcept;

  void* handle_ = nullptr;  // dlopen handle, non-null only when nvmlInit succeeded
  std::string error_;
  nvml_failure failure_ = nvml_failure::none;
  std::string failure_detail_;
  std::string driver_version_;
};

static_assert(!std::is_copy_constructible_v<nvml_session> && std::is_nothrow_move_constructible_v<nvml_session> &&
                  std::is_nothrow_move_assignable_v<nvml_session>,
              "nvml_session owns the library: move-only");

/// Loads NVML (nvml_library_name()) as `gpuguard run` needs it: the process queries are checked
/// before NVML is initialised. When it is not available, `*note` says why in run's words ("NVML not
/// available (...)"). Takes from milliseconds to a second (NVML's initialisation). Never throws
/// but std::bad_alloc.
nvml_session open_nvml_for_run(std::string* note);

/// The devices' memory and processes from a sample, with what went wrong in `*note` ("; "-joined
/// per device errors): the one reading `gpuguard run` makes (residue check, --require-clean).
std::vector<nvml_device> sample_for_run(const nvml_session& nvml, std::string* note);

}  // namespace gpuguard::cli
