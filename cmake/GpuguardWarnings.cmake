# Warnings as errors for gpuguard's own targets only: consumers of gpuguard::headers are never
# given these flags.
# g++'s -Wmaybe-uninitialized depends on how far it inlines: at -O3 (Release) g++ 12 reports a
# reset std::optional<device_buffer> in the tests (.cpp and .cu) as maybe uninitialized, which
# -O2 does not. In Release and MinSizeRel it is a warning, so that `cmake --build` of a Release
# tree does not stop there; in RelWithDebInfo, which the scripts and CI build, it stays an error.
# Every own target also keeps frame pointers (GpuguardFramePointers.cmake says why).
include(${CMAKE_CURRENT_LIST_DIR}/GpuguardFramePointers.cmake)
function(gpuguard_set_warnings target)
  gpuguard_keep_frame_pointers(${target})
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<CONFIG:Release,MinSizeRel>>:-Wno-error=maybe-uninitialized>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<CXX_COMPILER_ID:GNU>,$<CONFIG:Release,MinSizeRel>>:-Xcompiler=-Wno-error=maybe-uninitialized>)
endfunction()
