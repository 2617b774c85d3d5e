// dtrun's man page sections and its bash completion, written from the CLI11 app that parses the
// command line (every command, option, topic and help line) and optionValues() (each option's
// words), so neither can name an option the parser lacks or miss one it has. Pure.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace dtrun::launcher {

// roff for the man page's OPTIONS (topic by topic, as --help) and COMMANDS (each subcommand, its
// arguments and options); docs/man/dtrun.1.in holds the prose around them, and
// docs/man/CMakeLists.txt puts the two together into dtrun.1 at build time.
std::string manSections(const CLI::App& app);

// A bash script defining _dtrun and `complete -F _dtrun dtrun`: every option of every command,
// each option's words (after --option=, --option, and after a comma in a list), the
// subcommands, and files for the program and its arguments.
std::string bashCompletion(const CLI::App& app);

}  // namespace dtrun::launcher
