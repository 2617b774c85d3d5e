// The dtrun command line: `dtrun [options] <entrypoint> [args...]` (torchrun's options) and the
// `dtrun store` subcommand register on one CLI11 app; main parses it and takes the steps below in
// order. Single-threaded set-up; running the agent or the store blocks until it finishes.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace dtrun::launcher {

struct RawOptions;
struct LaunchPlan;
struct SshPlan;

// `dtrun store`: serves a rendezvous store alone (a dedicated store host, or tests). Registers
// the subcommand on `app`; after parsing, call the returned function for the exit code.
std::function<int()> addStoreCommand(CLI::App& app);
// `dtrun report FILE --html OUT`; the function runs it once parsed (else returns -1).
std::function<int()> addReportCommand(CLI::App& app);
// `dtrun bundle RUN_DIR [--output FILE]`: one archive of a run for a person or a bug report,
// which names `versionLine` (--version's) as what packed it.
std::function<int()> addBundleCommand(CLI::App& app, std::string_view versionLine);
// `dtrun gpus [RUN_DIR] [--json]`: every GPU NVML sees and the processes on it, named by rank
// when RUN_DIR is a run's directory (dtrun/gpu_readings.h); DTRUN_NVML_LIBRARY names the library.
std::function<int()> addGpusCommand(CLI::App& app);
// `dtrun top ADDR` (alias `dtrun status`): the live view of a running job from its --status_port.
std::function<int()> addTopCommand(CLI::App& app);
// `dtrun stacks ADDR`: every running worker's stacks, grouped, from the job's --status_port.
std::function<int()> addStacksCommand(CLI::App& app);

// `dtrun completion bash` (the shell's completion script) and the hidden `dtrun --print-man` (the
// man page's generated sections), both written from `app` as it is when they run: call the
// returned function after parsing (-1 when neither was asked for), when every command and option
// is registered.
std::function<int()> addDocCommands(CLI::App& app);

// `dtrun [options] <entrypoint> [args...]`, step by step: plan(), then prepareProcess(), then
// printDryRun() or runAgent(). Lives in main, next to the app it registers on.
class LaunchCommand {
 public:
  // Registers torchrun's options on the top level of `app` and stops parsing at the entrypoint,
  // so its arguments reach the program untouched. Construct after addStoreCommand; `app` must
  // outlive this object.
  explicit LaunchCommand(CLI::App& app);
  ~LaunchCommand();
  LaunchCommand(const LaunchCommand&) = delete;
  LaunchCommand& operator=(const LaunchCommand&) = delete;
  LaunchCommand(LaunchCommand&&) = delete;  // one per app, beside it in main
  LaunchCommand& operator=(LaunchCommand&&) = delete;

  // validate(): the parsed options and this host's facts (read here, once) into the plan, the
  // program resolved to the file exec'd. When the launch is refused, prints one line on stderr
  // and returns the exit code: 2 for a bad option (as argparse), 127 when the program cannot be
  // found. nullopt once planned.
  [[nodiscard]] std::optional<int> plan();

  // The process set up for the plan, before any thread starts: the signals the agent takes
  // blocked (threads inherit the mask), logging started, torchrun's notices and the warnings
  // printed.
  void prepareProcess() const;

  [[nodiscard]] bool dryRun() const;
  // --dry-run: prints the plan (banner, rank table, each worker's environment); returns 0.
  int printDryRun() const;
  // Logs the launch banner and runs the agent, which puts `versionLine` (--version's) in its
  // run report; returns dtrun's exit code.
  // `commandLine` (dtrun's argv) goes into the run's record, run.json, secrets redacted.
  int runAgent(std::string_view versionLine, std::vector<std::string> commandLine) const;

 private:
  CLI::App& app_;
  std::unique_ptr<RawOptions> raw_;  // CLI11 writes into it while parsing
  std::unique_ptr<LaunchPlan> plan_;
  std::unique_ptr<SshPlan> ssh_;  // --hostfile/--hosts: a launch over ssh instead of plan_
};

// argv as CLI11's App::parse(std::vector<std::string>&&) takes it (reversed, without the program
// name), except that argparse's `--option=` before the entrypoint stays an empty value: CLI11
// alone would take the next word (the entrypoint) as the value.
std::vector<std::string> argumentsForParse(int argc, const char* const* argv);

// Reports a CLI11 parse error: --help prints the help and returns 0; anything else prints one
// line "dtrun: <what>" on stderr and returns 2 (torchrun's argparse exits 2 as well).
int reportParseError(const CLI::App& app, const CLI::ParseError& error);

}  // namespace dtrun::launcher
