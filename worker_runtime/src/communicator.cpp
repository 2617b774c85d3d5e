#include "communicator.h"

#include <algorithm>

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

}  // namespace dtrun::runtime::detail
