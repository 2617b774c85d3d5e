#include "console_lines.h"

#include <algorithm>

#include "dtrun/agent.h"

namespace dtrun::agent {

namespace {

// Calls `visit(name)` for every "${name}" of `pattern`, `literal(text)` for the text between.
template <typename Literal, typename Visit>
void scanVariables(std::string_view pattern, const Literal& literal, const Visit& visit) {
  while (!pattern.empty()) {
    const auto open = pattern.find("${");
    const auto close = open == std::string_view::npos ? open : pattern.find('}', open + 2);
    if (close == std::string_view::npos) {
      literal(pattern);
      return;
    }
    literal(pattern.substr(0, open));
    visit(pattern.substr(open + 2, close - open - 2));
    pattern.remove_prefix(close + 1);
  }
}

}  // namespace

std::string unknownLinePrefixVariable(std::string_view pattern) {
  std::string unknown;
  scanVariables(
      pattern, [](std::string_view) {},
      [&unknown](std::string_view name) {
        if (unknown.empty() && std::find(kLinePrefixVariables.begin(), kLinePrefixVariables.end(),
                                         name) == kLinePrefixVariables.end()) {
          unknown = "${" + std::string(name) + "}";
        }
      });
  return unknown;
}

std::string expandLinePrefix(std::string_view pattern,
                             const std::vector<std::pair<std::string, std::string>>& values) {
  std::string out;
  scanVariables(
      pattern, [&out](std::string_view text) { out += text; },
      [&](std::string_view name) {
        const auto it = std::find_if(values.begin(), values.end(),
                                     [name](const auto& v) { return v.first == name; });
        out += it == values.end() ? "${" + std::string(name) + "}" : it->second;
      });
  return out;
}

}  // namespace dtrun::agent

namespace dtrun::agent::detail {

void ConsoleLines::feed(std::string_view data, std::string& out) {
  while (!data.empty()) {
    const std::size_t end = data.find_first_of("\r\n");
    if (end == std::string_view::npos) {
      rest_.append(data);
      while (rest_.size() >= maxLine_) {  // too long to hold: out in pieces, each a line
        out += prefix_;
        out.append(rest_, 0, maxLine_);
        out += '\n';
        rest_.erase(0, maxLine_);
      }
      return;
    }
    // "\r\n" is one line end: a '\r' alone would show the line, then an empty prefixed one.
    const bool crlf = data[end] == '\r' && end + 1 < data.size() && data[end + 1] == '\n';
    const std::size_t next = end + (crlf ? 2 : 1);
    out += prefix_;
    out += rest_;
    out.append(data.substr(0, next));
    rest_.clear();
    data.remove_prefix(next);
  }
}

void ConsoleLines::flush(std::string& out) {
  if (rest_.empty()) {
    return;
  }
  out += prefix_;
  out += rest_;
  out += '\n';
  rest_.clear();
}

}  // namespace dtrun::agent::detail
