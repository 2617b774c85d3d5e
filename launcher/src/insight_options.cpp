#include "insight_options.h"

#include <chrono>
#include <cmath>
#include <string>
#include <string_view>

#include "health_options.h"
#include "text.h"
#include "value_parsers.h"

namespace dtrun::launcher {
namespace {
constexpr std::int64_t kMaxConsoleWindowMs = 60000;
}  // namespace

using text::isDigits;
using text::parseInt;
using text::trim;

// dtrun's own job insight: --report, --hang_timeout, the live view, --python_hook, --verbose and
// --dry-run.
Status resolveInsight(const Resolver& options, const HostFacts& host, LaunchPlan& plan) {
  agent::AgentConfig& config = plan.config;
  if (const auto report = options.find("report")) {
    if (trim(report->text).empty()) {
      return expected(*report, "a file path for the JSON report");
    }
    if (const std::string why = host.whyNotWritable(report->text); !why.empty()) {
      return Status::invalidArgument("--report=" + report->text + " cannot be written: " + why);
    }
    config.reportFile = report->text;
  }
  if (const auto events = options.find("event_log")) {
    if (trim(events->text).empty()) {
      return expected(*events, "a file path for the JSON-lines event log");
    }
    if (const std::string why = host.whyNotWritable(events->text); !why.empty()) {
      return Status::invalidArgument("--event_log=" + events->text + " cannot be written: " + why);
    }
    config.eventLogFile = events->text;
  }
  DTRUN_TRY(resolveHealthChecks(options, host, config.healthChecks));
  const auto console = options.get("console", "ranks");
  if (console.text != "ranks" && console.text != "collapse") {
    return expected(console, "ranks or collapse");
  }
  config.console = console.text == "collapse" ? agent::AgentConfig::Console::kCollapse
                                              : agent::AgentConfig::Console::kRanks;
  if (const auto window = options.env("DTRUN_CONSOLE_WINDOW_MS")) {
    const auto ms = isDigits(trim(*window)) ? parseInt(trim(*window)) : std::nullopt;
    if (!ms || *ms < 1 || *ms > kMaxConsoleWindowMs) {
      return Status::invalidArgument(
          "DTRUN_CONSOLE_WINDOW_MS='" + *window +
          "': expected milliseconds from 1 to 60000 (how long --console=collapse waits for the "
          "other ranks' copies of a line; default 200)");
    }
    config.consoleWindow = std::chrono::milliseconds(*ms);
  }
  // dtrun's own error file, as torchrun's @record reads it from its environment (the workers
  // get their own per-rank files).
  config.errorFile = options.env("TORCHELASTIC_ERROR_FILE").value_or("");
  if (!config.errorFile.empty()) {
    if (const std::string why = host.whyNotWritable(config.errorFile); !why.empty()) {
      return Status::invalidArgument("TORCHELASTIC_ERROR_FILE=" + config.errorFile +
                                     " cannot be written: " + why +
                                     " (set it to a writable path, or unset it)");
    }
  }
  const auto hangSetting = options.get("hang_timeout", "0");
  const auto hangSeconds = parseNumber(hangSetting.text);
  if (!hangSeconds || *hangSeconds < 0 || *hangSeconds > kMaxDurationSeconds) {
    return expected(hangSetting, "a non-negative number of seconds (0 = off)");
  }
  config.hangTimeout = std::chrono::milliseconds(std::llround(*hangSeconds * 1000.0));
  DTRUN_ASSIGN_OR_RETURN(config.verbose, options.flag("verbose"));
  if (const auto port = options.find("status_port")) {
    const auto n = isDigits(trim(port->text)) ? parseInt(trim(port->text)) : std::nullopt;
    if (!n || *n > 65535) {
      return expected(*port, "a TCP port from 0 to 65535 (0: a free one)");
    }
    config.statusPort = static_cast<int>(*n);
  }
  const auto statusAddr = options.get("status_addr", "127.0.0.1");
  if (trim(statusAddr.text).empty()) {
    return expected(statusAddr, "an IP address to listen on (127.0.0.1, 0.0.0.0, ...)");
  }
  config.statusAddr = std::string(trim(statusAddr.text));
  // Straggler detection is on by default with the live view: it costs the workers one clock
  // read per collective and the agent nothing it does not already do each second.
  const auto threshold = options.get("straggler_threshold", config.statusPort >= 0 ? "0.2" : "0");
  const auto thresholdSeconds = parseNumber(threshold.text);
  if (!thresholdSeconds || *thresholdSeconds < 0 || *thresholdSeconds > kMaxDurationSeconds) {
    return expected(threshold, "a non-negative number of seconds (0 = off)");
  }
  config.stragglerThreshold = std::chrono::milliseconds(std::llround(*thresholdSeconds * 1000.0));
  const auto window = options.get("straggler_window", "50");
  const auto windowSize = isDigits(trim(window.text)) ? parseInt(trim(window.text)) : std::nullopt;
  if (!windowSize || *windowSize < 2 || *windowSize > 100000) {
    return expected(window, "a number of collectives from 2 to 100000");
  }
  config.stragglerWindow = static_cast<int>(*windowSize);
  const auto hook = options.get("python_hook", "auto");
  if (hook.text != "auto" && hook.text != "on" && hook.text != "off") {
    return expected(hook, "auto, on or off");
  }
  // --verbose's startup timeline reads the store and communicator times from the hook; the live
  // view its operations.
  if (hook.text == "on" ||
      (hook.text == "auto" && (config.hangTimeout.count() > 0 || config.verbose ||
                               config.statusPort >= 0 || config.stragglerThreshold.count() > 0))) {
    static constexpr std::string_view kMissing =
        "dtrun's Python hook (share/dtrun/python/sitecustomize.py) is not installed beside this "
        "dtrun";
    if (!host.pythonHookDir.empty()) {
      config.pythonHookDir = host.pythonHookDir;
    } else if (hook.text == "on") {
      return Status::error(Errc::kInvalidArgument,
                           std::string(kMissing) + ": reinstall dtrun, or pass --python_hook=off");
    } else if (config.hangTimeout.count() > 0) {
      plan.notices.push_back("dtrun: " + std::string(kMissing) +
                             ": Python workers that do not import dtrun_progress are not judged "
                             "by --hang_timeout (reinstall dtrun to have them judged)");
    }
  }
  DTRUN_ASSIGN_OR_RETURN(plan.dryRun, options.flag("dry_run"));
  return Status::ok();
}

}  // namespace dtrun::launcher
