#include "job/run_dir.h"

#include <cerrno>
#include <cstdlib>
#include <system_error>

#include <sys/stat.h>

#include "log.h"

namespace dtrun::agent::detail {

namespace fs = std::filesystem;

Result<fs::path> createRunDir(const AgentConfig& config, const std::string& host,
                              const std::string& tmpDir) {
  if (config.discardsLogs()) {
    log::agent().info("--log_dir={}: no log directory, no log or error file", kDiscardLogs);
    return fs::path();
  }
  std::error_code ec;
  fs::path base = config.logDir;
  if (base.empty()) {
    std::string pattern = (tmpDir.empty() ? "/tmp" : tmpDir) + "/dtrun-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      return Status::system("mkdtemp(" + pattern + ")", errno);
    }
    base = pattern;
  }
  fs::create_directories(base, ec);
  if (ec) {
    return Status::invalidArgument("--log_dir: cannot create " + base.string() + ": " +
                                   ec.message());
  }
  fs::path dir;
  for (int n = 1; dir.empty(); ++n) {
    std::string name = config.runId;
    if (n == 2 && config.multiNode) {
      name += "-" + host;
    } else if (n >= 2) {
      name += "-" + std::to_string(n);
    }
    const fs::path candidate = base / name;
    const int err = ::mkdir(candidate.c_str(), 0777) == 0 ? 0 : errno;
    if (err == 0 || (err == EEXIST && !config.multiNode && fs::is_empty(candidate, ec))) {
      dir = candidate;
    } else if (err != EEXIST) {
      return Status::system("--log_dir: mkdir " + candidate.string(), err);
    }
  }
  fs::path absolute = fs::absolute(dir, ec);
  log::agent().info("per-rank logs in {}", absolute.string());
  return absolute;
}

}  // namespace dtrun::agent::detail
