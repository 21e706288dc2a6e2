# Chooses the CUDA architectures gpuguard's .cu files are built for, before enable_language(CUDA),
# and says why. The first that applies wins:
#   1. CMAKE_CUDA_ARCHITECTURES, when it is given (-D, or a project that adds gpuguard)
#   2. the CUDAARCHS environment variable, as CMake itself reads it
#   3. the GPUs of this machine, as `nvidia-smi --query-gpu=compute_cap` reports them
#   4. otherwise 80;86;89;90: Ampere (A100, A10, RTX 30), Ada (L4, L40, RTX 40), Hopper (H100, H200)
# The choice goes into the cache, as CMake keeps CUDAARCHS's: configure again with
# -DCMAKE_CUDA_ARCHITECTURES=... to change it. GPUGUARD_NVIDIA_SMI names the nvidia-smi to ask.
# Sets:
#   GPUGUARD_CUDA_ARCHITECTURES_WHY  "80;86;89;90 (no GPU found at configure time ...)", for the summary
#   GPUGUARD_TORCH_CUDA_ARCH_LIST    the same choice in TORCH_CUDA_ARCH_LIST's spelling ("8.0 8.6"),
#                                    for Torch's package, which ignores CMAKE_CUDA_ARCHITECTURES
find_program(GPUGUARD_NVIDIA_SMI nvidia-smi
  DOC "nvidia-smi, asked for the GPUs' compute capability when CMAKE_CUDA_ARCHITECTURES is not given")

set(gpuguard_arch_doc "CUDA architectures of the .cu files (default: CUDAARCHS, the GPU found at configure time, or 80;86;89;90)")
if(DEFINED CMAKE_CUDA_ARCHITECTURES)
  # Chosen here on an earlier run (kept in the cache), or given.
  if(DEFINED CACHE{GPUGUARD_CUDA_ARCHITECTURES_CHOSEN}
     AND "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "${GPUGUARD_CUDA_ARCHITECTURES_CHOSEN}")
    set(gpuguard_arch_reason "${GPUGUARD_CUDA_ARCHITECTURES_REASON}")
  else()
    set(gpuguard_arch_reason "from CMAKE_CUDA_ARCHITECTURES")
  endif()
elseif(NOT "$ENV{CUDAARCHS}" STREQUAL "")
  set(CMAKE_CUDA_ARCHITECTURES "$ENV{CUDAARCHS}" CACHE STRING "${gpuguard_arch_doc}")
  set(gpuguard_arch_reason "from the CUDAARCHS environment variable")
else()
  set(gpuguard_arch_found "")
  set(gpuguard_arch_gpus "")
  if(GPUGUARD_NVIDIA_SMI)
    execute_process(COMMAND "${GPUGUARD_NVIDIA_SMI}" --query-gpu=name,compute_cap --format=csv,noheader
                    RESULT_VARIABLE gpuguard_smi_rc OUTPUT_VARIABLE gpuguard_smi_out ERROR_VARIABLE gpuguard_smi_err
                    OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 30)
    string(REPLACE "\n" ";" gpuguard_smi_lines "${gpuguard_smi_out}")
    foreach(line IN LISTS gpuguard_smi_lines)
      # "NVIDIA H100 80GB HBM3, 9.0": any other line (an error, "[N/A]") means no GPU to build for.
      if(NOT gpuguard_smi_rc EQUAL 0 OR NOT line MATCHES "^(.+), *([0-9]+)\\.([0-9]+) *$")
        set(gpuguard_arch_found "")
        break()
      endif()
      list(APPEND gpuguard_arch_found "${CMAKE_MATCH_2}${CMAKE_MATCH_3}")
      list(APPEND gpuguard_arch_gpus "${CMAKE_MATCH_1} (${CMAKE_MATCH_2}.${CMAKE_MATCH_3})")
    endforeach()
    # What it said, for the summary: its first line, cut short.
    string(STRIP "${gpuguard_smi_out}\n${gpuguard_smi_err}" gpuguard_smi_said)
    string(REGEX REPLACE "\n.*" "" gpuguard_smi_said "${gpuguard_smi_said}")
    string(SUBSTRING "${gpuguard_smi_said}" 0 100 gpuguard_smi_said)
    set(gpuguard_smi_said "nvidia-smi: status ${gpuguard_smi_rc}, '${gpuguard_smi_said}'")
  else()
    set(gpuguard_smi_said "no nvidia-smi")
  endif()
  if(gpuguard_arch_found)
    list(REMOVE_DUPLICATES gpuguard_arch_found)
    list(SORT gpuguard_arch_found COMPARE NATURAL)
    list(REMOVE_DUPLICATES gpuguard_arch_gpus)
    list(JOIN gpuguard_arch_gpus ", " gpuguard_arch_gpus)
    set(gpuguard_arch_value "${gpuguard_arch_found}")
    set(gpuguard_arch_reason "the GPU found at configure time: ${gpuguard_arch_gpus}")
  else()
    set(gpuguard_arch_value 80 86 89 90)
    set(gpuguard_arch_reason "no GPU found at configure time (${gpuguard_smi_said}): Ampere, Ada and Hopper")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${gpuguard_arch_value}" CACHE STRING "${gpuguard_arch_doc}")
endif()
set(GPUGUARD_CUDA_ARCHITECTURES_CHOSEN "${CMAKE_CUDA_ARCHITECTURES}" CACHE INTERNAL "CMAKE_CUDA_ARCHITECTURES as chosen")
set(GPUGUARD_CUDA_ARCHITECTURES_REASON "${gpuguard_arch_reason}" CACHE INTERNAL "why CMAKE_CUDA_ARCHITECTURES is what it is")
set(GPUGUARD_CUDA_ARCHITECTURES_WHY "${CMAKE_CUDA_ARCHITECTURES} (${gpuguard_arch_reason})")

# CMake's spelling to Torch's: 80 and 80-real are sm_80 ("8.0"), 80-virtual PTX ("8.0+PTX"), 90a
# "9.0a"; all and all-major are Torch's "All", native its "Auto". Space-separated, so that the
# list passes on a command line as one argument.
set(GPUGUARD_TORCH_CUDA_ARCH_LIST "")
foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
  if(arch MATCHES "^([0-9]+)([0-9])([af]?)(-real|-virtual)?$")
    set(torch_arch "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}${CMAKE_MATCH_3}")
    if(CMAKE_MATCH_4 STREQUAL "-virtual")
      string(APPEND torch_arch "+PTX")
    endif()
  elseif(arch MATCHES "^all(-major)?$")
    set(torch_arch All)
  elseif(arch STREQUAL "native")
    set(torch_arch Auto)
  else()
    continue()
  endif()
  list(APPEND GPUGUARD_TORCH_CUDA_ARCH_LIST "${torch_arch}")
endforeach()
list(REMOVE_DUPLICATES GPUGUARD_TORCH_CUDA_ARCH_LIST)
list(JOIN GPUGUARD_TORCH_CUDA_ARCH_LIST " " GPUGUARD_TORCH_CUDA_ARCH_LIST)
