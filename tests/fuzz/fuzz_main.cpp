// libFuzzer's entry point for one target; DTRUN_FUZZ_TARGET names it (see CMakeLists.txt).
#include <cstddef>
#include <cstdint>

#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dtrun::fuzz::DTRUN_FUZZ_TARGET(data, size);
  return 0;
}
