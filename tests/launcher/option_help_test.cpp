// `dtrun --help` by topic: every torchrun and dtrun option sits under one heading, and the
// headings come in the order a new user needs them (what to run first).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>

#include "launch_model.h"
#include "option_table.h"

namespace launcher = dtrun::launcher;

TEST_CASE("every option has a topic, and --help lists them topic by topic", "[unit][launcher]") {
  CLI::App app("dtrun");
  launcher::RawOptions raw;
  launcher::addLaunchOptions(app, raw);
  std::vector<std::string> ungrouped;
  for (const CLI::Option* option : app.get_options()) {
    const std::string& group = option->get_group();
    if (option->get_name() != "--help" &&
        (group.empty() || group == "Options" || group == "OPTIONS")) {
      ungrouped.push_back(option->get_name());
    }
  }
  INFO("options without a topic: "
       << Catch::StringMaker<std::vector<std::string>>::convert(ungrouped));
  CHECK(ungrouped.empty());

  const std::string help = app.help();
  std::size_t at = 0;
  for (const char* topic :
       {"Workers:", "Nodes and rendezvous:", "Restarts and stopping:", "Placement:",
        "Logs and console:", "Diagnosis:", "Health checks:", "Schedulers and ssh:"}) {
    const auto found = help.find(topic, at);
    INFO(topic << " after offset " << at);
    REQUIRE(found != std::string::npos);
    at = found;
  }
  // An option is under its own heading, not only somewhere in the text.
  const auto placement = help.find("Placement:");
  const auto logs = help.find("Logs and console:");
  const auto numa = help.find("--numa-binding");
  CHECK((numa > placement && numa < logs));
  CHECK(launcher::optionTopic("hang_timeout") == "Diagnosis");
  CHECK(launcher::optionTopic("no_such_option").empty());
}
