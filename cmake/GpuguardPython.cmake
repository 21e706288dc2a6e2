# The Python module and the wheel (pyproject.toml, docs/python.md): gpuguard._native, built with
# nanobind against the core (gpuguard::gpuguard), and, under scikit-build-core, the wheel's layout:
#
#   scripts (the environment's bin/)   gpuguard                  the command-line tool
#   data/lib (the environment's lib/)  libgpuguard.so.0          the core, one copy for all of them
#                                      libgpuguard_preload.so    the interposer of `run --track`
#   data/share/doc/gpuguard            docs/                     what each command's --help names
#   platlib/gpuguard                   the package, _native      the module
#
# So the tool finds the interposer and the docs where an installed tree has them (../lib,
# ../share/doc/gpuguard beside bin/), with no change to its lookup. The module loads the core by its
# soname, libgpuguard.so.0: under `gpuguard run --track` the interposer has loaded it already, and the
# dynamic loader hands the module that same library, so scopes and figures read the interposer's
# ledger.
find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
if(NOT DEFINED nanobind_DIR)
  execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
    OUTPUT_VARIABLE nanobind_DIR OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE nanobind_found)
  if(NOT nanobind_found EQUAL 0)
    message(FATAL_ERROR "GPUGUARD_PYTHON: ${Python_EXECUTABLE} has no nanobind (pip install nanobind)")
  endif()
endif()
find_package(nanobind CONFIG REQUIRED)

nanobind_add_module(gpuguard_python NB_STATIC ${PROJECT_SOURCE_DIR}/python/native/module.cpp)
set_target_properties(gpuguard_python PROPERTIES OUTPUT_NAME _native
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/python/gpuguard
  # site-packages is PREFIX/lib/pythonX.Y/site-packages (a venv, --user, --prefix, conda), the
  # wheel's data/lib is PREFIX/lib; the build tree's core is found through the build RPATH.
  INSTALL_RPATH "$ORIGIN/../../../../lib")
target_compile_definitions(gpuguard_python PRIVATE GPUGUARD_VERSION="${PROJECT_VERSION}")
target_link_libraries(gpuguard_python PRIVATE gpuguard::gpuguard)
# The project's warnings for the module's own code; Python's and nanobind's headers as system
# headers (GCC and Clang drop a -I that -isystem names too).
target_include_directories(gpuguard_python SYSTEM PRIVATE ${Python_INCLUDE_DIRS} "${nanobind_DIR}/../include")
gpuguard_set_warnings(gpuguard_python)

if(SKBUILD)
  # One file per library: a wheel holds no symbolic links, so libgpuguard.so.0 is the file itself
  # (no libgpuguard.so.0.1.0 behind it, and no libgpuguard.so, which only a linker wants).
  set_target_properties(gpuguard_core PROPERTIES VERSION "${PROJECT_VERSION_MAJOR}")
  install(TARGETS gpuguard_python LIBRARY DESTINATION gpuguard)
  install(TARGETS gpuguard_cli RUNTIME DESTINATION "${SKBUILD_SCRIPTS_DIR}")
  install(TARGETS gpuguard_core gpuguard_preload LIBRARY DESTINATION "${SKBUILD_DATA_DIR}/lib" NAMELINK_SKIP)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION "${SKBUILD_DATA_DIR}/${CMAKE_INSTALL_DOCDIR}")
endif()
