// `dtrun [options] <entrypoint>`: the plan from the command line, then the agent.
#include <iostream>

#include "dtrun/launcher.h"

#include "host_facts.h"
#include "launch_options.h"
#include "log.h"
#include "option_table.h"
#include "signal_mask.h"

namespace dtrun::launcher {
namespace {

int runLaunch(const RawOptions& raw) {
  auto planned = validate(raw, readHostFacts());
  if (!planned.isOk()) {
    std::cerr << "dtrun: " << planned.status().message() << "\n";
    return planned.status().code() == Errc::kNotFound ? agent::kExitCannotRun : kUsageError;
  }
  const LaunchPlan& plan = planned.value();
  // Block the handled signals before any thread exists (every later thread inherits the mask);
  // the agent takes them synchronously.
  std::vector<int> taken = plan.config.signalsToHandle;
  taken.insert(taken.end(), plan.config.signalsToForward.begin(),
               plan.config.signalsToForward.end());
  signals::block(taken);
  log::init(plan.logLevel);
  for (const std::string& notice : plan.notices) {
    std::cerr << notice << "\n";
  }
  for (const std::string& warning : plan.warnings) {
    log::launcher().warn("{}", warning);
  }
  if (plan.dryRun) {
    std::cout << dryRunText(plan, environSnapshot()) << std::flush;
    return 0;
  }
  log::launcher().info("{}", launchBanner(plan));
  return agent::run(plan.config);
}

}  // namespace

std::function<int()> addLaunchCommand(CLI::App& app) {
  auto raw = std::make_shared<RawOptions>();
  addLaunchOptions(app, *raw);
  // `app` outlives the returned function (both live in main).
  return [&app, raw] {
    raw->program = app.remaining();
    return runLaunch(*raw);
  };
}
}  // namespace dtrun::launcher
