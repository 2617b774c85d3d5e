# cmake -DDTRUN=<dtrun> -DVERSION=<x.y.z> -DTEMPLATE=<dtrun.1.in> -DMAN_PAGE=<out> -DCOMPLETION=<out>
#   -P generate.cmake
# The man page: the template with its @DTRUN_VERSION@ and its @DTRUN_GENERATED@ line replaced by
# what `dtrun --print-man` prints; the completion: what `dtrun completion bash` prints.
foreach(arg DTRUN VERSION TEMPLATE MAN_PAGE COMPLETION)
  if(NOT DEFINED ${arg})
    message(FATAL_ERROR "generate.cmake: -D${arg}=... is missing")
  endif()
endforeach()

function(run_dtrun out)
  execute_process(COMMAND ${DTRUN} ${ARGN} OUTPUT_VARIABLE text ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${DTRUN} ${ARGN} exited ${rc}: ${err}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

run_dtrun(sections --print-man)
file(READ ${TEMPLATE} page)
string(FIND "${page}" "\n@DTRUN_GENERATED@\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${TEMPLATE}: no line @DTRUN_GENERATED@ for the generated sections")
endif()
# string(REPLACE), not configure_file: help text may hold '@' (--include node1@node2).
string(REPLACE "\n@DTRUN_GENERATED@\n" "\n${sections}" page "${page}")
string(REPLACE "@DTRUN_VERSION@" "${VERSION}" page "${page}")
file(WRITE ${MAN_PAGE} "${page}")

run_dtrun(completion completion bash)
file(WRITE ${COMPLETION} "${completion}")
