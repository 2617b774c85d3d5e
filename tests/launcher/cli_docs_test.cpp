// The man page's sections and the bash completion, written from the app as main builds it: every
// option of every command is in the page, the hidden --print-man is in neither, and the
// completion, sourced into a real bash, offers after each option exactly its words (optionValues()
// for the launch's, the CLI::IsMember set for a command's) and nothing after a flag.
#include "cli_docs.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "dtrun/launcher.h"

#include "option_table.h"
#include "support/scoped.h"

namespace {

namespace launcher = dtrun::launcher;

// main's app: every command, then the launch's options.
struct MainApp {
  CLI::App app{"dtrun: a torchrun-compatible launcher and elastic agent", "dtrun"};
  MainApp() {
    launcher::addStoreCommand(app);
    launcher::addReportCommand(app);
    launcher::addBundleCommand(app, "dtrun test");
    launcher::addGpusCommand(app);
    launcher::addDocCommands(app);
    launch = std::make_unique<launcher::LaunchCommand>(app);
  }
  std::unique_ptr<launcher::LaunchCommand> launch;
};

std::vector<const CLI::App*> commandsOf(const CLI::App& app) {
  std::vector<const CLI::App*> commands = {&app};
  for (const CLI::App* sub : app.get_subcommands({})) {
    commands.push_back(sub);
  }
  return commands;
}

std::string roffName(std::string name) {
  std::string out;
  for (const char c : name) {
    out += c == '-' ? std::string("\\-") : std::string(1, c);
  }
  return out;
}

std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("the man page has every option of every command, and no hidden one", "[unit][launcher]") {
  MainApp main;
  const std::string page = launcher::manSections(main.app);
  int names = 0;
  for (const CLI::App* command : commandsOf(main.app)) {
    if (command != &main.app) {
      INFO(command->get_name());
      CHECK(page.find(".SS \"dtrun " + command->get_name() + " [") != std::string::npos);
    }
    for (const CLI::Option* option : command->get_options()) {
      std::vector<std::string> spellings;
      for (const std::string& s : option->get_snames()) {
        spellings.push_back("-" + s);
      }
      for (const std::string& l : option->get_lnames()) {
        spellings.push_back("--" + l);
      }
      for (const std::string& name : spellings) {
        INFO(command->get_name() << " " << name);
        const bool hidden = option->get_group().empty();
        CHECK((page.find("\\fB" + roffName(name) + "\\fR") != std::string::npos) != hidden);
        ++names;
      }
    }
  }
  CHECK(names > 140);
  CHECK(page.find("print\\-man") == std::string::npos);  // hidden, as in --help
  CHECK(launcher::bashCompletion(main.app).find("print-man") == std::string::npos);
  // Topics in --help's order, then the commands.
  CHECK(page.find(".SS Workers") < page.find(".SS Placement"));
  CHECK(page.find(".SS Placement") < page.find(".SH COMMANDS"));
}

TEST_CASE("the completion, in a real bash, offers each option's words", "[unit][launcher]") {
  MainApp main;
  dtrun::testing::TempDir dir;
  std::ofstream(dir.path() / "dtrun.bash") << launcher::bashCompletion(main.app);

  // Expected: per "<command> <option>", its words sorted; "-" for none (files, and there are
  // none).
  std::map<std::string, std::string> expected;
  std::string driver = "source " + (dir.path() / "dtrun.bash").string() + " || exit 1\n";
  for (const CLI::App* command : commandsOf(main.app)) {
    const std::string name = command == &main.app ? "" : command->get_name();
    for (const CLI::Option* option : command->get_options()) {
      if (option->get_group().empty() || option->get_positional() ||
          option->get_expected_max() == 0) {
        continue;  // hidden, an argument, or a flag (after which come the next option's words)
      }
      std::vector<std::string> words;
      if (name == "store" && option->get_lnames().front() == "log-level") {
        words = launcher::optionValues("log_level");
      } else if (name.empty()) {
        std::string dest = option->get_lnames().front();
        std::replace(dest.begin(), dest.end(), '-', '_');
        words = launcher::optionValues(dest);
      }
      std::sort(words.begin(), words.end());
      std::string line;
      for (const std::string& w : words) {
        line += (line.empty() ? "" : " ") + w;
      }
      const std::string key = name + " " + option->get_name();
      expected[key] = words.empty() ? "-" : line;
      // Words after the option, as its own word: COMP_WORDS=(dtrun [command] option "").
      driver += "COMP_WORDS=(dtrun " + (name.empty() ? "" : name + " ") + option->get_name() +
                " ''); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _dtrun; w=$(printf '%s\\n' "
                "\"${COMPREPLY[@]}\" | grep -v '^$' | LC_ALL=C sort | tr '\\n' ' '); echo \"" +
                key + "=${w% }\"\n";
    }
  }
  std::ofstream(dir.path() / "driver.sh") << driver;
  // An empty directory: an option without words offers files, and there are none.
  const std::filesystem::path empty = dir.path() / "empty";
  std::filesystem::create_directory(empty);
  const std::string command = "cd " + empty.string() + " && bash " +
                              (dir.path() / "driver.sh").string() + " > " +
                              (dir.path() / "out").string() + " 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  std::map<std::string, std::string> got;
  std::istringstream lines(readFile(dir.path() / "out"));
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    INFO(line);
    REQUIRE(eq != std::string::npos);
    const std::string words = line.substr(eq + 1);
    got[line.substr(0, eq)] = words.empty() ? "-" : words;
  }
  int withWords = 0;
  for (const auto& [key, words] : expected) {
    INFO(key);
    CHECK(got[key] == words);
    withWords += words == "-" ? 0 : 1;
  }
  CHECK(withWords >= 15);
  CHECK(expected.size() > 60);  // every option that takes a value, of every command
}
