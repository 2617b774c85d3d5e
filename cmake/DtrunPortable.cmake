# One portable binary: the released dtrun and dtrun-netcheck need, at run time, only the C library
# and the kernel (ldd: linux-vdso, libc, libm, ld-linux), so the one file runs on any x86_64 Linux
# whose glibc is at least the floor stated in docs/install.md (tests/integration/
# portable_binary_test.sh checks both), and the .deb and the wheel depend on nothing else.
#
# - spdlog and fmt are compiled in from their headers, always (sanitizer trees too: their code is
#   then instrumented like the rest), once: common/src/spdlog_compiled.cpp (target dtrun_spdlog),
#   never Debian's shared libspdlog or libfmt.
# - DTRUN_PORTABLE (ON unless sanitizers or fuzzing are on): libstdc++ and libgcc linked in
#   (dtrun_make_portable on the two programs), and OpenSSL's static libcrypto.a and libssl.a.
#   OpenSSL is linked, not loaded on demand, because the store's authentication (HMAC-SHA256)
#   and etcd's base64 need libcrypto on every run, and Asio's TLS stream for etcd calls libssl
#   throughout: loading it by hand would mean a table of every function Asio uses. TLS always
#   names its CA file (--rdzv_conf cacert), so OpenSSL's compiled-in certificate paths, which
#   differ between distributions, are never read.
#   Sanitizer trees are for testing, not shipping, and their runtimes intercept libstdc++'s
#   exceptions through the shared library: OFF there (the asan, tsan and fuzz presets).
if(DTRUN_SANITIZE OR DTRUN_FUZZ)
  set(dtrun_portable_default OFF)
else()
  set(dtrun_portable_default ON)
endif()
option(DTRUN_PORTABLE "dtrun and dtrun-netcheck need only the C library at run time (static libstdc++, libgcc, OpenSSL)"
       ${dtrun_portable_default})
if(DTRUN_PORTABLE AND (DTRUN_SANITIZE OR DTRUN_FUZZ))
  message(FATAL_ERROR "DTRUN_PORTABLE links libstdc++ statically, which the sanitizers do not support: "
                      "configure with -DDTRUN_PORTABLE=OFF (the asan, tsan and fuzz presets do)")
endif()

# FindOpenSSL (rendezvous/) reads OPENSSL_USE_STATIC_LIBS; the libraries a tree found before
# (.so or .a) stay in its cache, so a tree whose choice changed looks again.
set(OPENSSL_USE_STATIC_LIBS ${DTRUN_PORTABLE})
if(DEFINED CACHE{OPENSSL_CRYPTO_LIBRARY})
  string(REGEX MATCH "\\.a$" dtrun_openssl_cached_static "${OPENSSL_CRYPTO_LIBRARY}")
  if((DTRUN_PORTABLE AND NOT dtrun_openssl_cached_static) OR (NOT DTRUN_PORTABLE AND dtrun_openssl_cached_static))
    unset(OPENSSL_CRYPTO_LIBRARY CACHE)
    unset(OPENSSL_SSL_LIBRARY CACHE)
  endif()
endif()

# dtrun_make_portable(<executable>): libstdc++ and libgcc linked in when DTRUN_PORTABLE.
function(dtrun_make_portable target)
  if(DTRUN_PORTABLE)
    target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  endif()
endfunction()
