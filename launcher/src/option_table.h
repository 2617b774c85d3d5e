// torchrun's options, as one table: each option's dest, spellings (dash and underscore),
// PET_<DEST> variable and help text. The CLI11 glue (addLaunchOptions, argumentsForParse,
// parseErrorLine, reportParseError) is declared in launch_options.h and dtrun/launcher.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtrun::launcher {

constexpr std::string_view kUsage = "usage: dtrun [options] <entrypoint> [args...]";
constexpr int kUsageError = 2;  // a bad command line, as argparse exits

enum class Kind : std::uint8_t { kValue, kFlag };

// One torchrun option. `dest` is argparse's attribute name: the underscore spelling, the dash
// spelling (dest with '-') and the PET_<DEST> environment variable all derive from it.
struct OptionSpec {
  std::string_view dest;
  std::string_view shortName;  // "-m", "-r", "-t" or ""
  Kind kind;
  bool hasEnv;  // torchrun's action=env / check_env
  std::string_view help;
};

// The option whose dest is `dest`; nullptr for none.
const OptionSpec* findSpec(std::string_view dest);
// How messages name an option: "--nproc_per_node" ("--log-level" for dtrun's own).
std::string flagName(std::string_view dest);
// Its environment variable: "PET_NPROC_PER_NODE".
std::string envName(std::string_view dest);

}  // namespace dtrun::launcher
