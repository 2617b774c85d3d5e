#include "stop_options.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <utility>

#include "plan_text.h"
#include "value_parsers.h"

namespace dtrun::launcher {

namespace {

constexpr double kDefaultShutdownSeconds = 30.0;
constexpr std::string_view kDefaultSignals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";

}  // namespace

// How a stop signal is handled: which signals, the grace period before SIGKILL, and how long
// SIGKILL may take.
Status resolveStopping(const Resolver& options, agent::AgentConfig& config) {
  auto shutdown = options.find("shutdown_timeout");
  if (!shutdown) {
    if (const auto fromEnv = options.env("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
      shutdown = Setting{*fromEnv, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"};
    }
  }
  const Setting shutdownSetting =
      shutdown.value_or(Setting{formatSeconds(kDefaultShutdownSeconds), "--shutdown_timeout"});
  const auto shutdownSeconds = parseNumber(shutdownSetting.text);
  if (!shutdownSeconds || *shutdownSeconds < 0 || *shutdownSeconds > kMaxDurationSeconds) {
    return expected(shutdownSetting, "a non-negative number of seconds");
  }
  config.shutdownTimeout = std::chrono::milliseconds(std::llround(*shutdownSeconds * 1000.0));
  const auto killWait = options.get("kill_wait", "30");
  const auto killSeconds = parseNumber(killWait.text);
  if (!killSeconds || *killSeconds <= 0 || *killSeconds > kMaxDurationSeconds) {
    return expected(killWait, "a positive number of seconds");
  }
  config.killWait = std::chrono::milliseconds(std::llround(*killSeconds * 1000.0));

  const auto signalsSetting = options.get("signals_to_handle", kDefaultSignals);
  auto signals = parseSignalNames(signalsSetting.text);
  if (!signals) {
    return expected(signalsSetting,
                    "comma-separated signal names like SIGTERM,SIGUSR1 (not SIGKILL or SIGSTOP)");
  }
  config.signalsToHandle = std::move(*signals);
  config.signalsToHandleText = signalsSetting.text;
  // Preemption warnings (SIGUSR1/SIGUSR2, e.g. sbatch --signal=USR1@120) go to the workers and
  // the job goes on, unless --signals_to_handle makes them stop signals as torchrun would.
  for (const int sig : {SIGUSR1, SIGUSR2}) {
    if (std::find(config.signalsToHandle.begin(), config.signalsToHandle.end(), sig) ==
        config.signalsToHandle.end()) {
      config.signalsToForward.push_back(sig);
    }
  }
  return Status::ok();
}

}  // namespace dtrun::launcher
