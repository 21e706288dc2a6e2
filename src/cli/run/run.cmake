# Sources of `gpuguard run`, appended to the tool's library (owned by that command).
#   run.cpp             the command line, CMD's environment, the words at the end
#   run_supervisor.cpp  the supervisor, its anchor process and CMD: signals, reaping, teardown
#   run_cgroup.cpp      the job's own cgroup v2 (the boundary; cgroup.kill)
#   run_namespace.cpp   the job's own PID namespace (the boundary where no cgroup can be made)
#   (the process table, descendants and held device files come from holders/proc.cpp, per-process
#   device memory from holders/nvml.cpp: shared with doctor, listed in CMakeLists.txt)
#   run_report.cpp      the summary line and the JSON report (docs/run.md)
#   run_track.cpp       --track: the tracked processes' records and their summary
#   run_postmortem.cpp  post-mortems of tracked processes that died unseen (SIGKILL, the OOM killer)
list(APPEND gpuguard_cli_command_sources
  ${CMAKE_CURRENT_LIST_DIR}/run.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_supervisor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_cgroup.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_namespace.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_track.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_postmortem.cpp)
