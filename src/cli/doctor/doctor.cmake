# Sources of `gpuguard doctor`, appended to the tool's library (owned by that command).
#   doctor.cpp         options, sampling, --watch loop
#   (/proc and NVML come from holders/proc.cpp and holders/nvml.cpp: shared with run, listed in CMakeLists.txt)
#   doctor_reap.cpp    --reap through pidfds
#   doctor_report.cpp  the table and the gpuguard.doctor v1 JSON document
list(APPEND gpuguard_cli_command_sources
  ${CMAKE_CURRENT_LIST_DIR}/doctor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/doctor_reap.cpp
  ${CMAKE_CURRENT_LIST_DIR}/doctor_report.cpp)
