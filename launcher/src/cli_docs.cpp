#include "cli_docs.h"

#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>
#include <string_view>
#include <vector>

#include "dtrun/launcher.h"

#include "option_table.h"

namespace dtrun::launcher {
namespace {

// CLI11 hides an option whose group is empty (dtrun's --print-man); the docs hide it too.
bool shown(const CLI::Option* option) { return !option->get_group().empty(); }

bool takesValue(const CLI::Option* option) { return option->get_expected_max() != 0; }

std::vector<std::string> namesOf(const CLI::Option* option) {
  std::vector<std::string> names;
  for (const std::string& name : option->get_snames()) {
    names.push_back("-" + name);
  }
  for (const std::string& name : option->get_lnames()) {
    names.push_back("--" + name);
  }
  return names;
}

std::vector<std::string> splitWords(std::string_view text, char separator) {
  std::vector<std::string> words;
  while (!text.empty()) {
    const auto at = text.find(separator);
    if (at != 0) {
      words.emplace_back(text.substr(0, at));
    }
    text = at == std::string_view::npos ? std::string_view() : text.substr(at + 1);
  }
  return words;
}

// The words an option takes as they are: a CLI::IsMember check's set, which CLI11 shows in the
// type name as "TEXT:{a,b,c}" (the subcommands' options), else optionValues() for the launch's.
std::vector<std::string> wordsOf(const CLI::App& command, const CLI::Option* option) {
  const std::string type = option->get_type_name();
  const auto first = type.find('{');
  const auto last = type.find('}', first);
  if (first != std::string::npos && last != std::string::npos) {
    const std::string_view words = type;
    return splitWords(words.substr(first + 1, last - first - 1), ',');
  }
  if (command.get_parent() != nullptr || option->get_lnames().empty()) {
    return {};
  }
  std::string dest = option->get_lnames().front();
  std::replace(dest.begin(), dest.end(), '-', '_');
  return optionValues(dest);
}

std::vector<const CLI::App*> commandsOf(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App* sub) { return !sub->get_group().empty(); });
}

// Text as roff reads it: a backslash printed as one, every '-' a minus sign (so an option copied
// from the page is what the shell needs), and no line taken for a request.
std::string roff(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) {
    out.insert(0, "\\&");
  }
  return out;
}

// One option as a tagged paragraph: its spellings in bold, VALUE when it takes one, its help.
void manOption(std::string& out, const CLI::Option* option) {
  std::string tag;
  for (const std::string& name : namesOf(option)) {
    tag += (tag.empty() ? "\\fB" : ", \\fB") + roff(name) + "\\fR";
  }
  if (takesValue(option)) {
    tag += "=\\fIVALUE\\fR";
  }
  std::string help = option->get_description();
  if (const std::string fallback = option->get_default_str(); !fallback.empty()) {
    help += " (default " + fallback + ")";
  }
  out += ".TP\n" + tag + "\n" + roff(help) + "\n";
}

std::string usageOf(const CLI::App& command) {
  std::string usage = "dtrun " + command.get_name() + " [\\fIoptions\\fR]";
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_positional()) {
      const std::string name = "\\fI" + roff(option->get_name()) + "\\fR";
      usage += " " + (option->get_required() ? name : "[" + name + "]");
    }
  }
  return usage;
}

// Single quotes for the generated script: every name and word here is plain, but a quote
// would end the string.
std::string shellQuoted(std::string_view text) {
  std::string out = "'";
  for (const char c : text) {
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return out + "'";
}

std::string spaceJoined(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& word : words) {
    out += (out.empty() ? "" : " ") + word;
  }
  return out;
}

// The completion's logic; the tables above it (_dtrun_commands, _dtrun_options, _dtrun_value)
// come from the app. Bash splits "--opt=value" into "--opt", "=", "value" (COMP_WORDBREAKS has
// '='); without that split the word is whole, and the answers repeat "--opt=".
constexpr std::string_view kCompletionLogic = R"bash(
# _dtrun_files <typed> [<prefix>]: the files (and directories) that start with <typed>.
_dtrun_files() {
  local file
  compopt -o filenames 2>/dev/null || true
  while IFS= read -r file; do
    COMPREPLY+=("${2-}$file")
  done < <(compgen -f -- "$1")
}

