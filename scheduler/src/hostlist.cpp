// SLURM's host list and run-length count grammars, expanded without scontrol.
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dtrun/scheduler.h"

#include "text.h"

namespace dtrun::scheduler {
namespace {

constexpr std::size_t kMaxDigits = 18;  // keeps every bound inside std::uint64_t

// Digits only, and few enough that every bound fits std::uint64_t.
bool isDigits(std::string_view text) { return text.size() <= kMaxDigits && text::isDigits(text); }

std::uint64_t toNumber(std::string_view digits) {  // isDigits(digits) holds
  std::uint64_t value = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), value);
  return value;
}

using text::trim;

// One bracket group's values as text, each padded to its range's lower bound width.
Result<std::vector<std::string>> expandGroup(std::string_view group, std::size_t budget) {
  if (group.empty()) {
    return Status::invalidArgument("empty brackets '[]'");
  }
  std::vector<std::string> values;
  std::size_t start = 0;
  while (start <= group.size()) {
    auto end = group.find(',', start);
    if (end == std::string_view::npos) {
      end = group.size();
    }
    const std::string_view entry = group.substr(start, end - start);
    const auto dash = entry.find('-');
    const std::string_view low = entry.substr(0, dash);
    const std::string_view high = dash == std::string_view::npos ? low : entry.substr(dash + 1);
    if (!isDigits(low) || !isDigits(high)) {
      return Status::invalidArgument("'" + std::string(entry) +
                                     "' in brackets is neither a number nor a range like 01-03");
    }
    const std::uint64_t from = toNumber(low);
    const std::uint64_t to = toNumber(high);
    if (from > to) {
      return Status::invalidArgument("the range '" + std::string(entry) + "' runs backwards");
    }
    if (to - from >= budget - values.size()) {
      return Status::invalidArgument("expands to more than " + std::to_string(kMaxHosts) +
                                     " hosts");
    }
    for (std::uint64_t n = from; n <= to; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < low.size()) {
        digits.insert(0, low.size() - digits.size(), '0');
      }
      values.push_back(std::move(digits));
    }
    start = end + 1;
  }
  return values;
}

// One top-level item: literal text and bracket groups, expanded as a cartesian product with the
// leftmost group outermost (SLURM's order for "r[1-2]n[1-2]": r1n1 r1n2 r2n1 r2n2).
Status expandItem(std::string_view item, std::vector<std::string>& hosts) {
  std::vector<std::string> names = {""};
  std::size_t pos = 0;
  while (pos < item.size()) {
    const auto open = item.find('[', pos);
    const std::string_view literal = item.substr(pos, open - pos);
    for (std::string& name : names) {
      name += literal;
    }
    if (open == std::string_view::npos) {
      break;
    }
    const auto close = item.find(']', open);  // the caller checked that brackets balance
    DTRUN_ASSIGN_OR_RETURN(auto values, expandGroup(item.substr(open + 1, close - open - 1),
                                                    kMaxHosts - hosts.size()));
    if (names.size() * values.size() > kMaxHosts - hosts.size()) {
      return Status::invalidArgument("expands to more than " + std::to_string(kMaxHosts) +
                                     " hosts");
    }
    std::vector<std::string> product;
    product.reserve(names.size() * values.size());
    for (const std::string& name : names) {
      for (const std::string& value : values) {
        product.push_back(name + value);
      }
    }
    names = std::move(product);
    pos = close + 1;
  }
  if (names.size() > kMaxHosts - hosts.size()) {
    return Status::invalidArgument("expands to more than " + std::to_string(kMaxHosts) + " hosts");
  }
  for (std::string& name : names) {
    hosts.push_back(std::move(name));
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<std::string>> expandHostlist(std::string_view text) {
  text = trim(text);
  if (text.empty()) {
    return Status::invalidArgument("an empty host list");
  }
  std::vector<std::string> hosts;
  std::size_t itemStart = 0;
  bool inBrackets = false;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') {
      if (inBrackets) {
        return Status::invalidArgument("a '[' inside brackets");
      }
      inBrackets = true;
    } else if (c == ']') {
      if (!inBrackets) {
        return Status::invalidArgument("a ']' without its '['");
      }
      inBrackets = false;
    } else if (c == ',' && i == text.size() && inBrackets) {
      return Status::invalidArgument("a '[' that is never closed");
    } else if (c == ',' && !inBrackets) {
      const std::string_view item = text.substr(itemStart, i - itemStart);
      if (item.empty()) {
        return Status::invalidArgument("an empty entry (two commas in a row, or one at an end)");
      }
      DTRUN_TRY(expandItem(item, hosts));
      itemStart = i + 1;
    } else if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f') {
      return Status::invalidArgument("a blank or control character inside the list");
    }
  }
  return hosts;
}

Result<std::vector<int>> expandCounts(std::string_view text) {
  text = trim(text);
  if (text.empty()) {
    return Status::invalidArgument("an empty list");
  }
  std::vector<int> counts;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(',', start);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    const std::string_view entry = text.substr(start, end - start);
    const auto paren = entry.find('(');
    const std::string_view count = entry.substr(0, paren);
    std::string_view repeat = "1";
    if (paren != std::string_view::npos) {
      if (!entry.ends_with(')') || entry.substr(paren + 1, 1) != "x") {
        return Status::invalidArgument("'" + std::string(entry) +
                                       "' is neither a count nor count(xrepeat) like 2(x3)");
      }
      repeat = entry.substr(paren + 2, entry.size() - paren - 3);
    }
    constexpr std::uint64_t kMaxCount = 1U << 30U;
    if (!isDigits(count) || !isDigits(repeat) || toNumber(count) > kMaxCount ||
        toNumber(repeat) == 0) {
      return Status::invalidArgument("'" + std::string(entry) +
                                     "' is neither a count nor count(xrepeat) like 2(x3)");
    }
    if (toNumber(repeat) > kMaxHosts - counts.size()) {
      return Status::invalidArgument("repeats more than " + std::to_string(kMaxHosts) + " times");
    }
    counts.insert(counts.end(), toNumber(repeat), static_cast<int>(toNumber(count)));
    start = end + 1;
  }
  return counts;
}

}  // namespace dtrun::scheduler
