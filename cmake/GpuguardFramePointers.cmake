# Frame pointers in gpuguard's own code, so that an allocation-site stack can be taken by walking
# the rbp chain (src/ledger/frame_walk.hpp) through gpuguard's frames instead of unwinding them by
# the tables. -mno-omit-leaf-frame-pointer where the compiler has it: a leaf keeps the chain too,
# should a stack ever be taken from inside one. The cost is one register fewer for the optimiser
# and a push, a move and a pop per call that has a frame; consumers of gpuguard::headers are not
# given these flags.
# GPUGUARD_FRAME_POINTERS=OFF builds without them (what they cost is then measured, or the compiler's
# default kept); stacks are then unwound by the tables through gpuguard's frames.
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-mno-omit-leaf-frame-pointer GPUGUARD_HAS_LEAF_FRAME_POINTER)
option(GPUGUARD_FRAME_POINTERS "Build gpuguard's own code with frame pointers, for cheap allocation stacks" ON)
function(gpuguard_keep_frame_pointers target)
  if(NOT GPUGUARD_FRAME_POINTERS)
    return()
  endif()
  set(flags -fno-omit-frame-pointer)
  if(GPUGUARD_HAS_LEAF_FRAME_POINTER)
    list(APPEND flags -mno-omit-leaf-frame-pointer)
  endif()
  list(JOIN flags "," host_flags)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${flags}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${host_flags}>)
endfunction()
