#include "text.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace dtrun::text {

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\n\r");
  if (first == std::string_view::npos) {
    return {};
  }
  const auto last = text.find_last_not_of(" \t\n\r");
  return text.substr(first, last - first + 1);
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const auto end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) {
      return parts;
    }
    start = end + 1;
  }
}

bool isDigits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<long long> parseInt(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') {
    text.remove_prefix(1);
  }
  long long value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return std::nullopt;
  }
  return value;
}

std::string envText(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): see text.h
  return value != nullptr ? value : "";
}

namespace {

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool startsWithNoCase(std::string_view text, std::size_t at, std::string_view word) {
  if (text.size() - at < word.size()) {
    return false;
  }
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (lower(text[at + i]) != word[i]) {
      return false;
    }
  }
  return true;
}

// Where the value of a secret named at `at` (name `length` long) begins: past `=` or, as Python
// prints a dict, `': '`; npos when the name is part of another word (DTRUN_STORE_TOKEN_FILE).
std::size_t secretValueStart(std::string_view text, std::size_t at, std::size_t length) {
  std::size_t p = at + length;
  if (p < text.size() && (text[p] == '\'' || text[p] == '"')) {
    ++p;
  }
  if (p >= text.size() || (text[p] != '=' && text[p] != ':')) {
    return std::string_view::npos;
  }
  ++p;
  while (p < text.size() && text[p] == ' ') {
    ++p;
  }
  if (p < text.size() && (text[p] == '\'' || text[p] == '"')) {
    ++p;
  }
  return p;
}

}  // namespace

std::string redactSecrets(std::string_view text) {
  // Lower case: matched without regard to case, anywhere in a name: DTRUN_STORE_TOKEN and
  // --rdzv_conf's token=, DTRUN_ETCD_PASSWORD and password=, and the user's own (HF_TOKEN=).
  constexpr std::string_view kNames[] = {"token", "password"};
  constexpr std::string_view kEnds = " \t\r\n,'\"}";
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t valueStart = std::string_view::npos;
    for (const std::string_view name : kNames) {
      if (startsWithNoCase(text, i, name)) {
        valueStart = secretValueStart(text, i, name.size());
        break;
      }
    }
    if (valueStart == std::string_view::npos) {
      out += text[i++];
      continue;
    }
    const std::size_t valueEnd = std::min(text.find_first_of(kEnds, valueStart), text.size());
    out.append(text.substr(i, valueStart - i));
    if (valueEnd > valueStart) {
      out += "<redacted>";
    }
    i = valueEnd;
  }
  return out;
}

}  // namespace dtrun::text
