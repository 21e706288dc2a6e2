# Finds Torch for the LibTorch adapter and adds adapters/torch. Sets GPUGUARD_HAVE_TORCH and
# GPUGUARD_TORCH_WHY (for the configure summary). GPUGUARD_WITH_TORCH=ON makes a missing Torch fatal.
if(NOT Torch_DIR AND NOT DEFINED CACHE{GPUGUARD_TORCH_PREFIX})
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(gpuguard_torch_prefix "")
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND "${Python3_EXECUTABLE}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE gpuguard_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                    ERROR_QUIET RESULT_VARIABLE gpuguard_torch_rc TIMEOUT 120)
    if(NOT gpuguard_torch_rc EQUAL 0)
      set(gpuguard_torch_prefix "")
    endif()
  endif()
  set(GPUGUARD_TORCH_PREFIX "${gpuguard_torch_prefix}" CACHE PATH "Where Torch's CMake config was looked for (from python3's torch)")
endif()
if(GPUGUARD_TORCH_PREFIX)
  list(APPEND CMAKE_PREFIX_PATH "${GPUGUARD_TORCH_PREFIX}")
endif()
# Torch's config asks for the architectures itself and ignores CMAKE_CUDA_ARCHITECTURES.
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "9.0")
endif()
find_package(Torch QUIET)
if(Torch_FOUND)
  set(GPUGUARD_HAVE_TORCH ON)
  set(GPUGUARD_TORCH_WHY "yes (Torch ${Torch_VERSION} at ${Torch_DIR})")
  add_subdirectory(adapters/torch)
elseif(GPUGUARD_WITH_TORCH STREQUAL "ON")
  message(FATAL_ERROR "GPUGUARD_WITH_TORCH=ON but Torch's CMake config was not found: install torch for python3 "
                      "or set Torch_DIR")
else()
  set(GPUGUARD_TORCH_WHY "no (Torch not found: pip install torch, or set Torch_DIR)")
endif()
