// The agent's wiring: one thread, one io_context over a signalfd, the workers' pidfds and pipes and
// a few timers; nothing sleeps or polls. The parts, in the order a launch meets them:
//   job/         the store this node may host, the keepers beside it, the round membership,
//                the run directory, the signals, what to do after an attempt (attempt_policy)
//   health/      HealthGate: --health_checks before each round, the round's network check
//   workers/     WorkerGroup: one attempt's processes: spawn, output, exits
//   hang/        HangWatch: --hang_timeout: progress files, diagnosis, stack dumps off the loop
//   report/      AttemptLog: the run record: attempts, causes, outcome, --report
//   live/        LiveView: --status_port: the running job's ranks, as JSON, metrics and a page;
//                StackDumps: every rank's stacks on demand (GET /stacks, SIGRTMIN+3)
// The wiring only connects their events, in three files by what it connects: agent.cpp (set-up,
// signals, the end), agent_rounds.cpp (a multi-node job's rounds), agent_attempts.cpp (one
// attempt of the worker group and what follows it). Nothing below includes this header.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/agent_config.h"
#include "dtrun/etcd.h"
#include "dtrun/rendezvous.h"
#include "dtrun/round.h"

#include "console/console.h"
#include "hang/hang.h"
#include "health/health.h"
#include "job/job.h"
#include "live/live.h"
#include "report/report.h"
#include "workers/workers.h"

namespace dtrun::agent::detail {

class Agent {
 public:
  explicit Agent(const AgentConfig& config);
  // The job on this node, start to end: dtrun's exit code.
  int run();

 private:
  // ---- set-up, signals, the end (agent.cpp) ----
  Status prepare();
  [[nodiscard]] HealthPlan healthPlan(std::chrono::milliseconds storeConnectWait) const;
  void leaveUnhealthy(const Status& s);
  [[nodiscard]] std::uint16_t storePort() const;
  [[nodiscard]] bool gathersJob() const;
  [[nodiscard]] std::string jobStoreName() const;
  void onSignal(int sig);
  void recordRootCause(const WorkerFailure& root);
  void finish(int code);
  [[nodiscard]] LiveFacts liveFacts() const;
  void onStraggler(const Straggler& s);
  [[nodiscard]] StackFacts stackFacts() const;
  void dumpStacksOnSignal();

  // ---- a multi-node job's rounds (agent_rounds.cpp) ----
  void rendezvous();
  void join();
  void onJoined(const rdzv::JoinOutcome& outcome);
  void checkNetwork();
  void roundEndedBeforeWorkers(const rdzv::RoundEnd& end);
  void onRoundEnded(const rdzv::RoundEnd& end);
  void jobClosed(const rdzv::RoundEnd& end);
  void finishWithJob(int code);
  void onStoreLost(const Status& status);

  // ---- one attempt and what follows it (agent_attempts.cpp) ----
  void startAttempt();
  void onWorkerExited(const Worker& w, ExitStatus status);
  void onWorkersStuck();
  void judgeAttempt();
  void after(std::chrono::milliseconds delay, std::function<void()> next);
  [[nodiscard]] rdzv::RoundEnd roundFailure(std::string message, const WorkerFailure& failure,
                                            int code) const;
  void onHang(HangDiagnosis diagnosis);
  void afterDump(HangRecord hang);
  void beginStop(int sig);
  void onAllExited();
  void decide(bool groupJustEnded);

  const AgentConfig& config_;
  boost::asio::io_context io_;
  boost::asio::steady_timer peerGraceTimer_;  // a hung job's stop waits for the other nodes' dumps
  boost::asio::steady_timer restartTimer_;    // --restart_backoff: the wait before the next attempt
  const std::vector<std::string> inheritedEnv_;
  const std::string host_;
  std::unique_ptr<SignalFeed> signals_;
  std::unique_ptr<rdzv::StoreServer> store_;  // outlives every worker group (and the keepers)
  // c10d, not the store's host: this node's workers' store (used in a round without the store's
  // host, e.g. on a shared `dtrun store`: node 0's serves the workers)
  std::unique_ptr<rdzv::StoreServer> workersStore_;
  rdzv::StoreFactory jobStore_;  // multi-node: the job's store, with a short timeout (reports)
  std::unique_ptr<rdzv::KeeperService> keepers_;
  std::unique_ptr<rdzv::EtcdPresence> etcd_;  // --rdzv_backend=etcd: lease, keeper candidacy
  std::unique_ptr<JobCoordinator> job_;       // multi-node only
  WorkerGroup group_;
  std::unique_ptr<LiveView> liveView_;          // --status_port; reads group_, so declared after it
  std::unique_ptr<StackDumps> stacks_;          // reads group_ and liveView_
  std::unique_ptr<ConsoleRelay> consoleRelay_;  // --console=collapse, multi-node
  std::unique_ptr<HangWatch> hangWatch_;
  HealthGate health_;  // after io_: destroyed before it
  AttemptLog log_;     // what --report writes and the summary at exit shows
  std::filesystem::path runDir_;
  std::filesystem::path attemptDir_;
  // The current attempt and round.
  std::optional<rdzv::Assignment> assignment_;
  std::optional<rdzv::RoundEnd> roundEnd_;
  std::optional<Clock::time_point> joinSent_;
  std::optional<Clock::time_point> roundClosed_;
  std::vector<WorkerFailure> failures_;
  int restartCount_ = 0;
  Progress attemptProgress_ = Progress::kUnknown;  // of the attempt that failed
  int noProgressStreak_ = 0;                       // failed attempts in a row without progress
  std::optional<long long> iterationAtStart_;  // --progress_file's number when the attempt began
  StopReason stopReason_ = StopReason::kNone;
  int stopSignal_ = 0;
  std::set<int> forwardedSignals_;  // --signals_forwarded ones that reached the workers
  bool hangThisAttempt_ = false;    // this attempt's failure is a detected hang
  bool attemptSettled_ = false;     // the group is down and settled; the policy has been asked
  bool workerStuck_ = false;        // a worker of this attempt outlived SIGKILL (abandoned)
  int startupExitCode_ = 0;
  const OomKillCount oomKills_ = OomKillCount::ofThisProcess();
  std::optional<long long> oomKillsBefore_;  // the cgroup's OOM kills when the attempt began
  int exitCode_ = 0;
  bool finished_ = false;
};

}  // namespace dtrun::agent::detail
