# Finds Torch for the LibTorch adapter and adds adapters/torch. Sets GPUGUARD_HAVE_TORCH and
# GPUGUARD_TORCH_WHY (for the configure summary). GPUGUARD_WITH_TORCH=ON makes a missing Torch fatal.
# The tests' Python (Python3_EXECUTABLE: the virtual environment scripts/deps.sh makes) is asked
# where its torch keeps Torch's CMake config; asked again when that Python changes or had none.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(NOT Torch_DIR AND Python3_Interpreter_FOUND AND
   (NOT GPUGUARD_TORCH_PREFIX OR NOT "${Python3_EXECUTABLE}" STREQUAL "${GPUGUARD_TORCH_PREFIX_PYTHON}"))
  execute_process(COMMAND "${Python3_EXECUTABLE}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE gpuguard_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE gpuguard_torch_rc TIMEOUT 120)
  if(NOT gpuguard_torch_rc EQUAL 0)
    set(gpuguard_torch_prefix "")
  endif()
  set(GPUGUARD_TORCH_PREFIX "${gpuguard_torch_prefix}" CACHE PATH "Where Torch's CMake config was looked for (from Python3_EXECUTABLE's torch)" FORCE)
  set(GPUGUARD_TORCH_PREFIX_PYTHON "${Python3_EXECUTABLE}" CACHE INTERNAL "the Python GPUGUARD_TORCH_PREFIX came from")
endif()
if(GPUGUARD_TORCH_PREFIX)
  list(APPEND CMAKE_PREFIX_PATH "${GPUGUARD_TORCH_PREFIX}")
endif()
# Torch's package takes its architectures from TORCH_CUDA_ARCH_LIST (given, or the environment's)
# and ignores CMAKE_CUDA_ARCHITECTURES: it is given gpuguard's choice.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND "$ENV{TORCH_CUDA_ARCH_LIST}" STREQUAL "")
  set(TORCH_CUDA_ARCH_LIST "${GPUGUARD_TORCH_CUDA_ARCH_LIST}")
endif()
# Finding it also appends its nvcc flags (-gencode for each of its architectures, and more) to
# CMAKE_CUDA_FLAGS and turns CMAKE_CUDA_ARCHITECTURES off, for every target defined after it. The
# adapter compiles no CUDA source and gets what it needs from Torch's targets, so both are put back:
# gpuguard's .cu files are built for the chosen architectures only. CMAKE_CUDA_ARCHITECTURES is
# hidden while Torch looks, as its warning that it ignores it would be misleading here.
set(gpuguard_cuda_flags "${CMAKE_CUDA_FLAGS}")
set(gpuguard_cuda_archs_defined OFF)
if(DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(gpuguard_cuda_archs_defined ON)
  set(gpuguard_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
endif()
set(gpuguard_cuda_archs_hidden OFF)
get_property(gpuguard_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
if("CUDA" IN_LIST gpuguard_languages AND DEFINED CACHE{CMAKE_CUDA_ARCHITECTURES})
  # Only where CUDA is enabled already: Torch enabling it would set the architectures again.
  set(gpuguard_cuda_archs_hidden ON)
  set(gpuguard_cuda_archs_cached "$CACHE{CMAKE_CUDA_ARCHITECTURES}")
  get_property(gpuguard_cuda_archs_doc CACHE CMAKE_CUDA_ARCHITECTURES PROPERTY HELPSTRING)
  unset(CMAKE_CUDA_ARCHITECTURES CACHE)
  unset(CMAKE_CUDA_ARCHITECTURES)
endif()
find_package(Torch QUIET)
if(gpuguard_cuda_archs_hidden)
  set(CMAKE_CUDA_ARCHITECTURES "${gpuguard_cuda_archs_cached}" CACHE STRING "${gpuguard_cuda_archs_doc}")
endif()
if(gpuguard_cuda_archs_defined)
  set(CMAKE_CUDA_ARCHITECTURES "${gpuguard_cuda_archs}")
else()
  unset(CMAKE_CUDA_ARCHITECTURES)
endif()
set(CMAKE_CUDA_FLAGS "${gpuguard_cuda_flags}")
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
