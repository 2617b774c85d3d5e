// Long and short forms of the slowest checks. A sanitizer tree runs them 3-10x slower than a
// release one: there the short form, which still takes every code path once (each transport
// set-up at one world size, each world size on one backend, the longest length of the check
// matrix for one dtype per element size: ops_checks.h's Form), is the default. DTRUN_TEST_LONG=1
// asks for the long form, DTRUN_TEST_LONG=0 for the short one, in any tree; CI (scripts/test.sh)
// runs the short forms everywhere, ctest by hand in a release tree the long ones.
#pragma once

#include <cstdlib>
#include <string_view>

namespace dtrun::testing {

inline bool longForm() {
  const char* value = std::getenv("DTRUN_TEST_LONG");
  if (value != nullptr && (std::string_view(value) == "0" || std::string_view(value) == "1")) {
    return std::string_view(value) == "1";
  }
#ifdef DTRUN_TEST_SANITIZED
  return false;
#else
  return true;
#endif
}

}  // namespace dtrun::testing
