// dtrun: the launcher's entry point, and the program's flow: parse the command line, then either
// serve `dtrun store`, or plan the launch (validate) and print it (--dry-run) or run the agent.
// Nothing escapes: an unexpected exception is one line and exit 1.
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "dtrun/launcher.h"

#include "version.h"

namespace launcher = dtrun::launcher;

int main(int argc, char** argv) {
  try {
    CLI::App app{"dtrun: a torchrun-compatible launcher and elastic agent", "dtrun"};
    app.set_version_flag("--version", std::string(launcher::versionLine()));
    const auto runStore = launcher::addStoreCommand(app);
    const auto runReport = launcher::addReportCommand(app);
    const auto runBundle = launcher::addBundleCommand(app, launcher::versionLine());
    const auto runGpus = launcher::addGpusCommand(app);
    const auto runDocs = launcher::addDocCommands(app);  // dtrun completion bash, --print-man
    const auto runTop = launcher::addTopCommand(app);
    const auto runStacks = launcher::addStacksCommand(app);
    launcher::LaunchCommand launch(app);  // torchrun's options; after the subcommands
    try {
      app.parse(launcher::argumentsForParse(argc, argv));
    } catch (const CLI::ParseError& e) {
      return launcher::reportParseError(app, e);  // --help: 0; else one line, 2
    }
    if (const int docs = runDocs(); docs >= 0) {
      return docs;
    }
    if (app.got_subcommand("store")) {
      return runStore();  // until SIGINT, SIGTERM or SIGHUP
    }
    if (app.got_subcommand("report")) {
      return runReport();
    }
    if (app.got_subcommand("bundle")) {
      return runBundle();
    }
    if (app.got_subcommand("gpus")) {
      return runGpus();
    }
    if (app.got_subcommand("top")) {
      return runTop();
    }
    if (app.got_subcommand("stacks")) {
      return runStacks();
    }
    if (const std::optional<int> refused = launch.plan()) {
      return *refused;  // one line said why: 2 (a bad option) or 127 (no such program)
    }
    launch.prepareProcess();  // signals blocked before any thread; logging; notices
    return launch.dryRun() ? launch.printDryRun()
                           : launch.runAgent(launcher::versionLine(),
                                             std::vector<std::string>(argv, argv + argc));
  } catch (const std::exception& e) {
    std::cerr << "dtrun: " << e.what() << "\n";
    return 1;
  }
}
