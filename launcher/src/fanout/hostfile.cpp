#include "fanout/hostfile.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>

#include "text.h"

namespace dtrun::launcher {
namespace {

constexpr int kMaxSlots = 1 << 20;  // far above any machine; keeps nproc sums far from overflow

bool isBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// Host names are what ssh accepts as a destination: letters, digits, '.', '-', '_', one '@'
// (user@host), ':', '[', ']' and '%' (IPv6). Never a leading '-' (ssh would read an option).
std::string whyNotHostName(std::string_view name) {
  if (name.empty()) {
    return "an empty host name";
  }
  if (name.front() == '-') {
    return "a host name may not start with '-'";
  }
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) == 0 && std::string_view("._-@:[]%").find(c) == std::string_view::npos) {
      return std::string("the host name '") + std::string(name) + "' holds '" + c +
             "' (letters, digits, '.', '-', '_', '@', ':' only)";
    }
  }
  if (std::count(name.begin(), name.end(), '@') > 1 || name.back() == '@') {
    return "'" + std::string(name) + "' is not user@host";
  }
  return "";
}

std::optional<int> parseSlots(std::string_view value) {
  const auto parsed = text::isDigits(value) ? text::parseInt(value) : std::nullopt;
  if (!parsed || *parsed < 1 || *parsed > kMaxSlots) {
    return std::nullopt;
  }
  return static_cast<int>(*parsed);
}

// Words of a hostfile line, split at blanks, without the comment.
std::vector<std::string_view> wordsOf(std::string_view line) {
  line = line.substr(0, line.find('#'));
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && isBlank(line[i])) {
      ++i;
    }
    const std::size_t start = i;
    while (i < line.size() && !isBlank(line[i])) {
      ++i;
    }
    if (i > start) {
      words.push_back(line.substr(start, i - start));
    }
  }
  return words;
}

Status duplicateCheck(const std::vector<HostEntry>& hosts, const HostEntry& entry,
                      std::string_view where) {
  const auto same = std::find_if(hosts.begin(), hosts.end(),
                                 [&entry](const HostEntry& h) { return h.name == entry.name; });
  if (same == hosts.end()) {
    return Status::ok();
  }
  const std::string first =
      same->line > 0 ? " (first on line " + std::to_string(same->line) + ")" : "";
  return Status::invalidArgument(std::string(where) + ": host " + entry.name + " is listed twice" +
                                 first + "; give it once, with slots=N for its workers");
}

}  // namespace

Result<std::vector<HostEntry>> parseHostfile(std::string_view text, std::string_view fileName) {
  std::vector<HostEntry> hosts;
  int lineNumber = 0;
  for (const std::string_view line : text::split(text, '\n')) {
    ++lineNumber;
    const std::vector<std::string_view> words = wordsOf(line);
    if (words.empty()) {
      continue;
    }
    const std::string where = std::string(fileName) + ":" + std::to_string(lineNumber);
    HostEntry entry;
    entry.name = std::string(words.front());
    entry.line = lineNumber;
    if (const std::string why = whyNotHostName(entry.name); !why.empty()) {
      return Status::invalidArgument(std::string(where).append(": ").append(why).append(
          " (write one host per line: 'node1 slots=4')"));
    }
    for (std::size_t i = 1; i < words.size(); ++i) {
      const std::string_view word = words[i];
      const auto equals = word.find('=');
      const std::string_view key = word.substr(0, equals);
      const std::string_view value =
          equals == std::string_view::npos ? std::string_view() : word.substr(equals + 1);
      std::optional<int>* target = nullptr;
      if (key == "slots") {
        target = &entry.slots;
      } else if (key == "max_slots" || key == "max-slots") {
        target = &entry.maxSlots;
      } else {
        return Status::invalidArgument(where + ": unknown setting '" + std::string(word) +
                                       "' (a line is 'host slots=N', optionally 'max_slots=M')");
      }
      if (target->has_value()) {
        return Status::invalidArgument(where + ": " + std::string(key) +
                                       " is given twice; keep one");
      }
      *target = parseSlots(value);
      if (!target->has_value()) {
        return Status::invalidArgument(where + ": " + std::string(key) +
                                       " expects a whole number from 1 to " +
                                       std::to_string(kMaxSlots) + ", got '" + std::string(word) +
                                       "' (write '" + entry.name + " " + std::string(key) + "=4')");
      }
    }
    if (entry.slots && entry.maxSlots && *entry.maxSlots < *entry.slots) {
      return Status::invalidArgument(where + ": max_slots=" + std::to_string(*entry.maxSlots) +
                                     " is below slots=" + std::to_string(*entry.slots) +
                                     " (raise max_slots or lower slots)");
    }
    DTRUN_TRY(duplicateCheck(hosts, entry, where));
    hosts.push_back(std::move(entry));
  }
  if (hosts.empty()) {
    return Status::invalidArgument(std::string(fileName) +
                                   ": no host in it (write one host per line: 'node1 slots=4')");
  }
  return hosts;
}

