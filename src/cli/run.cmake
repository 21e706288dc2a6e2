# Sources of `gpuguard run`, appended to the tool's library (owned by that command).
#   run.cpp             the command line, CMD's environment, the words at the end
#   run_supervisor.cpp  the supervisor, its anchor process and CMD: signals, reaping, teardown
#   run_proc.cpp        the process table, descendants and held device files, from /proc
#   run_nvml.cpp        per-process device memory from NVML, loaded with dlopen
#   run_report.cpp      the summary line and the JSON report (docs/run.md)
# dlopen is in glibc itself since 2.34; CMAKE_DL_LIBS covers older ones.
list(APPEND gpuguard_cli_command_sources
  ${CMAKE_CURRENT_SOURCE_DIR}/run.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/run_supervisor.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/run_proc.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/run_nvml.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/run_report.cpp)
if(CMAKE_DL_LIBS)
  # The library target is made after this file is read: link it once the directory is done.
  cmake_language(DEFER CALL target_link_libraries gpuguard_cli_core PUBLIC ${CMAKE_DL_LIBS})
endif()
