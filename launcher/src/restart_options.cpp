#include "restart_options.h"

#include <cmath>

#include "text.h"

namespace dtrun::launcher {
namespace {

constexpr double kMaxBackoffSeconds = 86400.0;  // a day: beyond it a restart is a new job

Result<std::chrono::milliseconds> parseBackoff(const Setting& setting) {
  const auto seconds = parseNumber(setting.text);
  if (!seconds || *seconds < 0 || *seconds > kMaxBackoffSeconds) {
    return expected(setting, "a number of seconds from 0 to 86400");
  }
  return std::chrono::milliseconds(std::llround(*seconds * 1000.0));
}

}  // namespace

Status resolveRestarts(const Resolver& options, agent::AgentConfig& config) {
  DTRUN_ASSIGN_OR_RETURN(config.restartBackoff, parseBackoff(options.get("restart_backoff", "0")));
  DTRUN_ASSIGN_OR_RETURN(config.restartBackoffMax,
                         parseBackoff(options.get("restart_backoff_max", "60")));
  if (config.restartBackoffMax < config.restartBackoff) {
    return Status::invalidArgument(
        "--restart_backoff_max (" + options.get("restart_backoff_max", "60").text +
        " s) is below --restart_backoff (" + options.get("restart_backoff", "0").text +
        " s): the first wait would exceed the cap; raise the max or lower the backoff");
  }
  DTRUN_ASSIGN_OR_RETURN(config.maxNoProgressAttempts,
                         parseNonNegative(options.get("max_no_progress_attempts", "0")));
  if (const auto file = options.find("progress_file")) {
    if (text::trim(file->text).empty()) {
      return expected(*file, "the path of a file holding the last checkpoint's iteration number");
    }
    config.progressFile = file->text;
  }
  return Status::ok();
}

}  // namespace dtrun::launcher
