# Runs one MPI fault test and checks how the job ended (tests/mpi/CMakeLists.txt: mpi.fault.*).
#
#   cmake -DEXPECT=zero|nonzero|<status> [-DTIME_LIMIT=<s>] [-DMUST_SAY_1=<text> ...] -P check_mpi_fault.cmake
#         -- <mpiexec command line>
#
# Passes when the command ends within TIME_LIMIT seconds (default 45) with the expected exit status,
# its output (stdout and stderr together) contains every MUST_SAY_<n> text, and no rank printed
# "FAILED:" (a wrong result before the fault). A command that outlives the limit is killed together
# with its child processes (CMake kills the whole tree), and the test fails: a hang is never a pass.
cmake_minimum_required(VERSION 3.23)

if(NOT EXPECT MATCHES "^(zero|nonzero|[0-9]+)$")
  message(FATAL_ERROR "EXPECT is '${EXPECT}'; expected zero, nonzero or an exit status")
endif()
if(NOT DEFINED TIME_LIMIT)
  set(TIME_LIMIT 45)
endif()

# The command: every argument after "--".
set(command "")
set(after_marker FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(index RANGE ${last})
  if(after_marker)
    list(APPEND command "${CMAKE_ARGV${index}}")
  elseif(CMAKE_ARGV${index} STREQUAL "--")
    set(after_marker TRUE)
  endif()
endforeach()
if(NOT command)
  message(FATAL_ERROR "no command after --")
endif()

string(TIMESTAMP started "%s%f" UTC)
execute_process(COMMAND ${command}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output TIMEOUT ${TIME_LIMIT})
string(TIMESTAMP finished "%s%f" UTC)
math(EXPR elapsed_ms "(${finished} - ${started}) / 1000")
math(EXPR seconds "${elapsed_ms} / 1000")
math(EXPR tenths "(${elapsed_ms} % 1000) / 100")

message("${output}")
message("---- exit status '${result}' after ${seconds}.${tenths} s (expected ${EXPECT})")

set(problems "")
if(result MATCHES "timeout")
  list(APPEND problems "the command did not end by itself within ${TIME_LIMIT} s (${result})")
elseif(NOT result MATCHES "^-?[0-9]+$")
  # mpiexec itself died on a signal (CMake reports its name). The job did end with an error, and that
  # is what EXPECT=nonzero asks; Open MPI 4.1's mpiexec sometimes crashes like this in
  # PMIx_server_finalize while tearing down a job aborted while a rank waited in MPI_Finalize.
  if(NOT EXPECT STREQUAL "nonzero")
    list(APPEND problems "mpiexec ended with '${result}', expected exit status ${EXPECT}")
  endif()
elseif(EXPECT STREQUAL "zero" AND NOT result EQUAL 0)
  list(APPEND problems "exit status ${result}, expected 0")
elseif(EXPECT STREQUAL "nonzero" AND result EQUAL 0)
  list(APPEND problems "exit status 0, expected an error")
elseif(EXPECT MATCHES "^[0-9]+$" AND NOT result EQUAL EXPECT)
  list(APPEND problems "exit status ${result}, expected ${EXPECT}")
endif()
foreach(index RANGE 1 9)
  if(DEFINED MUST_SAY_${index})
    string(FIND "${output}" "${MUST_SAY_${index}}" found)
    if(found EQUAL -1)
      list(APPEND problems "the output lacks '${MUST_SAY_${index}}'")
    endif()
  endif()
endforeach()
string(FIND "${output}" "FAILED:" failed_check)
if(NOT failed_check EQUAL -1)
  list(APPEND problems "a rank reported a failed check (FAILED:)")
endif()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "mpi fault test failed:\n  ${text}")
endif()