Result<std::vector<HostEntry>> parseHostList(std::string_view list) {
  std::vector<HostEntry> hosts;
  for (const std::string_view piece : text::split(list, ',')) {
    const std::string_view item = text::trim(piece);
    HostEntry entry;
    entry.name = std::string(item);
    // mpirun's "host:slots"; an IPv6 address keeps its colons unless bracketed ("[::1]:2").
    const auto colon = item.rfind(':');
    const bool bracketed = item.starts_with('[');
    if (colon != std::string_view::npos &&
        (bracketed ? colon > 0 && item[colon - 1] == ']' : item.find(':') == colon)) {
      const std::string_view count = item.substr(colon + 1);
      entry.slots = parseSlots(count);
      if (!entry.slots) {
        return Status::invalidArgument("--hosts: '" + std::string(item) +
                                       "' has no valid slot count after ':' (write host or "
                                       "host:N, N from 1 to " +
                                       std::to_string(kMaxSlots) + ")");
      }
      entry.name = std::string(item.substr(0, colon));
    }
    if (const std::string why = whyNotHostName(entry.name); !why.empty()) {
      return Status::invalidArgument("--hosts: " + why + " (write --hosts=node1,node2,node3)");
    }
    DTRUN_TRY(duplicateCheck(hosts, entry, "--hosts"));
    hosts.push_back(std::move(entry));
  }
  return hosts;
}

Result<std::vector<HostEntry>> selectHosts(std::vector<HostEntry> hosts,
                                           const std::optional<std::string>& include,
                                           const std::optional<std::string>& exclude) {
  if (include && exclude) {
    return Status::invalidArgument(
        "--include and --exclude cannot be used together (name the hosts to use with one of "
        "them)");
  }
  if (!include && !exclude) {
    return hosts;
  }
  const std::string flag = include ? "--include" : "--exclude";
  const std::string& list = include ? *include : *exclude;
  const auto known = [&hosts](std::string_view name) {
    return std::any_of(hosts.begin(), hosts.end(),
                       [name](const HostEntry& h) { return h.name == name; });
  };
  std::set<std::string, std::less<>> named;
  for (const std::string_view part : text::split(list, '@')) {
    const std::string_view spec = text::trim(part);
    if (spec.find(':') != std::string_view::npos && !known(spec)) {
      return Status::invalidArgument(std::string(flag)
                                         .append(": GPU indices per host ('")
                                         .append(spec)
                                         .append("') are not supported yet; name whole hosts (")
                                         .append(flag)
                                         .append("=node1,node2)"));
    }
    for (const std::string_view piece : text::split(spec, ',')) {
      const std::string_view name = text::trim(piece);
      if (name.empty()) {
        return Status::invalidArgument(std::string(flag)
                                           .append(": an empty host name in '")
                                           .append(list)
                                           .append("' (write ")
                                           .append(flag)
                                           .append("=node1,node2)"));
      }
      if (!known(name)) {
        std::string all;
        for (const HostEntry& h : hosts) {
          all += (all.empty() ? "" : ", ") + h.name;
        }
        return Status::invalidArgument(std::string(flag)
                                           .append(": host ")
                                           .append(name)
                                           .append(" is not in the host list (")
                                           .append(all)
                                           .append(")"));
      }
      named.emplace(name);
    }
  }
  std::erase_if(hosts,
                [&](const HostEntry& h) { return named.contains(h.name) != include.has_value(); });
  if (hosts.empty()) {
    return Status::invalidArgument(flag + "=" + list + " leaves no host to run on");
  }
  return hosts;
}

std::string hostAddress(std::string_view name) {
  const auto at = name.find('@');
  return std::string(at == std::string_view::npos ? name : name.substr(at + 1));
}

}  // namespace dtrun::launcher
