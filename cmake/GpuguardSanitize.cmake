# Sanitizer builds (scripts/sanitize.sh; docs/testing.md, "Sanitizer builds"):
#   -DGPUGUARD_SANITIZE=address,undefined   AddressSanitizer (with LeakSanitizer) and UBSan
#   -DGPUGUARD_SANITIZE=thread              ThreadSanitizer
# compile and link every target of the project with the sanitizers, so that the library, the
# `gpuguard` command and the test programs and children are all instrumented. Only the CPU parts
# are meant to be built in such a tree: nvcc and the LibTorch adapter are off (no GPU test runs
# there, and Torch's libraries are not instrumented), and so is the separate TSan stress target
# (the tree's own core tests are instrumented now); under thread, the fuzzers too (their
# ASan flags cannot be mixed with TSan's).
set(GPUGUARD_SANITIZE "" CACHE STRING
  "Sanitizers for the whole build: address,undefined, address, undefined or thread (empty: none)")

set(GPUGUARD_SANITIZE_ADDRESS OFF)
set(GPUGUARD_SANITIZE_THREAD OFF)
if(NOT GPUGUARD_SANITIZE STREQUAL "")
  string(REPLACE "," ";" gpuguard_sanitizers "${GPUGUARD_SANITIZE}")
  foreach(sanitizer IN LISTS gpuguard_sanitizers)
    if(sanitizer STREQUAL "address")
      set(GPUGUARD_SANITIZE_ADDRESS ON)
    elseif(sanitizer STREQUAL "thread")
      set(GPUGUARD_SANITIZE_THREAD ON)
    elseif(NOT sanitizer STREQUAL "undefined")
      message(FATAL_ERROR
        "GPUGUARD_SANITIZE='${GPUGUARD_SANITIZE}': expected a list of address, undefined or thread")
    endif()
  endforeach()
  if(GPUGUARD_SANITIZE_THREAD AND NOT gpuguard_sanitizers STREQUAL "thread")
    message(FATAL_ERROR
      "GPUGUARD_SANITIZE='${GPUGUARD_SANITIZE}': ThreadSanitizer cannot be combined with another sanitizer")
  endif()
  # -fno-sanitize-recover: UBSan's findings end the program (and so fail its test) like ASan's.
  # Frame pointers keep the reports' stacks whole at -O1.
  add_compile_options(-fsanitize=${GPUGUARD_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${GPUGUARD_SANITIZE})
  # GCC's manual: sanitizers raise the rate of false -Wmaybe-uninitialized warnings, and it advises
  # against -Werror with them; g++ 12 warns inside std::variant's move (json_value) under ASan.
  add_compile_options($<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-maybe-uninitialized>)
  # ThreadSanitizer does not model standalone fences (g++ says so with -Wtsan). The post-mortem
  # region's seqlocks use them, with every payload access atomic, so the sanitizer sees no plain
  # access to report and the warning tells nothing.
  if(GPUGUARD_SANITIZE_THREAD)
    add_compile_options($<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-tsan>)
  endif()
  # Plain variables: they shadow the cache's options in this tree only (CMP0077), so the same
  # build directory configured again without GPUGUARD_SANITIZE gets its own settings back.
  set(GPUGUARD_ENABLE_CUDA OFF)
  set(GPUGUARD_WITH_TORCH OFF)
  set(GPUGUARD_TSAN_TESTS OFF)
  if(GPUGUARD_SANITIZE_THREAD)
    set(GPUGUARD_FUZZ_TESTS OFF)
  endif()
  message(STATUS "gpuguard: sanitizer build (${GPUGUARD_SANITIZE}): CUDA language, Torch, the separate TSan "
                 "stress target and (under thread) the fuzzers off")
endif()

# How a test's programs should be treated by the sanitizer of this build, on top of the options
# scripts/sanitize.sh exports (ASAN_OPTIONS, UBSAN_OPTIONS, TSAN_OPTIONS). Nothing in a plain build.
#   gpuguard_sanitizer_options(TEST... [ASAN opts] [TSAN opts])
# opts are sanitizer flags "a=1:b=0" appended to the exported ones (the last setting wins). The
# tests also get GPUGUARD_TEST_SANITIZE=<GPUGUARD_SANITIZE>, for what a test script must adapt.
function(gpuguard_sanitizer_options)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "ASAN;TSAN" "")
  if(GPUGUARD_SANITIZE)
    set_property(TEST ${arg_UNPARSED_ARGUMENTS} APPEND PROPERTY ENVIRONMENT
      "GPUGUARD_TEST_SANITIZE=${GPUGUARD_SANITIZE}")
  endif()
  if(GPUGUARD_SANITIZE_ADDRESS AND arg_ASAN)
    set_property(TEST ${arg_UNPARSED_ARGUMENTS} APPEND PROPERTY ENVIRONMENT_MODIFICATION
      "ASAN_OPTIONS=string_append::${arg_ASAN}")
  endif()
  if(GPUGUARD_SANITIZE_THREAD AND arg_TSAN)
    set_property(TEST ${arg_UNPARSED_ARGUMENTS} APPEND PROPERTY ENVIRONMENT_MODIFICATION
      "TSAN_OPTIONS=string_append::${arg_TSAN}")
  endif()
endfunction()
