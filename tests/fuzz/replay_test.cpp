// Every fuzz target on its seed corpus and on every input that once broke it, in every build
// (release, ASan+UBSan): a crash that fuzzing found stays fixed without clang or libFuzzer.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "fuzz/fuzz_targets.h"

namespace {

namespace fs = std::filesystem;

const dtrun::fuzz::Target& target(std::string_view name) {
  for (const auto& t : dtrun::fuzz::kTargets) {
    if (t.name == name) {
      return t;
    }
  }
  throw std::runtime_error("no fuzz target " + std::string(name));
}

// Runs the target on every file of tests/fuzz/<folder>/<target>/; returns how many there were.
std::size_t replay(std::string_view name, const char* folder) {
  const fs::path dir = fs::path(DTRUN_SOURCE_DIR) / "tests/fuzz" / folder / std::string(name);
  if (!fs::is_directory(dir)) {
    return 0;
  }
  std::size_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) {
      continue;
    }
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO("input " << entry.path().string());
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the targets take raw bytes
    target(name).run(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++count;
  }
  return count;
}

void replayAll(std::string_view name) {
  CHECK(replay(name, "corpus") > 0);  // the seed corpus is in the repository
  replay(name, "regressions");
}

void run(std::string_view name, std::string_view bytes) {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the targets take raw bytes
  target(name).run(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

TEST_CASE("store_request: seed corpus and past crashes", "[fuzz]") { replayAll("store_request"); }
TEST_CASE("round_codec: seed corpus and past crashes", "[fuzz]") { replayAll("round_codec"); }
TEST_CASE("launch_options: seed corpus and past crashes", "[fuzz]") {
  replayAll("launch_options");
}
TEST_CASE("hostlist: seed corpus and past crashes", "[fuzz]") { replayAll("hostlist"); }
