#include "workers/worker_pid.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <system_error>

#include "text.h"

namespace dtrun::agent::detail {
namespace {

namespace fs = std::filesystem;

// /proc/<pid>/stat's fields after "(<comm>) ", counted from the state (field 3).
constexpr std::size_t kStateField = 0;       // field 3
constexpr std::size_t kPpidField = 1;        // field 4
constexpr std::size_t kPgrpField = 2;        // field 5
constexpr std::size_t kStartTimeField = 19;  // field 22

template <typename T>
std::optional<T> number(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return std::nullopt;
  }
  return value;
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<fs::path> sortedDirectories(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec)) {
      out.push_back(entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::optional<ProcStat> parseProcStat(std::string_view line) {
  const auto open = line.find(" (");
  const auto close = line.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  ProcStat stat;
  const auto pid = number<unsigned>(line.substr(0, open));
  if (!pid) {
    return std::nullopt;
  }
  stat.pid = *pid;
  std::vector<std::string_view> fields;
  for (const std::string_view field : text::split(line.substr(close + 1), ' ')) {
    if (!field.empty()) {
      fields.push_back(text::trim(field));
    }
  }
  if (fields.size() <= kStartTimeField) {
    return std::nullopt;
  }
  const auto ppid = number<unsigned>(fields[kPpidField]);
  const auto pgrp = number<unsigned>(fields[kPgrpField]);
  const auto start = number<std::uint64_t>(fields[kStartTimeField]);
  if (fields[kStateField].size() != 1 || !ppid || !pgrp || !start) {
    return std::nullopt;
  }
  stat.state = fields[kStateField].front();
  stat.ppid = *ppid;
  stat.pgrp = *pgrp;
  stat.startTicks = *start;
  return stat;
}

std::optional<ProcStat> readProcStat(unsigned pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) {
    return std::nullopt;
  }
  return parseProcStat(line);
}

std::string workerPidLine(int localRank, int rank, pid_t pid) {
  const auto stat = readProcStat(static_cast<unsigned>(pid));
  return std::to_string(localRank) + ' ' + std::to_string(rank) + ' ' + std::to_string(pid) + ' ' +
         std::to_string(stat ? stat->startTicks : 0) + '\n';
}

std::vector<WorkerPid> readWorkerPids(const fs::path& runDir) {
  std::vector<WorkerPid> out;
  for (const fs::path& attempt : sortedDirectories(runDir)) {
    if (!attempt.filename().string().starts_with("attempt_")) {
      continue;
    }
    std::istringstream record(readFile(attempt / kWorkerPidsFile));
    std::string line;
    while (std::getline(record, line)) {
      std::istringstream fields(line);
      WorkerPid w;
      if (!(fields >> w.localRank >> w.rank >> w.pid >> w.startTicks) || w.pid == 0) {
        continue;
      }
      w.attempt = attempt.filename().string();
      out.push_back(std::move(w));
    }
  }
  return out;
}

}  // namespace dtrun::agent::detail
