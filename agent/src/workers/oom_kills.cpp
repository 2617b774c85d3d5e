#include "workers/oom_kills.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace dtrun::agent::detail {
namespace {

namespace fs = std::filesystem;

// v1 reports "no limit" as a page-rounded LLONG_MAX; anything above this is no limit.
constexpr long long kNoLimitAbove = 1LL << 60;

std::optional<long long> fieldOf(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string name;
  long long value = 0;
  while (in >> name >> value) {
    if (name == key) {
      return value;
    }
  }
  return std::nullopt;
}

// The path of this process's cgroup under the hierarchy `controller` names ("" = v2's).
std::optional<std::string> cgroupPath(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) {
      continue;
    }
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::istringstream list(controllers);
    std::string one;
    bool match = controllers.empty() && controller.empty();
    while (!match && std::getline(list, one, ',')) {
      match = one == controller;
    }
    if (match) {
      return line.substr(second + 1);
    }
  }
  return std::nullopt;
}

}  // namespace

OomKillCount OomKillCount::ofCgroup(const std::string& dir) {
  OomKillCount count;
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "memory.events", ec)) {
    count.eventsFile_ = dir + "/memory.events";
    count.limitFile_ = dir + "/memory.max";
  } else if (fs::exists(fs::path(dir) / "memory.oom_control", ec)) {
    count.eventsFile_ = dir + "/memory.oom_control";
    count.limitFile_ = dir + "/memory.limit_in_bytes";
  }
  return count;
}

OomKillCount OomKillCount::ofThisProcess() {
  for (const auto& [controller, mount] : {std::pair<std::string, std::string>{"", "/sys/fs/cgroup"},
                                          {"", "/sys/fs/cgroup/unified"},
                                          {"memory", "/sys/fs/cgroup/memory"}}) {
    const auto path = cgroupPath(controller);
    if (!path) {
      continue;
    }
    auto count = ofCgroup(mount + *path);
    if (count.kills()) {
      return count;
    }
  }
  return {};
}

std::optional<long long> OomKillCount::kills() const {
  return eventsFile_.empty() ? std::nullopt : fieldOf(eventsFile_, "oom_kill");
}

std::string OomKillCount::describeKill() const {
  std::string text = "killed by the kernel: out of memory";
  std::ifstream in(limitFile_);
  long long limit = 0;
  if (in >> limit && limit > 0 && limit < kNoLimitAbove) {
    text += " (cgroup limit " + std::to_string(limit / (1024LL * 1024)) + " MiB)";
  }
  return text;
}

}  // namespace dtrun::agent::detail
