# Tests of `gpuguard run` (the supervisor), in real processes: tests/cli/run/run_test.py, grouped so
# that ctest runs the groups side by side. fake_nvml.cpp (built in CMakeLists.txt, shared with the
# doctor's tests) stands in for libnvidia-ml.so.1; built a second time, for the library --track
# preloads.
add_library(gpuguard_run_fake_preload MODULE ${CMAKE_CURRENT_SOURCE_DIR}/fake_nvml.cpp)
gpuguard_set_warnings(gpuguard_run_fake_preload)

foreach(group IN ITEMS usage exit_status signals teardown boundary escape failures pid1 clean residue track tty)
  add_test(NAME cli.run.${group}
    COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/run/run_test.py $<TARGET_FILE:gpuguard_cli>
      $<TARGET_FILE:gpuguard_fake_nvml> $<TARGET_FILE:gpuguard_run_fake_preload> ${group})
  set_tests_properties(cli.run.${group} PROPERTIES TIMEOUT 120)
endforeach()

# Post-mortems: a tracked program that SIGKILLs itself, one that exits, one the OOM killer ends in a
# memory-limited cgroup of the test's own (skipped, with the reason, without root and cgroup v2's
# memory controller).
add_executable(gpuguard_postmortem_child ${CMAKE_CURRENT_SOURCE_DIR}/run/postmortem_child.cpp)
target_link_libraries(gpuguard_postmortem_child PRIVATE gpuguard::gpuguard)
gpuguard_set_warnings(gpuguard_postmortem_child)
# With the stand-in CUDA runtime and driver (tests/preload/), a Python job under --track too.
add_test(NAME cli.run.postmortem
  COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/run/run_postmortem_test.py $<TARGET_FILE:gpuguard_cli>
    $<TARGET_FILE:gpuguard_postmortem_child> ${PROJECT_SOURCE_DIR}/docs/schemas/events-v1.schema.json
    --preload $<TARGET_FILE:gpuguard_preload> --fake-driver $<TARGET_FILE_DIR:gpuguard_fake_driver>
    --fake-cudart $<TARGET_FILE:gpuguard_fake_cudart>)
set_tests_properties(cli.run.postmortem PROPERTIES TIMEOUT 180)

# On a GPU: a PyTorch job under --track SIGKILLed mid-step: its post-mortem's device bytes against
# NVML's figure for the process just before the kill. Skips (77) without a GPU.
add_test(NAME gpu.run_postmortem
  COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/run/run_postmortem_gpu_test.py $<TARGET_FILE:gpuguard_cli>)
set_tests_properties(gpu.run_postmortem PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu RESOURCE_LOCK gpu_device_memory TIMEOUT 240)

# A real PyTorch job: DataLoader workers and a multiprocessing helper outlive their parent's
# SIGKILL without gpuguard, and not with it. Needs torch (scripts/deps.sh test installs it); fails,
# never skips, without it.
add_test(NAME cli.run.torch
  COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/run/run_torch_test.py $<TARGET_FILE:gpuguard_cli>)
set_tests_properties(cli.run.torch PROPERTIES TIMEOUT 180)

# On a GPU: a Python parent whose spawned child holds 2 GiB is killed with SIGKILL; plain, the child
# keeps the memory; under `gpuguard run` it is back within 1 s. Skips (77) without a GPU.
add_test(NAME gpu.run
  COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/run/run_gpu_test.py $<TARGET_FILE:gpuguard_cli>)
set_tests_properties(gpu.run PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu RESOURCE_LOCK gpu_device_memory TIMEOUT 240)

# On a GPU: --require-clean passes when the boundary ends the worker a job left holding 1 GiB, and
# fails (125) when a server outside the job keeps 1 GiB the job asked for. Skips (77) without a GPU.
add_test(NAME gpu.run_clean
  COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/run/run_clean_gpu_test.py $<TARGET_FILE:gpuguard_cli>)
set_tests_properties(gpu.run_clean PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu RESOURCE_LOCK gpu_device_memory TIMEOUT 120)
