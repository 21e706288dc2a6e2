# Warnings as errors for gpuguard's own targets only: consumers of gpuguard::headers are never
# given these flags.
# g++'s -Wmaybe-uninitialized depends on how far it inlines: at -O3 (Release) g++ 12 reports a
# moved-from std::optional<device_buffer> in the tests as maybe uninitialized, which -O2 (the
# RelWithDebInfo of the scripts and CI, where it stays an error) does not. In Release and
# MinSizeRel it is a warning, so that `cmake --build` of a Release tree does not stop there.
function(gpuguard_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<CONFIG:Release,MinSizeRel>>:-Wno-error=maybe-uninitialized>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
endfunction()
