# Tests of `gpuguard doctor` (src/cli/doctor/), included from tests/cli/CMakeLists.txt.

# In-process: the /proc/PID/stat parser on recorded lines (D state included), the classification
# on process tables of each shape, the residue trend, the JSON document, the device-file scan, and
# the pidfd reaper's start-time check on real children.
add_executable(gpuguard_cli_doctor_tests doctor/doctor_test.cpp)
target_link_libraries(gpuguard_cli_doctor_tests PRIVATE gpuguard_cli_core GTest::gtest_main)
gpuguard_set_warnings(gpuguard_cli_doctor_tests)
gtest_discover_tests(gpuguard_cli_doctor_tests TEST_PREFIX "cli." NO_PRETTY_VALUES DISCOVERY_TIMEOUT 60)

# `gpuguard doctor` as a process, on real processes holding fake device files: each class, --reap,
# --pid, --watch, the JSON schema, NVML absent and faked.
add_test(NAME cli.doctor
  COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/doctor/doctor_test.py
    $<TARGET_FILE:gpuguard_cli> $<TARGET_FILE:gpuguard_fake_nvml> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.doctor PROPERTIES TIMEOUT 120)

# On a GPU: real CUDA holders (torch), an orphaned worker of a killed trainer, --reap and --watch.
# Skips (77) without a CUDA device; the GPU runner requires it.
add_test(NAME gpu.doctor
  COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/doctor/doctor_gpu_check.py $<TARGET_FILE:gpuguard_cli>)
set_tests_properties(gpu.doctor PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu RESOURCE_LOCK gpu_device_memory TIMEOUT 240)
