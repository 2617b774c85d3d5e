// dtrun's version line for --version: the project version and the git commit the binary was
// built from, written at build time by cmake/DtrunVersion.cmake. Thread-safe (a constant).
#pragma once

#include <string_view>

namespace dtrun::launcher {

// "dtrun 0.1.0 (commit 0123456789ab)"; "-dirty" after the commit when tracked files differed
// from it; "(commit unknown)" when built outside a git checkout.
std::string_view versionLine();

}  // namespace dtrun::launcher
