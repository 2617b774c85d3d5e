#include "console/console_collapse.h"

#include <algorithm>

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

void ConsoleCollapse::add(ConsoleStream stream, std::span<const int> ranks, std::string_view text,
                          Clock::time_point printed) {
  if (ranks.empty()) {
    return;
  }
  // The first seq any of `ranks` may still join: after each one's last group.
  std::uint64_t after = 0;
  for (const int r : ranks) {
    if (const auto it = lastOf_.find(r); it != lastOf_.end()) {
      after = std::max(after, it->second);
    }
  }
  std::deque<std::uint64_t>& same = byText_[key(stream, text)];
  const std::uint64_t front = nextSeq_ - groups_.size();
  Group* target = nullptr;
  // Every group after `after` lacks all of `ranks` (their last lines are before it).
  if (const auto it = std::lower_bound(same.begin(), same.end(), after); it != same.end()) {
    target = &groups_[*it - front];
  }
  if (target == nullptr) {
    Group g;
    g.line.stream = stream;
    g.line.text = std::string(text);
    g.line.oldest = printed;
    g.seq = nextSeq_++;
    groups_.push_back(std::move(g));
    target = &groups_.back();
    same.push_back(target->seq);
  }
  auto& members = target->line.ranks;
  members.insert(members.end(), ranks.begin(), ranks.end());
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  target->line.oldest = std::min(target->line.oldest, printed);
  for (const int r : ranks) {
    lastOf_[r] = target->seq + 1;
  }
}

bool ConsoleCollapse::ready(const Group& g, Clock::time_point now) const {
  return (expected_ > 0 && g.line.ranks.size() >= expected_) || now >= g.line.oldest + window_;
}

void ConsoleCollapse::popFront(std::vector<CollapsedLine>& out) {
  Group& g = groups_.front();
  // The front group is the oldest of its text.
  if (const auto it = byText_.find(key(g.line.stream, g.line.text)); it != byText_.end()) {
    it->second.pop_front();
    if (it->second.empty()) {
      byText_.erase(it);
    }
  }
  out.push_back(std::move(g.line));
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
  return groups_.front().line.oldest + window_;
}

}  // namespace dtrun::agent::detail
