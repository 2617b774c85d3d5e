// dtrun: the launcher's entry point. Parses the command line and hands over; nothing escapes.
#include <exception>
#include <iostream>

#include "dtrun/launcher.h"

int main(int argc, char** argv) {
  try {
    CLI::App app{"dtrun: a torchrun-compatible launcher and elastic agent"};
    app.require_subcommand(1);
    auto runStore = dtrun::launcher::addStoreCommand(app);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      const int code = app.exit(e);
      return code == 0 ? 0 : 2;  // usage errors exit 2, as torchrun's argparse does
    }
    return runStore();
  } catch (const std::exception& e) {
    std::cerr << "dtrun: " << e.what() << "\n";
    return 1;
  }
}
