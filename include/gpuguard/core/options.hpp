/**
 * @file options.hpp
 * @brief gpuguard's run-time options: the C++ struct, and `GPUGUARD_OPTIONS="key=value:..."`
 *        in the style of `ASAN_OPTIONS`. Every key is documented in docs/options.md.
 */
#pragma once

#include <gpuguard/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpuguard {

/// When allocation-site stacks are captured.
enum class stack_mode {
  off,      ///< never: every allocation is one "unknown" site per tag
  sampled,  ///< one allocation in `stack_sample`
  all,      ///< every allocation (the default)
};

/// Which Python frames an allocation records (docs/python.md, "Sites").
enum class python_frames_mode {
  off,   ///< none
  user,  ///< the innermost frames outside gpuguard's and PyTorch's packages
  all,   ///< the innermost frames outside gpuguard's package
};

/// Which memory the tracking resources sit on.
enum class device_mode {
  automatic,  ///< `cuda` when a GPU is usable, `host` when not (and it says so)
  cuda,       ///< cudaMalloc / cudaFree
  async,      ///< cudaMallocAsync / cudaFreeAsync on the device's default pool
  host,       ///< host memory (`host_memory_resource`), for machines without a GPU
};

/// What `gpuguard::torch::enable()` (the LibTorch adapter, docs/torch.md) does.
enum class torch_mode {
  observe,  ///< attach to PyTorch's native CUDA caching allocator and feed the ledger
  swap_in,  ///< replace PyTorch's CUDA allocator with gpuguard's tracking allocator
  off,      ///< nothing
};

/// What the LibTorch swap-in allocator takes its memory from.
enum class torch_upstream_mode {
  pool,   ///< gpuguard's caching pool (pool_memory_resource) over cudaMalloc, one per device
  async,  ///< cudaMallocAsync on the device's default stream-ordered pool
};

/// The largest `queue_capacity`: each slot of the output queue takes 256 bytes, all allocated and
/// touched when the outputs start (this many: 256 MiB). A larger value set in the struct is taken
/// as this one.
inline constexpr std::uint32_t max_queue_capacity = 1048576;

/// Every option, with its default. The keys of `GPUGUARD_OPTIONS` are the member names.
struct options {
  stack_mode stacks = stack_mode::all;   ///< key `stacks`: off | sampled | all
  std::uint32_t stack_sample = 64;       ///< key `stack_sample`: 1 in N allocations when sampled (1..1000000)
  std::uint32_t stack_depth = 16;        ///< key `stack_depth`: frames kept per stack (1..64)
  bool fast_unwind = true;               ///< key `fast_unwind`: walk frame pointers where they hold (0 = always the unwind tables)
  python_frames_mode python_frames = python_frames_mode::user;  ///< key `python_frames`: user | all | off
  bool abort_on_error = false;           ///< key `abort_on_error`: misuse (double free, ...) aborts
  bool leak_report = true;               ///< key `leak_report`: text leak report on stderr at exit
  std::string leak_json;                 ///< key `leak_json`: path of a JSON leak report at exit ("" = none)
  int leak_exitcode = 0;                 ///< key `leak_exitcode`: exit status when leaks remain (0 = unchanged; 1..255)
  std::uint32_t leak_sites = 20;         ///< key `leak_sites`: at most this many sites in the text report (1..100000)
  device_mode device = device_mode::automatic;  ///< key `device`: auto | cuda | async | host
  std::size_t host_capacity = 0;         ///< key `host_capacity`: bytes for device=host, K/M/G/T suffixes (0 = unlimited)
  bool strict = false;                   ///< key `strict`: a bad key or value is fatal instead of ignored

  // Outputs (docs/outputs.md). Paths may contain %p, replaced by the process id.
  std::string text_log = "stderr";       ///< key `text_log`: one line per operation: stderr | stdout | off | PATH
  std::string jsonl_log;                 ///< key `jsonl_log`: JSONL event log path ("" = none)
  std::string trace_file;                ///< key `trace_file`: Chrome trace-event JSON path ("" = none)
  std::string prometheus_file;           ///< key `prometheus_file`: Prometheus textfile path ("" = none)
  std::uint32_t prometheus_interval_ms = 10000;  ///< key `prometheus_interval_ms`: rewrite period (100..3600000)
  std::string prometheus_job;            ///< key `prometheus_job`: the Prometheus file's job_id label ("" = $SLURM_JOB_ID where set, else none)
  bool nvtx = true;                      ///< key `nvtx`: an NVTX range per operation scope
  std::uint32_t sample_ms = 50;          ///< key `sample_ms`: memory sampling period of the writer (1..60000)
  bool op_device_query = false;          ///< key `op_device_query`: cudaMemGetInfo before and after each scope
  double alert_fraction = 0.8;           ///< key `alert_fraction`: device-full alert threshold (0 = off, else 0..1)
  double alert_hysteresis = 0.05;        ///< key `alert_hysteresis`: re-arm below threshold minus this (0..1)
  std::size_t alert_op_growth = 0;       ///< key `alert_op_growth`: alert when one scope's net growth passes this (0 = off)
  std::uint32_t queue_capacity = 16384;  ///< key `queue_capacity`: events the output queue holds (64..max_queue_capacity; 256 bytes each)
  std::uint32_t timeline_events = 64;    ///< key `timeline_events`: alloc/free lines per device per millisecond before the rest is folded into a mem_step (0 = no timeline; 0..1000000)

  // Exit paths (docs/hooks.md).
  bool hooks = true;                     ///< key `hooks`: enable_tracking installs the exit-path hooks
  std::string crash_file;                ///< key `crash_file`: crash record path, besides stderr ("" = stderr only)
  std::uint32_t cleanup_timeout = 30;    ///< key `cleanup_timeout`: seconds the exit work may take before the process is ended (0 = no limit; 0..86400)

  // LibTorch adapter (docs/torch.md).
  torch_mode torch = torch_mode::observe;  ///< key `torch`: observe | swap_in | off, for gpuguard::torch::enable()
  torch_upstream_mode torch_upstream = torch_upstream_mode::pool;  ///< key `torch_upstream`: pool | async, the swap-in's memory
};

/// What `parse_options` made of a string: the options, and one message per rejected item.
struct parsed_options {
  options values;
  std::vector<std::string> errors;  ///< each names the key and the value; the item was ignored
};

/**
 * Parses "key=value:key=value" on top of `base`. An empty string or empty items (`::`) are fine.
 * An unknown key, a missing `=`, or a bad value leaves that option as it was in `base` and adds
 * one message naming the key and the value (non-printable bytes shown as \xNN). `strict=1` in
 * the text does not change parsing; the caller decides what errors mean. Never throws for bad
 * input (only std::bad_alloc).
 */
GPUGUARD_API parsed_options parse_options(std::string_view text, const options& base = {});

/**
 * The options of this process: `GPUGUARD_OPTIONS` parsed once (at the first call) on top of the
 * defaults. Each error is printed on stderr as one line "gpuguard: GPUGUARD_OPTIONS: <message>";
 * with strict=1 the process then ends with status 2. Thread-safe.
 */
GPUGUARD_API const options& process_options();

/// Names of enum values as `GPUGUARD_OPTIONS` spells them.
GPUGUARD_API const char* to_string(stack_mode mode) noexcept;
GPUGUARD_API const char* to_string(device_mode mode) noexcept;
GPUGUARD_API const char* to_string(torch_mode mode) noexcept;
GPUGUARD_API const char* to_string(torch_upstream_mode mode) noexcept;
GPUGUARD_API const char* to_string(python_frames_mode mode) noexcept;

}  // namespace gpuguard
