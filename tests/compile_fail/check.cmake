# Compiles SOURCE twice: with GPUGUARD_COMPILE_FAIL_CONTROL defined it must compile (so the file
# itself is sound), without it it must fail with a diagnostic matching the file's EXPECT line.
file(STRINGS "${SOURCE}" expect_line REGEX "^// EXPECT: ")
string(REGEX REPLACE "^// EXPECT: " "" expected "${expect_line}")
if(expected STREQUAL "")
  message(FATAL_ERROR "${SOURCE} has no '// EXPECT: <regex>' line")
endif()
set(include_flags "")
foreach(dir IN LISTS INCLUDES)
  list(APPEND include_flags "-I${dir}")
endforeach()
execute_process(COMMAND "${COMPILER}" -std=c++17 -fsyntax-only ${include_flags}
                        -DGPUGUARD_COMPILE_FAIL_CONTROL "${SOURCE}"
                RESULT_VARIABLE control_rc ERROR_VARIABLE control_err)
if(NOT control_rc EQUAL 0)
  message(FATAL_ERROR "the control build of ${SOURCE} failed, so the check proves nothing:\n${control_err}")
endif()
execute_process(COMMAND "${COMPILER}" -std=c++17 -fsyntax-only ${include_flags} "${SOURCE}"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not")
endif()
if(NOT err MATCHES "${expected}")
  message(FATAL_ERROR "${SOURCE} failed for another reason than '${expected}':\n${err}")
endif()
message(STATUS "${SOURCE}: rejected as expected (${expected})")
