// Code without a frame-pointer chain, for the frame-walk tests (frame_walk_test.cpp): built with
// -fomit-frame-pointer (tests/CMakeLists.txt), and a call made with rbp holding any value.
#include "frame_walk_no_fp.hpp"

#if defined(__x86_64__)

// call_with_rbp(rbp, fn, arg): calls fn(arg) with rbp set to `rbp`, as a function built without
// frame pointers may leave it; its unwind information (the .cfi lines) is right, so the unwinder
// steps past it where a frame-pointer walk cannot.
asm(R"(
  .text
  .p2align 4
  .type gpuguard_test_call_with_rbp, @function
gpuguard_test_call_with_rbp:
  .cfi_startproc
  push %rbp
  .cfi_def_cfa_offset 16
  .cfi_offset %rbp, -16
  mov %rdi, %rbp
  mov %rdx, %rdi
  call *%rsi
  pop %rbp
  .cfi_restore %rbp
  .cfi_def_cfa_offset 8
  ret
  .cfi_endproc
  .size gpuguard_test_call_with_rbp, .-gpuguard_test_call_with_rbp
)");

extern "C" std::size_t gpuguard_test_call_with_rbp(std::uintptr_t rbp, std::size_t (*fn)(void*), void* arg);

namespace gpuguard_test {

std::size_t call_with_rbp(std::uintptr_t rbp, std::size_t (*fn)(void*), void* arg) {
  return gpuguard_test_call_with_rbp(rbp, fn, arg);
}

}  // namespace gpuguard_test

#endif

namespace gpuguard_test {

// Two callers built without frame pointers: they leave rbp alone, so a walk from the callee's
// frame goes straight to the frame above them and leaves them out.
__attribute__((noinline)) std::size_t no_fp_inner(std::size_t (*fn)(void*), void* arg) {
  const std::size_t got = fn(arg);
  asm volatile("" ::: "memory");  // no tail call: this frame stays on the stack
  return got;
}

__attribute__((noinline)) std::size_t no_fp_outer(std::size_t (*fn)(void*), void* arg) {
  const std::size_t got = no_fp_inner(fn, arg);
  asm volatile("" ::: "memory");
  return got;
}

}  // namespace gpuguard_test
