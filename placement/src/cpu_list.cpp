#include <algorithm>
#include <string>

#include "dtrun/placement.h"

#include "text.h"

namespace dtrun::placement {

// The kernel's own bound on CPU ids (NR_CPUS of a large config): it also bounds what a
// malformed range like "0-999999999" may allocate.
constexpr long long kMaxCpuId = 1 << 16;

Result<std::vector<int>> parseCpuList(std::string_view text) {
  std::vector<int> cpus;
  const std::string_view trimmed = text::trim(text);
  if (trimmed.empty()) {
    return cpus;
  }
  for (const std::string_view item : text::split(trimmed, ',')) {
    const auto dash = item.find('-');
    const auto first = text::parseInt(item.substr(0, dash));
    const auto last =
        dash == std::string_view::npos ? first : text::parseInt(item.substr(dash + 1));
    if (!first || !last || *first < 0 || *last < *first || *last >= kMaxCpuId) {
      return Status::invalidArgument("'" + std::string(trimmed) +
                                     "' is not a CPU list (expected ids and ranges: 0-3,8)");
    }
    for (long long cpu = *first; cpu <= *last; ++cpu) {
      cpus.push_back(static_cast<int>(cpu));
    }
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string formatCpuList(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] <= sorted[j] + 1) {
      ++j;
    }
    out += (out.empty() ? "" : ",") + std::to_string(sorted[i]);
    if (sorted[j] != sorted[i]) {
      out += "-" + std::to_string(sorted[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace dtrun::placement