# _dtrun_words <prefix> <typed> <words>: the words that start with <typed>; in a comma list, the
# words for the item after the last comma. No words: files.
_dtrun_words() {
  local prefix=$1 typed=$2 head='' word
  if [[ -z $3 ]]; then
    _dtrun_files "$typed" "$prefix"
    return 0
  fi
  if [[ $typed == *,* ]]; then
    head=${typed%,*},
    typed=${typed##*,}
  fi
  for word in $(compgen -W "$3" -- "$typed"); do
    COMPREPLY+=("$prefix$head$word")
  done
}

_dtrun() {
  local cword=$COMP_CWORD cur=${COMP_WORDS[COMP_CWORD]} command='' i word option='' typed=''
  local prefix='' REPLY=''
  COMPREPLY=()
  # The words before the cursor: options and their values, the subcommand, or the program
  # (whose own arguments follow it: files from there on).
  for ((i = 1; i < cword; i++)); do
    word=${COMP_WORDS[i]}
    if [[ $word == -- ]]; then
      _dtrun_files "$cur"
      return 0
    elif [[ $word == -* ]]; then
      if [[ $word != *=* ]]; then
        if [[ ${COMP_WORDS[i + 1]-} == = ]]; then
          ((i += 2))
        elif _dtrun_value "$command" "$word"; then
          ((i += 1))
        fi
      fi
    elif [[ -z $command && " $_dtrun_commands " == *" $word "* ]]; then
      command=$word
    elif [[ -z $command ]]; then
      _dtrun_files "$cur"
      return 0
    fi
  done
  local prev=${COMP_WORDS[cword - 1]-}
  if [[ $cur == = && $prev == -* ]]; then
    option=$prev
  elif [[ $prev == = && $cword -ge 2 ]]; then
    option=${COMP_WORDS[cword - 2]}
    typed=$cur
  elif [[ $cur == -*=* ]]; then
    option=${cur%%=*}
    typed=${cur#*=}
    prefix=$option=
  elif [[ $prev == -* && $prev != *=* ]]; then
    option=$prev
    typed=$cur
  fi
  if [[ -n $option ]] && _dtrun_value "$command" "$option"; then
    _dtrun_words "$prefix" "$typed" "$REPLY"
    return 0
  fi
  if [[ $cur == -* ]]; then
    _dtrun_options "$command"
    mapfile -t COMPREPLY < <(compgen -W "$REPLY" -- "$cur")
  elif [[ -z $command ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$_dtrun_commands" -- "$cur")
    _dtrun_files "$cur"
  elif _dtrun_value "$command" ""; then
    _dtrun_words "" "$cur" "$REPLY"
  else
    _dtrun_files "$cur"
  fi
  return 0
}
complete -F _dtrun dtrun
)bash";

}  // namespace

std::string manSections(const CLI::App& app) {
  std::string out = ".SH OPTIONS\n";
  std::vector<std::string> topics;
  for (const CLI::Option* option : app.get_options(shown)) {
    if (std::find(topics.begin(), topics.end(), option->get_group()) == topics.end()) {
      topics.push_back(option->get_group());
    }
  }
  for (const std::string& topic : topics) {
    out += ".SS " + roff(topic == "Options" ? "General" : topic) + "\n";
    for (const CLI::Option* option : app.get_options(shown)) {
      if (option->get_group() == topic) {
        manOption(out, option);
      }
    }
  }
  out += ".SH COMMANDS\n";
  for (const CLI::App* command : commandsOf(app)) {
    out += ".SS \"" + usageOf(*command) + "\"\n" + roff(command->get_description()) + "\n";
    for (const CLI::Option* option : command->get_options(shown)) {
      if (option->get_positional()) {
        out += ".TP\n\\fI" + roff(option->get_name()) + "\\fR\n" + roff(option->get_description()) +
               "\n";
      }
    }
    for (const CLI::Option* option : command->get_options(shown)) {
      if (!option->get_positional()) {
        manOption(out, option);
      }
    }
  }
  return out;
}

std::string bashCompletion(const CLI::App& app) {
  std::vector<const CLI::App*> commands = {&app};
  std::vector<std::string> names;
  for (const CLI::App* command : commandsOf(app)) {
    commands.push_back(command);
    names.push_back(command->get_name());
  }
  std::string out =
      "# bash completion for dtrun, written by `dtrun completion bash` from the options dtrun\n"
      "# parses. Installed as share/bash-completion/completions/dtrun; or: source <(dtrun "
      "completion bash)\n\n_dtrun_commands=" +
      shellQuoted(spaceJoined(names)) + "\n\n";
  out += "# _dtrun_options <command>: REPLY = the options of <command> (\"\": the launch's).\n";
  out += "_dtrun_options() {\n  case $1 in\n";
  for (const CLI::App* command : commands) {
    std::vector<std::string> all;
    for (const CLI::Option* option : command->get_options(shown)) {
      const auto spellings = namesOf(option);
      all.insert(all.end(), spellings.begin(), spellings.end());
    }
    out += "    " + shellQuoted(command == &app ? "" : command->get_name()) +
           ") REPLY=" + shellQuoted(spaceJoined(all)) + " ;;\n";
  }
  out += "  esac\n}\n\n";
  out +=
      "# _dtrun_value <command> <option>: true when <option> takes a value (\"\": the command's\n"
      "# argument), with REPLY = its words (\"\": files); false for a flag or an unknown option.\n";
  out += "_dtrun_value() {\n  case \"$1 $2\" in\n";
  for (const CLI::App* command : commands) {
    const std::string key = command == &app ? "" : command->get_name();
    for (const CLI::Option* option : command->get_options(shown)) {
      std::vector<std::string> patterns;
      if (option->get_positional()) {
        patterns.push_back(shellQuoted(key + " "));
      } else if (takesValue(option)) {
        for (const std::string& name : namesOf(option)) {
          patterns.push_back(shellQuoted(std::string(key).append(" ").append(name)));
        }
      }
      if (patterns.empty() || (option->get_positional() && wordsOf(*command, option).empty())) {
        continue;  // a flag; an argument without words is files, the fallback
      }
      std::string alternatives;
      for (const std::string& pattern : patterns) {
        alternatives += (alternatives.empty() ? "" : " | ") + pattern;
      }
      out += "    " + alternatives +
             ") REPLY=" + shellQuoted(spaceJoined(wordsOf(*command, option))) + " ;;\n";
    }
  }
  out += "    *) return 1 ;;\n  esac\n}\n";
  out += kCompletionLogic;
  return out;
}

std::function<int()> addDocCommands(CLI::App& app) {
  auto shell = std::make_shared<std::string>();
  auto printMan = std::make_shared<bool>(false);
  CLI::App* completion = app.add_subcommand(
      "completion",
      "Print dtrun's completion script for the shell (bash): source <(dtrun completion bash)");
  completion->add_option("shell", *shell, "The shell: bash")
      ->required()
      ->check(CLI::IsMember({"bash"}));
  // Hidden (no group): docs/man/CMakeLists.txt runs it to write dtrun.1 at build time.
  app.add_flag("--print-man", *printMan, "Print the man page's OPTIONS and COMMANDS (roff)")
      ->group("");
  return [&app, completion, shell, printMan] {  // CLI11 writes into shell and printMan
    if (completion->parsed()) {
      std::cout << bashCompletion(app) << std::flush;
      return std::cout ? 0 : 1;
    }
    if (*printMan) {
      std::cout << manSections(app) << std::flush;
      return std::cout ? 0 : 1;
    }
    return -1;
  };
}

}  // namespace dtrun::launcher
