// Whether this node may take part in the next round: the --health_checks before it (blocking
// before the agent's loop runs, on their own thread between rounds) and, once a round formed,
// its network check (dtrun-netcheck between the round's nodes). The gate judges; what a verdict
// means for the job (leave it, form the round again, start the workers) is the wiring's, told
// through Hooks.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/agent_config.h"
#include "dtrun/common.h"

#include "health/health_checks.h"
#include "health/health_runner.h"
#include "health/net_check.h"

namespace dtrun::agent::detail {

class HealthGate {
 public:
  struct Hooks {
    // Every check's result, for the run record and the event log.
    std::function<void(const std::vector<CheckResult>&)> record;
    // This node failed a check (or could not run one): it leaves; the Status is the console line.
    std::function<void(const Status&)> leave;
    // The job stopped meanwhile (a signal, the store lost, dtrun finishing): a late verdict is
    // dropped. A previous attempt's failure is not a stop: its restart is what is being checked.
    std::function<bool()> stopped;
    // The network check passed on this node: its workers may start.
    std::function<void()> networkPassed;
    // The network check could not complete: the round forms again, for this reason.
    std::function<void(std::string reason)> formAgain;
  };

  HealthGate(boost::asio::io_context& io, const AgentConfig& config, std::string host,
             const std::vector<std::string>& inheritedEnv, Hooks hooks);

  // Before the loop runs: kOk when every check passed, else the first failure's console line.
  Status checkHere(const HealthPlan& plan);
  // Between rounds, off the loop: `next` runs once every check passed; a node that fails one
  // leaves (Hooks::leave).
  void checkBeforeRound(HealthPlan plan, std::function<void()> next);

  // --health_checks=network for the round `round` just formed, this node at `place`.
  void checkNetwork(int round, NetcheckPlace place);
  // From the round's forming until its network check's verdict was acted on.
  [[nodiscard]] bool checkingNetwork() const { return checking_; }
  // The round ended during its network check: `handOn` runs once the check's result is in (the
  // report keeps every round's figures), or at once when no check runs.
  void roundEnded(std::function<void()> handOn);

 private:
  Status judge(const std::vector<CheckResult>& results);
  void onNetworkChecked(const std::string& output, bool killed,
                        std::chrono::steady_clock::time_point began);
  void handOnRoundEnd();

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  const std::string host_;
  const std::vector<std::string>& inheritedEnv_;
  Hooks hooks_;
  HealthRunner runner_;
  std::unique_ptr<NetcheckRun> netcheck_;
  bool checking_ = false;  // the round formed; its network check runs or named another node
  int round_ = -1;
  NetcheckPlace place_;
  int timeouts_ = 0;                  // network checks in a row that did not complete
  std::function<void()> pendingEnd_;  // a round's end waiting for the check's result ...
  boost::asio::steady_timer grace_;   // ... or for kNetcheckAfterRoundEnd
};

}  // namespace dtrun::agent::detail
