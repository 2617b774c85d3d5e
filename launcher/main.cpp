// dtrun: the launcher's entry point. Parses the command line and hands over; nothing escapes.
#include <exception>
#include <iostream>

#include "dtrun/launcher.h"

int main(int argc, char** argv) {
  try {
    CLI::App app{"dtrun: a torchrun-compatible launcher and elastic agent", "dtrun"};
    auto runStore = dtrun::launcher::addStoreCommand(app);
    auto runLaunch = dtrun::launcher::addLaunchCommand(app);  // after the subcommands
    try {
      app.parse(dtrun::launcher::argumentsForParse(argc, argv));
    } catch (const CLI::ParseError& e) {
      return dtrun::launcher::reportParseError(app, e);
    }
    return app.got_subcommand("store") ? runStore() : runLaunch();
  } catch (const std::exception& e) {
    std::cerr << "dtrun: " << e.what() << "\n";
    return 1;
  }
}
