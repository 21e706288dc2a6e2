// The process groups of children started with gpuguard::spawn (child_process.cpp), which every
// exit path ends: the crash handler at once, the end of the run after a grace. Internal to
// libgpuguard.
#pragma once

namespace gpuguard::detail {

/// Async-signal-safe: sends SIGKILL to every registered group.
void kill_child_groups() noexcept;

/// SIGTERM to every registered group, up to `grace_ms` for them to go, then SIGKILL.
void end_child_groups(int grace_ms) noexcept;

}  // namespace gpuguard::detail
