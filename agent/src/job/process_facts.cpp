#include "job/process_facts.h"

#include <array>

#include <unistd.h>

extern char** environ;  // NOLINT: POSIX declares it nowhere

namespace dtrun::agent::detail {

std::vector<std::string> environSnapshot() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    out.emplace_back(*e);
  }
  return out;
}

std::string envValue(const std::vector<std::string>& env, const std::string& name) {
  const std::string prefix = name + "=";
  for (const auto& entry : env) {
    if (entry.rfind(prefix, 0) == 0) {
      return entry.substr(prefix.size());
    }
  }
  return {};
}

std::string hostName() {
  std::array<char, 256> buffer{};
  if (::gethostname(buffer.data(), buffer.size() - 1) != 0) {
    return "localhost";
  }
  return buffer.data();
}

}  // namespace dtrun::agent::detail
