#include "communicator.h"

#include <algorithm>
#include <cstdint>

namespace dtrun::runtime::detail {

CommunicatorConfig subGroupConfig(const CommunicatorConfig& parent, const std::vector<int>& ranks,
                                  int self, const std::string& name) {
  CommunicatorConfig child = parent;
  child.groupName = parent.groupName + "/" + name;
  child.size = static_cast<int>(ranks.size());
  child.rank = static_cast<int>(std::find(ranks.begin(), ranks.end(), self) - ranks.begin());
  child.globalRanks.clear();
  for (const int r : ranks) {
    child.globalRanks.push_back(parent.globalRanks.at(static_cast<std::size_t>(r)));
  }
  return child;
}

bool overlaps(const void* a, std::size_t aBytes, const void* b, std::size_t bBytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a);  // NOLINT: address comparison only
  const auto y = reinterpret_cast<std::uintptr_t>(b);  // NOLINT: address comparison only
  return aBytes > 0 && bBytes > 0 && x < y + bBytes && y < x + aBytes;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  }
  return text;
}

}  // namespace dtrun::runtime::detail
