/// @file
/// @brief The job's own PID namespace for `gpuguard run`: the boundary where no cgroup can be
///        made (an ordinary user, a container without a writable cgroup, `--no-cgroup`).
///
/// The anchor is forked as PID 1 of a new PID namespace (and of a new mount namespace, in which it
/// mounts a /proc of the new PID namespace, so that CMD's /proc/PID paths name its own
/// processes). Every process CMD starts is born in that namespace and, orphaned, comes to the
/// anchor, whatever it does with sessions or double forks; when the anchor ends, by its own exit
/// or a SIGKILL from anywhere, the kernel SIGKILLs every other process of the namespace and
/// reports the anchor's end only once they are all gone. So the anchor reaped is the proof that
/// nothing of the job is left.
///
/// Creating a PID namespace needs CAP_SYS_ADMIN. Without it, the anchor also gets a user namespace
/// of its own (where the kernel allows unprivileged ones), in which the caller's user and group
/// are mapped to themselves: CMD runs as the same user, with the same groups, as without it.
#pragma once

#include <string>

#include <sys/types.h>

namespace gpuguard::cli {

/// How the job's namespaces were made.
struct job_namespace {
  bool pid = false;   ///< the anchor is PID 1 of a new PID namespace
  bool user = false;  ///< ... inside a new user namespace (the caller's ids mapped to themselves)
  std::string why_not;  ///< when !pid: why not ("" when it is)
};

/// Forks like fork(2), but the child is PID 1 of a new PID and mount namespace, in a new user
/// namespace too where the caller lacks CAP_SYS_ADMIN. Call only from a process with one thread.
/// In the parent: the child's PID (as this namespace sees it), and `*made` says how; with a user
/// namespace the parent has mapped the child's ids before it returns. -1 with `made->why_not` set
/// when no such child could be made (then nothing is left running). In the child: 0, once its ids
/// are mapped, with `made->pid` (and `made->user`) set as in the parent.
pid_t fork_into_namespaces(job_namespace* made);

/// In the child of fork_into_namespaces: makes every mount of its mount namespace private, then
/// mounts a /proc of its PID namespace over /proc. 0, or the errno of the step that failed (the
/// host's /proc stays then).
int mount_own_proc() noexcept;

/// The PID, as this process's namespace sees it, of the child of `parent` whose PID in its own
/// (innermost) namespace is `inner` (what a process of a child namespace reported); 0 when there
/// is none. Reads /proc.
pid_t outer_pid_of_child(pid_t parent, pid_t inner);

}  // namespace gpuguard::cli
