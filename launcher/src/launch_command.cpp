// `dtrun [options] <entrypoint>`: dtrun/launcher.h's LaunchCommand, the plan from the command
// line, then the agent.
#include <iostream>

#include "dtrun/agent.h"
#include "dtrun/launcher.h"

#include "fanout/fanout.h"
#include "host_facts.h"
#include "launch_plan.h"
#include "log.h"
#include "option_table.h"
#include "plan_text.h"
#include "signal_mask.h"
#include "ssh_plan.h"

namespace dtrun::launcher {

LaunchCommand::LaunchCommand(CLI::App& app) : app_(app), raw_(std::make_unique<RawOptions>()) {
  addLaunchOptions(app, *raw_);
}

LaunchCommand::~LaunchCommand() = default;

std::optional<int> LaunchCommand::plan() {
  raw_->program = app_.remaining();
  if (wantsSsh(*raw_)) {  // --hostfile/--hosts: one agent per host over ssh, started from here
    const HostFacts host = readHostFacts();
    auto ssh = planSsh(*raw_, host, readSshFacts(host.env, host.resolveProgram));
    if (!ssh.isOk()) {
      std::cerr << "dtrun: " << ssh.status().message() << "\n";
      return kUsageError;
    }
    ssh_ = std::make_unique<SshPlan>(std::move(ssh).value());
    return std::nullopt;
  }
  if (const Status alone = checkNoSshOptions(*raw_); !alone.isOk()) {
    std::cerr << "dtrun: " << alone.message() << "\n";
    return kUsageError;
  }
  auto planned = validate(*raw_, readHostFacts());
  if (!planned.isOk()) {
    std::cerr << "dtrun: " << planned.status().message() << "\n";
    // The one place that decides "cannot run": before anything starts, the shell's code.
    return planned.status().code() == Errc::kNotFound ? agent::kExitCannotRun : kUsageError;
  }
  plan_ = std::make_unique<LaunchPlan>(std::move(planned).value());
  return std::nullopt;
}

void LaunchCommand::prepareProcess() const {
  if (ssh_ != nullptr) {
    return;  // runSsh takes its signals itself, on its one thread
  }
  DTRUN_CHECK(plan_ != nullptr, "prepareProcess() before plan()");
  // Block the handled signals before any thread exists (every later thread inherits the mask);
  // the agent takes them synchronously.
  const agent::AgentConfig& config = plan_->config;
  std::vector<int> taken = config.signalsToHandle;
  taken.insert(taken.end(), config.signalsToForward.begin(), config.signalsToForward.end());
  taken.push_back(agent::stackDumpSignal());
  signals::block(taken);
  log::init(plan_->logLevel);
  for (const std::string& notice : plan_->notices) {
    std::cerr << notice << "\n";
  }
  for (const std::string& warning : plan_->warnings) {
    log::launcher().warn("{}", warning);
  }
}

bool LaunchCommand::dryRun() const {
  if (ssh_ != nullptr) {
    return ssh_->dryRun;
  }
  DTRUN_CHECK(plan_ != nullptr, "dryRun() before plan()");
  return plan_->dryRun;
}

int LaunchCommand::printDryRun() const {
  if (ssh_ != nullptr) {
    std::cout << sshPlanText(*ssh_) << std::flush;
    return 0;
  }
  DTRUN_CHECK(plan_ != nullptr, "printDryRun() before plan()");
  std::cout << dryRunText(*plan_, environSnapshot()) << std::flush;
  return 0;
}

int LaunchCommand::runAgent(std::string_view versionLine,
                            std::vector<std::string> commandLine) const {
  if (ssh_ != nullptr) {
    return runSsh(*ssh_);
  }
  DTRUN_CHECK(plan_ != nullptr, "runAgent() before plan()");
  if (raw_->given.contains(kWatchStdinDest)) {  // an agent started over ssh by --hostfile
    constexpr std::chrono::milliseconds kWatchMargin{5000};
    const Status watched =
        startStdinWatch(plan_->config.shutdownTimeout + kWatchMargin, kRemoteReadyLine);
    if (!watched.isOk()) {
      std::cerr << "dtrun: " << watched.message() << "\n";
      return 1;
    }
  }
  // torchrun prints nothing here; one line says what runs, --verbose the whole configuration.
  log::launcher().info("{}", plan_->config.verbose ? launchBanner(*plan_) : launchSummary(*plan_));
  agent::AgentConfig config = plan_->config;
  config.dtrunVersion = versionLine;
  config.commandLine = std::move(commandLine);
  return agent::run(config);
}

}  // namespace dtrun::launcher
