#include "live/stack_groups.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <utility>

#include "hang/hang.h"

namespace dtrun::agent::detail {
namespace {

// `text`'s lines, without their line ends.
std::vector<std::string_view> linesOf(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const auto end = text.find('\n');
    lines.push_back(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return lines;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) {
    s.remove_prefix(1);
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) {
    s.remove_suffix(1);
  }
  return s;
}

bool isHex(std::string_view s) {
  return s.size() > 2 && s.starts_with("0x") && std::all_of(s.begin() + 2, s.end(), [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c)) != 0;
         });
}

// One native frame's function: "#3  0x00007f.. name - 1" (eu-stack) or "#3  0x.. in name (args)
// at f.c:9" / "#3  name (args) from lib.so" (gdb) -> "name"; "??" when unresolved.
std::string frameFunction(std::string_view line) {
  line = trimmed(line);
  const auto space = line.find(' ');
  line = trimmed(space == std::string_view::npos ? std::string_view{} : line.substr(space));
  if (const auto word = line.substr(0, line.find(' ')); isHex(word)) {
    line = trimmed(line.substr(word.size()));
  }
  if (line.starts_with("in ")) {
    line.remove_prefix(3);
  }
  line = line.substr(0, line.find(" ("));
  line = line.substr(0, line.find(" - "));
  line = line.substr(0, line.find(" from "));
  line = trimmed(line);
  return line.empty() || isHex(line) ? "??" : std::string(line);
}

// The innermost frame of the last Python thread listed (faulthandler lists the main thread, the
// oldest, last), past dtrun's own hook (its wrappers of torch's calls): `File "/a/b.py", line 9
// in f` -> "f (b.py:9)"; "" when there is none.
std::string pythonWhere(std::string_view normalised) {
  std::vector<std::string_view> frames;  // the last thread's, innermost first
  for (const std::string_view line : linesOf(normalised)) {
    const std::string_view t = trimmed(line);
    if (t.starts_with("Thread")) {
      frames.clear();
    } else if (t.starts_with("File \"")) {
      frames.push_back(t);
    }
  }
  if (frames.empty()) {
    return "";
  }
  const auto fileOf = [](std::string_view frame) {
    const auto close = frame.find('"', 6);
    std::string_view file = frame.substr(6, close == std::string_view::npos ? 0 : close - 6);
    const auto slash = file.rfind('/');
    return slash == std::string_view::npos ? file : file.substr(slash + 1);
  };
  const auto mine = std::find_if(frames.begin(), frames.end(), [&](std::string_view frame) {
    return !fileOf(frame).starts_with("dtrun_");
  });
  const std::string_view innermost = mine == frames.end() ? frames.front() : *mine;
  std::string_view line;
  if (const auto at = innermost.find(", line "); at != std::string_view::npos) {
    line = innermost.substr(at + 7);
    line = line.substr(0, line.find(' '));
  }
  std::string_view function;
  if (const auto in = innermost.rfind(" in "); in != std::string_view::npos) {
    function = innermost.substr(in + 4);
  }
  return std::string(function) + " (" + std::string(fileOf(innermost)) + ":" + std::string(line) +
         ")";
}

std::string indented(std::string_view text, std::string_view by) {
  std::string out;
  for (const std::string_view line : linesOf(text)) {
    out += std::string(by) + std::string(line) + "\n";
  }
  return out;
}

}  // namespace

nlohmann::json toJson(const NodeStacks& node) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankStacks& r : node.ranks) {
    ranks.push_back({{"rank", r.rank}, {"pid", r.pid}, {"python", r.python}, {"native", r.native}});
  }
  return {{"node", node.node}, {"host", node.host}, {"ranks", std::move(ranks)}};
}

std::optional<NodeStacks> nodeStacksFromJson(const nlohmann::json& json) {
  if (!json.is_object() || !json.contains("node") || !json["node"].is_number_integer() ||
      !json.contains("ranks") || !json["ranks"].is_array()) {
    return std::nullopt;
  }
  NodeStacks node;
  node.node = json["node"].get<int>();
  node.host = json.value("host", "");
  for (const auto& r : json["ranks"]) {
    if (!r.is_object()) {
      return std::nullopt;
    }
    RankStacks rank;
    rank.rank = r.value("rank", 0);
    rank.node = node.node;
    rank.host = node.host;
    rank.pid = r.value("pid", 0);
    rank.python = r.value("python", "");
    rank.native = r.value("native", "");
    node.ranks.push_back(std::move(rank));
  }
  return node;
}

