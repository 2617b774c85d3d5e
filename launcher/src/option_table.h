// torchrun's options, as one table: each option's dest, spellings (dash and underscore),
// PET_<DEST> variable and help text; and the CLI11 glue that registers them and reports parse
// errors (argumentsForParse and reportParseError are public: dtrun/launcher.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "launch_model.h"

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
// The heading `dtrun --help` lists it under ("Workers", "Placement", ...); "" for none.
std::string_view optionTopic(std::string_view dest);

// The words `dest` takes as they are ("static", "c10d", "etcd" for rdzv_backend), for the man page
// and the shell's completion; empty for an option that takes only numbers, paths or names.
std::vector<std::string> optionValues(std::string_view dest);

// Registers every torchrun option (dash and underscore spellings, -m, -r, -t) plus --log-level
// on `app`; parsing stores their text into `raw` (which must outlive the parse). Enables
// app.prefix_command() so arguments after the entrypoint reach the program untouched.
void addLaunchOptions(CLI::App& app, RawOptions& raw);

// The one line printed for a CLI11 parse error (without "dtrun: "), newlines folded.
std::string parseErrorLine(const CLI::ParseError& error);

}  // namespace dtrun::launcher
