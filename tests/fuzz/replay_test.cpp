// Every fuzz target on its seed corpus and on every input that once broke it, in every build
// (release, ASan+UBSan): a crash that fuzzing found stays fixed without clang or libFuzzer.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "fuzz/fuzz_targets.h"
#include "round_codec.h"

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
TEST_CASE("launch_options: seed corpus and past crashes", "[fuzz]") { replayAll("launch_options"); }
TEST_CASE("hostlist: seed corpus and past crashes", "[fuzz]") { replayAll("hostlist"); }

// Found by fuzz_round_codec: a JSON float where an int belongs went through nlohmann's plain
// cast (undefined behaviour; UBSan aborts). A store value is foreign input: refuse it instead.
TEST_CASE("round_codec: an exit code of 3.3e63 is refused rather than cast", "[fuzz][regression]") {
  CHECK_FALSE(dtrun::rdzv::detail::decodeEnd(
                  R"({"kind":"closed","message":"","detail":"","exit_code":3.3e63})")
                  .has_value());
  run("round_codec", "\x01{\"exit_code\":1e300}");
}

// Found by reading the keeper with the fuzz target's invariant: deadAfter() multiplies the
// keep-alive interval by the attempts, so decoded settings must stay within --rdzv_conf's bounds.
TEST_CASE("round_codec: keep-alive settings that overflow or are negative are refused",
          "[fuzz][regression]") {
  const std::string base =
      R"({"min":1,"max":2,"max_restarts":0,"join_ms":1,"last_call_ms":1,"close_ms":1,)";
  CHECK_FALSE(dtrun::rdzv::detail::decodeSettings(
                  base + R"("keep_alive_ms":9223372036854775807,"keep_alive_max_attempt":3})")
                  .has_value());
  CHECK_FALSE(dtrun::rdzv::detail::decodeSettings(
                  base + R"("keep_alive_ms":5000,"keep_alive_max_attempt":-3})")
                  .has_value());
  CHECK(dtrun::rdzv::detail::decodeSettings(base +
                                            R"("keep_alive_ms":5000,"keep_alive_max_attempt":3})")
            .has_value());
}
