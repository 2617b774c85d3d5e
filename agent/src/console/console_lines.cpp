#include "console/console_lines.h"

#include <algorithm>
#include <utility>

#include "dtrun/agent_config.h"

namespace dtrun::agent {

namespace {

bool isIdentifierStart(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool isIdentifierChar(char c) { return isIdentifierStart(c) || (c >= '0' && c <= '9'); }
// Where the identifier characters of `text` that begin at `from` end.
std::size_t identifierEnd(std::string_view text, std::size_t from) {
  while (from < text.size() && isIdentifierChar(text[from])) {
    ++from;
  }
  return from;
}

// Reads `pattern` as Python's string.Template does (torchrun expands the template with it):
// "$$" is one '$', "${name}" and "$name" name a variable, any other '$' is itself. Calls
// `visit(name, asWritten)` for every variable and `literal(text)` for the text between.
template <typename Literal, typename Visit>
void scanVariables(std::string_view pattern, const Literal& literal, const Visit& visit) {
  std::size_t from = 0;
  for (std::size_t at = pattern.find('$'); at != std::string_view::npos;
       at = pattern.find('$', at)) {
    const std::string_view after = pattern.substr(at + 1);
    std::string_view name;
    std::size_t length = 1;  // of the placeholder, from its '$'
    if (!after.empty() && after[0] == '$') {
      literal(pattern.substr(from, at + 1 - from));  // "$$": keeps one '$'
      from = at += 2;
      continue;
    }
    if (after.size() > 1 && after[0] == '{' && isIdentifierStart(after[1])) {
      const auto close = after.find('}');
      const std::size_t end = identifierEnd(after, 1);
      if (close == end) {
        name = after.substr(1, end - 1);
        length = end + 2;
      }
    } else if (!after.empty() && isIdentifierStart(after[0])) {
      const std::size_t end = identifierEnd(after, 0);
      name = after.substr(0, end);
      length = end + 1;
    }
    if (name.empty()) {  // a '$' that starts no placeholder is itself
      ++at;
      continue;
    }
    literal(pattern.substr(from, at - from));
    visit(name, pattern.substr(at, length));
    from = at += length;
  }
  literal(pattern.substr(from));
}

}  // namespace

std::string unknownLinePrefixVariable(std::string_view pattern) {
  std::string unknown;
  scanVariables(
      pattern, [](std::string_view) {},
      [&unknown](std::string_view name, std::string_view asWritten) {
        if (unknown.empty() && std::find(kLinePrefixVariables.begin(), kLinePrefixVariables.end(),
                                         name) == kLinePrefixVariables.end()) {
          unknown = asWritten;
        }
      });
  return unknown;
}

std::string expandLinePrefix(std::string_view pattern,
                             const std::vector<std::pair<std::string, std::string>>& values) {
  std::string out;
  scanVariables(
      pattern, [&out](std::string_view text) { out += text; },
      [&](std::string_view name, std::string_view asWritten) {
        const auto it = std::find_if(values.begin(), values.end(),
                                     [name](const auto& v) { return v.first == name; });
        out += it == values.end() ? asWritten : std::string_view{it->second};
      });
  return out;
}

}  // namespace dtrun::agent

namespace dtrun::agent::detail {

void ConsoleLines::feed(std::string_view data, std::string& out) {
  if (data.empty()) {
    return;
  }
  if (std::exchange(afterCr_, false) && data.front() == '\n') {
    out += '\n';  // the "\r\n" of the line already out, split across two reads
    data.remove_prefix(1);
  }
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
    if (end == 0 && rest_.empty() && data[0] == '\r' && !crlf) {
      // A bar's first '\r' at the start of its line moves nothing: as a line of its own it would
      // be a bare prefix, and the next rank's line would follow on the same console line.
      data.remove_prefix(1);
      continue;
    }
    out += prefix_;
    out += rest_;
    out.append(data.substr(0, next));
    rest_.clear();
    data.remove_prefix(next);
    afterCr_ = data.empty() && !crlf && out.back() == '\r';
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
