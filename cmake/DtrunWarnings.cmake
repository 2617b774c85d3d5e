# Warnings for dtrun's own targets only: imported targets' headers come in as SYSTEM includes.
function(dtrun_set_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual
    -Wformat=2 -Wimplicit-fallthrough
    # -Wnull-dereference is left out: at -O2 GCC 12 reports it inside inlined Asio and libstdc++
    # code (scheduler.ipp, basic_string.h), where it cannot be fixed or suppressed per header.
    # GCC 12 flags designated initializers that leave members at their defaults (fixed in GCC 13).
    -Wno-missing-field-initializers)
  if(DTRUN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(DTRUN_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 warns that atomic_thread_fence is unsupported under TSan from inside Asio.
    target_compile_options(${target} PRIVATE -Wno-tsan)
  endif()
endfunction()
