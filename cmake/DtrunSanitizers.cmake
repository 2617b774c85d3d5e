# DTRUN_SANITIZE applies to everything built here, so that instrumented and uninstrumented code
# never share a container type across a library boundary.
if(DTRUN_SANITIZE)
  if(DTRUN_SANITIZE MATCHES "thread" AND DTRUN_SANITIZE MATCHES "address")
    message(FATAL_ERROR "DTRUN_SANITIZE: 'thread' cannot be combined with 'address'")
  endif()
  add_compile_options(-fsanitize=${DTRUN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${DTRUN_SANITIZE})
endif()
