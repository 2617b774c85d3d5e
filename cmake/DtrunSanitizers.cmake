# DTRUN_SANITIZE applies to everything built here, so that instrumented and uninstrumented code
# never share a container type across a library boundary.
if(DTRUN_SANITIZE)
  if(DTRUN_SANITIZE MATCHES "thread" AND DTRUN_SANITIZE MATCHES "address")
    message(FATAL_ERROR "DTRUN_SANITIZE: 'thread' cannot be combined with 'address'")
  endif()
  add_compile_options(-fsanitize=${DTRUN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${DTRUN_SANITIZE})
endif()
# DTRUN_FUZZ: libFuzzer's coverage instrumentation on everything, so the fuzzer sees the paths
# inside dtrun's libraries; only the fuzz_<target> binaries link libFuzzer itself.
if(DTRUN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DTRUN_FUZZ needs clang (libFuzzer): configure with the 'fuzz' preset")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
