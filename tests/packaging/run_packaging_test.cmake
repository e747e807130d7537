# Packaging test driver: builds and runs tests/packaging/consumer against qsdp.
#
#   cmake -DMODE=<install|add_subdirectory|fetchcontent> [-DWORK_DIR=<dir>]
#         [-DQSDP_SOURCE_DIR=<dir>] [-DGENERATOR=<gen>] [-DMAKE_PROGRAM=<path>]
#         [-DCXX_COMPILER=<path>] [-DCONFIG=<config>] [-DCTEST_COMMAND=<path>]
#         -P run_packaging_test.cmake
#
# MODE=install           configure qsdp alone (tests/bench/examples OFF), install
#                        it into <WORK_DIR>/prefix, then build the consumer with
#                        find_package(qsdp CONFIG REQUIRED) against that prefix.
# MODE=add_subdirectory  build the consumer with add_subdirectory(<qsdp source>).
# MODE=fetchcontent      build the consumer with FetchContent (SOURCE_DIR).
#
# In every mode the consumer executable is then run (through ctest). Everything
# is created below WORK_DIR (default: ./qsdp-packaging-<MODE>); the
# directories it creates there are wiped first. Registered as the ctest tests packaging.<MODE> by tests/CMakeLists.txt.

cmake_minimum_required(VERSION 3.25)

if(NOT DEFINED MODE)
  message(FATAL_ERROR "packaging test: pass -DMODE=install|add_subdirectory|fetchcontent")
endif()
if(NOT DEFINED QSDP_SOURCE_DIR OR QSDP_SOURCE_DIR STREQUAL "")
  get_filename_component(QSDP_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
endif()
if(NOT DEFINED WORK_DIR OR WORK_DIR STREQUAL "")
  set(WORK_DIR "${CMAKE_CURRENT_BINARY_DIR}/qsdp-packaging-${MODE}")
endif()
if(NOT DEFINED CONFIG OR CONFIG STREQUAL "")
  set(CONFIG Release)
endif()
if(NOT DEFINED CTEST_COMMAND OR CTEST_COMMAND STREQUAL "")
  get_filename_component(_cmake_bin_dir "${CMAKE_COMMAND}" DIRECTORY)
  set(CTEST_COMMAND "${_cmake_bin_dir}/ctest")
endif()

set(consumer_source_dir "${QSDP_SOURCE_DIR}/tests/packaging/consumer")
set(consumer_build_dir "${WORK_DIR}/consumer-build")

# Arguments shared by every configure step: same generator, compiler and
# configuration as the enclosing build.
set(common_configure_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
if(DEFINED GENERATOR AND NOT GENERATOR STREQUAL "")
  list(APPEND common_configure_args -G "${GENERATOR}")
endif()
if(DEFINED MAKE_PROGRAM AND NOT MAKE_PROGRAM STREQUAL "")
  list(APPEND common_configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(DEFINED CXX_COMPILER AND NOT CXX_COMPILER STREQUAL "")
  list(APPEND common_configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()

# run_step(<description> <command>...): run a command, streaming its output;
# stop with FATAL_ERROR if it fails.
function(run_step description)
  message(STATUS "[packaging.${MODE}] ${description}")
  execute_process(COMMAND ${ARGN}
                  WORKING_DIRECTORY "${WORK_DIR}"
                  COMMAND_ECHO STDOUT
                  RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "[packaging.${MODE}] FAILED: ${description} (exit status: ${result})")
  endif()
endfunction()

# build_and_run_consumer(<extra configure args>...)
function(build_and_run_consumer)
  run_step("configure consumer (${consumer_mode} mode)"
    "${CMAKE_COMMAND}" -S "${consumer_source_dir}" -B "${consumer_build_dir}"
      ${common_configure_args} "-DQSDP_CONSUME_MODE=${consumer_mode}" ${ARGN})
  run_step("build consumer"
    "${CMAKE_COMMAND}" --build "${consumer_build_dir}" --config "${CONFIG}")
  run_step("run consumer"
    "${CTEST_COMMAND}" --test-dir "${consumer_build_dir}" -C "${CONFIG}" --output-on-failure)
endfunction()

message(STATUS "[packaging.${MODE}] qsdp source: ${QSDP_SOURCE_DIR}")
message(STATUS "[packaging.${MODE}] work dir:    ${WORK_DIR}")
# Start from scratch, but keep WORK_DIR itself: it may be our working directory.
file(MAKE_DIRECTORY "${WORK_DIR}")
file(REMOVE_RECURSE "${WORK_DIR}/qsdp-build" "${WORK_DIR}/prefix" "${consumer_build_dir}")

if(MODE STREQUAL "install")
  set(qsdp_build_dir "${WORK_DIR}/qsdp-build")
  set(prefix "${WORK_DIR}/prefix")

  run_step("configure qsdp for installation"
    "${CMAKE_COMMAND}" -S "${QSDP_SOURCE_DIR}" -B "${qsdp_build_dir}" ${common_configure_args}
      -DQSDP_BUILD_TESTS=OFF -DQSDP_BUILD_BENCH=OFF -DQSDP_BUILD_EXAMPLES=OFF
      "-DCMAKE_INSTALL_PREFIX=${prefix}")
  run_step("build qsdp" "${CMAKE_COMMAND}" --build "${qsdp_build_dir}" --config "${CONFIG}")
  run_step("install qsdp into ${prefix}"
    "${CMAKE_COMMAND}" --install "${qsdp_build_dir}" --config "${CONFIG}")

  foreach(installed IN ITEMS
      include/qsdp/codec.hpp
      include/qsdp/quantizers.hpp
      lib/cmake/qsdp/qsdpConfig.cmake
      lib/cmake/qsdp/qsdpConfigVersion.cmake
      lib/cmake/qsdp/qsdpTargets.cmake
      lib/cmake/qsdp/FindNCCL.cmake)
    if(NOT EXISTS "${prefix}/${installed}")
      message(FATAL_ERROR "[packaging.${MODE}] FAILED: ${installed} was not installed into ${prefix}")
    endif()
  endforeach()

  set(consumer_mode package)
  build_and_run_consumer(
    "-DCMAKE_PREFIX_PATH=${prefix}"
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)

  # Make sure the package came from our prefix and not from somewhere else.
  file(STRINGS "${consumer_build_dir}/CMakeCache.txt" qsdp_dir_line REGEX "^qsdp_DIR:")
  string(REGEX REPLACE "^qsdp_DIR:[A-Z]+=" "" qsdp_dir "${qsdp_dir_line}")
  file(REAL_PATH "${qsdp_dir}" qsdp_dir)
  file(REAL_PATH "${prefix}/lib/cmake/qsdp" expected_dir)
  if(NOT qsdp_dir STREQUAL expected_dir)
    message(FATAL_ERROR "[packaging.${MODE}] FAILED: consumer found qsdp in '${qsdp_dir}', "
                        "expected '${expected_dir}'")
  endif()
elseif(MODE STREQUAL "add_subdirectory")
  set(consumer_mode subdirectory)
  build_and_run_consumer("-DQSDP_SOURCE_DIR=${QSDP_SOURCE_DIR}")
elseif(MODE STREQUAL "fetchcontent")
  set(consumer_mode fetchcontent)
  build_and_run_consumer("-DQSDP_SOURCE_DIR=${QSDP_SOURCE_DIR}")
else()
  message(FATAL_ERROR "packaging test: unknown MODE '${MODE}' "
                      "(expected install, add_subdirectory or fetchcontent)")
endif()

message(STATUS "[packaging.${MODE}] PASSED")
