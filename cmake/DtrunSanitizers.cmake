# DTRUN_SANITIZE applies to everything built here, so that instrumented and uninstrumented code
# never share a container type across a library boundary.
if(DTRUN_SANITIZE)
  if(DTRUN_SANITIZE MATCHES "thread" AND DTRUN_SANITIZE MATCHES "address")
    message(FATAL_ERROR "DTRUN_SANITIZE: 'thread' cannot be combined with 'address'")
  endif()
  add_compile_options(-fsanitize=${DTRUN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${DTRUN_SANITIZE})
endif()
# DTRUN_FUZZ: the libFuzzer binaries fuzz_<target> (tests/fuzz), which alone link libFuzzer.
# Its coverage instrumentation goes on the libraries the targets parse with (tests/fuzz/
# CMakeLists.txt), so the fuzzer sees the paths inside them; the rest of the tree (the agent's
# loops, libdtrt's collectives) stays as it was, so that the ASan tree, which builds the harnesses
# for CI's short fuzzing runs, runs its tests no slower for them.
if(DTRUN_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "DTRUN_FUZZ needs clang (libFuzzer): configure with the 'asan' or 'fuzz' preset")
endif()
