/// @file
/// @brief NVML for `gpuguard doctor`, loaded at run time with dlopen: per-device memory and the
/// memory NVML attributes to each process. No link-time dependency and no nvml.h: the few
/// prototypes and structs used are declared in doctor_nvml.cpp from the NVML API reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace gpuguard::cli::doctor {

/// One process on one device, as NVML lists it (compute and graphics processes, merged).
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

/// The loaded and initialised library. Move-only; the destructor shuts NVML down and unloads it.
class nvml_session {
 public:
  /// Loads `library` (a name for the dynamic loader or a path) and calls nvmlInit_v2. Never throws
  /// for a missing or failing library: available() is then false and error() says why.
  static nvml_session open(const std::string& library);

  nvml_session() = default;
  nvml_session(nvml_session&& other) noexcept;
  nvml_session& operator=(nvml_session&& other) noexcept;
  nvml_session(const nvml_session&) = delete;
  nvml_session& operator=(const nvml_session&) = delete;
  ~nvml_session();

  [[nodiscard]] bool available() const noexcept { return handle_ != nullptr; }
  /// Why NVML is not available ("" when it is).
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  /// The driver's version, "" when unknown.
  [[nodiscard]] const std::string& driver_version() const noexcept { return driver_version_; }

  /// Reads every device now. Errors for one device are recorded in its `error`; an error for the
  /// device count is returned as one device-less result with `*error` set.
  std::vector<nvml_device> sample(std::string* error) const;

 private:
  void close() noexcept;

  void* handle_ = nullptr;  // dlopen handle, non-null only when nvmlInit succeeded
  std::string error_;
  std::string driver_version_;
};

static_assert(!std::is_copy_constructible_v<nvml_session> && std::is_nothrow_move_constructible_v<nvml_session> &&
                  std::is_nothrow_move_assignable_v<nvml_session>,
              "nvml_session owns the library: move-only");

}  // namespace gpuguard::cli::doctor
