#include "console/console_collapse.h"

#include <algorithm>
#include <iterator>

namespace dtrun::agent::detail {

std::string rankRangeText(std::span<const int> sortedRanks) {
  std::string out;
  for (std::size_t i = 0; i < sortedRanks.size();) {
    std::size_t j = i;
    while (j + 1 < sortedRanks.size() && sortedRanks[j + 1] == sortedRanks[j] + 1) {
      ++j;
    }
    if (!out.empty()) {
      out += ',';
    }
    out += std::to_string(sortedRanks[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(sortedRanks[j]);
    }
    i = j + 1;
  }
  return out;
}

std::string collapsedPrefix(std::span<const int> sortedRanks) {
  return (sortedRanks.size() == 1 ? "[rank " : "[ranks ") + rankRangeText(sortedRanks) + "]: ";
}

std::string ConsoleCollapse::key(ConsoleStream stream, std::string_view text) {
  std::string k(1, static_cast<char>('0' + static_cast<int>(stream)));
  k += text;
  return k;
}

namespace {
// Room between neighbours' positions: a group moving between two takes their midpoint, and only
// after about 20 moves into one spot does the queue need renumbering.
constexpr std::uint64_t kPosGap = std::uint64_t{1} << 20;

// For std::upper_bound over a text's groups: the first group placed after `pos`.
constexpr auto kByPos = [](std::uint64_t pos, const auto& group) { return pos < group->pos; };
}  // namespace

void ConsoleCollapse::add(ConsoleStream stream, std::span<const int> ranks, std::string_view text,
                          Clock::time_point printed) {
  if (ranks.empty()) {
    return;
  }
  // The last pending group of any of `ranks`: the line must come out after it.
  std::optional<GroupIt> last;
  for (const int r : ranks) {
    if (const auto it = lastOf_.find(r); it != lastOf_.end()) {
      if (!last || it->second->pos > (*last)->pos) {
        last = it->second;
      }
    }
  }
  // Every group after `last` lacks all of `ranks` (their lines are at or before it); positions
  // start at 1, so with no `last` every group of the text qualifies.
  const std::deque<GroupIt>& same = byText_[key(stream, text)];
  const auto found = std::upper_bound(same.begin(), same.end(), last ? (*last)->pos : 0, kByPos);
  GroupIt target;
  if (found != same.end()) {
    target = *found;
  } else if (const GroupIt before = same.empty() ? groups_.end() : same.back();
             before != groups_.end() && pullAhead(before, *last, ranks)) {
    // (`last` is set: with none, `found` is the text's first group.)
    target = before;
  } else {
    target = open(stream, text, printed);
  }
  auto& members = target->line.ranks;
  members.insert(members.end(), ranks.begin(), ranks.end());
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  target->line.oldest = std::min(target->line.oldest, printed);
  target->due = std::min(target->due, printed);
  for (const int r : ranks) {
    lastOf_.insert_or_assign(r, target);
  }
}

bool ConsoleCollapse::pullAhead(GroupIt group, GroupIt last, std::span<const int> ranks) {
  const auto holds = [](const Group& g, int rank) {
    return std::binary_search(g.line.ranks.begin(), g.line.ranks.end(), rank);
  };
  const auto holdsAny = [&](const Group& g, auto&& ranksOf) {
    return std::any_of(ranksOf.begin(), ranksOf.end(), [&](int r) { return holds(g, r); });
  };
  if (holdsAny(*group, ranks)) {
    return false;  // a rank printing the line again: its own earlier copy
  }
  // The groups of `ranks` up to `last` move; each must hold no rank of a group it would pass.
  std::vector<GroupIt> moving;
  std::vector<int> passed = group->line.ranks;
  for (auto it = std::next(group); it != std::next(last); ++it) {
    if (!holdsAny(*it, ranks)) {
      passed.insert(passed.end(), it->line.ranks.begin(), it->line.ranks.end());
      continue;
    }
    if (holdsAny(*it, passed)) {
      return false;
    }
    moving.push_back(it);
  }
  for (const GroupIt m : moving) {
    std::deque<GroupIt>& itsText = byText_[key(m->line.stream, m->line.text)];
    itsText.erase(std::find(itsText.begin(), itsText.end(), m));
    groups_.splice(group, groups_, m);
    place(m);
    itsText.insert(std::upper_bound(itsText.begin(), itsText.end(), m->pos, kByPos), m);
    m->due = std::min(m->due, group->due);  // it holds that group up: it leaves by its deadline
  }
  return true;
}

ConsoleCollapse::GroupIt ConsoleCollapse::open(ConsoleStream stream, std::string_view text,
                                               Clock::time_point printed) {
  Group g;
  g.line.stream = stream;
  g.line.text = std::string(text);
  g.line.oldest = printed;
  g.due = printed;
  const GroupIt it = groups_.insert(groups_.end(), std::move(g));
  place(it);
  byText_[key(stream, text)].push_back(it);
  return it;
}

void ConsoleCollapse::place(GroupIt g) {
  // Between its neighbours' positions (0 before the front; a gap past the back).
  const auto ahead = [&] { return g == groups_.begin() ? 0 : std::prev(g)->pos; };
  const auto behind = [&] {
    return std::next(g) == groups_.end() ? ahead() + 2 * kPosGap : std::next(g)->pos;
  };
  if (behind() - ahead() < 2) {
    renumber();
  }
  g->pos = ahead() + (behind() - ahead()) / 2;
}

void ConsoleCollapse::renumber() {
  std::uint64_t pos = 0;
  for (Group& g : groups_) {
    g.pos = (pos += kPosGap);
  }
}

bool ConsoleCollapse::ready(const Group& g, Clock::time_point now) const {
  return (expected_ > 0 && g.line.ranks.size() >= expected_) || now >= g.due + window_;
}

void ConsoleCollapse::popFront(std::vector<CollapsedLine>& out) {
  const GroupIt g = groups_.begin();
  // The front group is the first of its text.
  if (const auto it = byText_.find(key(g->line.stream, g->line.text)); it != byText_.end()) {
    it->second.pop_front();
    if (it->second.empty()) {
      byText_.erase(it);
    }
  }
  for (const int r : g->line.ranks) {
    if (const auto it = lastOf_.find(r); it != lastOf_.end() && it->second == g) {
      lastOf_.erase(it);
    }
  }
  out.push_back(std::move(g->line));
  groups_.pop_front();
}

std::vector<CollapsedLine> ConsoleCollapse::take(Clock::time_point now) {
  std::vector<CollapsedLine> out;
  while (!groups_.empty() && (groups_.size() > kMaxPending || ready(groups_.front(), now))) {
    popFront(out);
  }
  return out;
}

std::vector<CollapsedLine> ConsoleCollapse::takeAll() {
  std::vector<CollapsedLine> out;
  while (!groups_.empty()) {
    popFront(out);
  }
  return out;
}

std::optional<ConsoleCollapse::Clock::time_point> ConsoleCollapse::nextDeadline() const {
  if (groups_.empty()) {
    return std::nullopt;
  }
  return groups_.front().due + window_;
}

}  // namespace dtrun::agent::detail
