#include <cstdio>
#include <cstdlib>

#include "fuzz_targets.h"

namespace dtrun::fuzz {

void invariantBroken(std::string_view target, std::string_view what) {
  static_cast<void>(std::fprintf(stderr, "fuzz target %.*s: invariant broken: %.*s\n",
                                 static_cast<int>(target.size()), target.data(),
                                 static_cast<int>(what.size()), what.data()));
  std::abort();
}

void assertOneLineError(std::string_view target, const std::string& message) {
  assertInvariant(!message.empty(), target, "an error without a message");
  assertInvariant(message.find('\n') == std::string::npos, target,
                  "an error message spans several lines: " + message);
}

}  // namespace dtrun::fuzz
