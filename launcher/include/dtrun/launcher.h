// The dtrun command line: subcommands register their options on a CLI11 app and run after
// parsing. Single-threaded set-up; `run` blocks until the subcommand finishes.
#pragma once

#include <CLI/CLI.hpp>

namespace dtrun::launcher {

// `dtrun store`: serves a rendezvous store alone (a dedicated store host, or tests). Registers
// the subcommand on `app`; after parsing, call the returned function for the exit code.
std::function<int()> addStoreCommand(CLI::App& app);

}  // namespace dtrun::launcher