std::string mainThreadOf(std::string_view native, int pid) {
  const std::string euStack = "TID " + std::to_string(pid) + ":";
  const std::string gdb = "(LWP " + std::to_string(pid) + ")";
  std::string out;
  bool inside = false;
  bool found = false;
  for (const std::string_view line : linesOf(native)) {
    const bool threadLine = line.starts_with("TID ") || line.starts_with("Thread ");
    if (threadLine) {
      inside = line == euStack || line.find(gdb) != std::string_view::npos;
      found = found || inside;
      continue;
    }
    if (inside) {
      out += std::string(line) + "\n";
    }
  }
  return found ? out : std::string(native);
}

std::string normalisedNative(std::string_view native) {
  std::string out;
  for (const std::string_view line : linesOf(native)) {
    if (trimmed(line).starts_with("#")) {
      out += frameFunction(line) + "\n";
    }
  }
  if (out.empty()) {  // no frame: the tool's own words say why (eu-stack missing, ptrace refused)
    const std::string_view t = trimmed(native);
    out = t.empty() ? "" : std::string(t.substr(0, t.find('\n'))) + "\n";
  }
  return out;
}

std::string normalisedPython(std::string_view python) {
  std::string out;
  for (const std::string_view line : linesOf(python)) {
    const std::string_view t = trimmed(line);
    if (t.empty()) {
      continue;
    }
    // "Current thread 0x7f.. (most recent call first):": which thread took the signal, and its
    // id, differ between identical ranks.
    if (t.starts_with("Thread ") || t.starts_with("Current thread ")) {
      out += "Thread:\n";
    } else {
      out += "  " + std::string(t) + "\n";
    }
  }
  return out;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string ranges = rankRanges(ranks);
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (const char c : ranges) {
    out += c == ',' ? std::string(", ") : std::string(1, c);
  }
  return out;
}

std::string groupStacks(const std::string& heading, const std::vector<RankStacks>& ranks,
                        const std::vector<std::string>& notes) {
  struct Group {
    std::vector<int> ranks;
    std::set<int> nodes;
    std::string python;
    std::string native;
  };
  std::map<std::string, Group> bySignature;
  for (const RankStacks& r : ranks) {
    std::string python = normalisedPython(r.python);
    std::string native = normalisedNative(r.native);
    std::string signature = python;
    signature += "\n--\n";
    signature += native;
    Group& g = bySignature[signature];
    if (g.ranks.empty()) {
      g.python = std::move(python);
      g.native = std::move(native);
    }
    g.ranks.push_back(r.rank);
    g.nodes.insert(r.node);
  }
  std::vector<Group> groups;
  for (auto& [signature, group] : bySignature) {
    std::sort(group.ranks.begin(), group.ranks.end());
    groups.push_back(std::move(group));
  }
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    return a.ranks.size() != b.ranks.size() ? a.ranks.size() > b.ranks.size()
                                            : a.ranks.front() < b.ranks.front();
  });
  std::string out = heading + "\n";
  for (const Group& g : groups) {
    std::string where = pythonWhere(g.python);
    if (where.empty()) {
      const auto firstLine = g.native.substr(0, g.native.find('\n'));
      where = firstLine.empty() ? "no stack" : firstLine;
    }
    const std::vector<int> nodes(g.nodes.begin(), g.nodes.end());
    out += "\n" + rankList(g.ranks) + ": " + where + "  [" + std::to_string(g.ranks.size()) +
           (g.ranks.size() == 1 ? " rank" : " ranks") +
           (nodes.size() == 1 ? " on node " : " on nodes ") + rankRanges(nodes) + "]\n";
    if (!g.python.empty()) {
      out += "  Python (most recent call first):\n" + indented(g.python, "    ");
    }
    out += "  native, main thread (innermost first):\n" +
           (g.native.empty() ? std::string("    (none)\n") : indented(g.native, "    "));
  }
  if (!notes.empty()) {
    out += "\n";
  }
  for (const std::string& note : notes) {
    out += note + "\n";
  }
  return out;
}

}  // namespace dtrun::agent::detail
