// The dtrun command line: `dtrun [options] <entrypoint> [args...]` (torchrun's options) and the
// `dtrun store` subcommand register on one CLI11 app and run after parsing. Single-threaded
// set-up; the returned functions block until the launch or the subcommand finishes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dtrun::launcher {

// `dtrun store`: serves a rendezvous store alone (a dedicated store host, or tests). Registers
// the subcommand on `app`; after parsing, call the returned function for the exit code.
std::function<int()> addStoreCommand(CLI::App& app);

// `dtrun [options] <entrypoint> [args...]`: registers torchrun's options on the top level of
// `app` and stops parsing at the entrypoint, so its arguments reach the program untouched. Call
// after addStoreCommand. When no subcommand was parsed, call the returned function: it checks the
// options (a bad one: one line on stderr, exit 2), runs the agent and returns dtrun's exit code.
// `app` must outlive the returned function.
std::function<int()> addLaunchCommand(CLI::App& app);

// argv as CLI11's App::parse(std::vector<std::string>&&) takes it (reversed, without the program
// name), except that argparse's `--option=` before the entrypoint stays an empty value: CLI11
// alone would take the next word (the entrypoint) as the value.
std::vector<std::string> argumentsForParse(int argc, const char* const* argv);

// Reports a CLI11 parse error: --help prints the help and returns 0; anything else prints one
// line "dtrun: <what>" on stderr and returns 2 (torchrun's argparse exits 2 as well).
int reportParseError(const CLI::App& app, const CLI::ParseError& error);

}  // namespace dtrun::launcher
