// Long and short forms of the slowest checks. A sanitizer tree runs them 3-10x slower than a
// release one, and CI runs both: there the short form still takes every code path once (each
// transport set-up at one world size, each world size on one backend, the longest length of the
// check matrix for one dtype per element size: ops_checks.h's Form), and DTRUN_TEST_LONG=1
// gives the long form back. A release tree always runs the long form.
#pragma once

#include <cstdlib>
#include <string_view>

namespace dtrun::testing {

inline bool longForm() {
#ifdef DTRUN_TEST_SANITIZED
  const char* value = std::getenv("DTRUN_TEST_LONG");
  return value != nullptr && std::string_view(value) == "1";
#else
  return true;
#endif
}

}  // namespace dtrun::testing
