// The wiring's set-up, signals and end (agent_wiring.h says what the wiring is).
#include "dtrun/agent.h"

#include <algorithm>
#include <iomanip>
#include <iostream>

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "agent_wiring.h"
#include "console/console.h"
#include "job/job.h"
#include "log.h"
#include "report/report.h"
#include "workers/workers.h"

namespace dtrun::agent {

static_assert(kExitNoProgress == rdzv::kExitNoProgress, "one exit code for a crash loop");

namespace detail {
namespace {
// How long a console that is not read may hold up dtrun's exit (the log files have every byte).
constexpr std::chrono::milliseconds kConsoleFlushAtExit{5000};
}  // namespace

Agent::Agent(const AgentConfig& config)
    : config_(config),
      peerGraceTimer_(io_),
      restartTimer_(io_),
      inheritedEnv_(environSnapshot()),
      host_(hostName()),
      group_(io_, config, inheritedEnv_, host_,
             [this](const Worker& w, ExitStatus status) { onWorkerExited(w, std::move(status)); }),
      health_(
          io_, config, host_, inheritedEnv_,
          HealthGate::Hooks{.record =
                                [this](const std::vector<CheckResult>& results) {
                                  log_.healthChecked(results, restartCount_);
                                },
                            .leave = [this](const Status& s) { leaveUnhealthy(s); },
                            .stopped =
                                [this] {
                                  return finished_ || stopReason_ == StopReason::kSignal ||
                                         stopReason_ == StopReason::kStoreLost;
                                },
                            .networkPassed = [this] { startAttempt(); },
                            .formAgain =
                                [this](std::string reason) {
                                  job_->endRound(rdzv::RoundEnd{rdzv::RoundEnd::Kind::kMembership,
                                                                std::move(reason), "", 1});
                                }}),
      log_(config, host_) {
  group_.onStuck([this] { onWorkersStuck(); });
}

int Agent::run() {
  if (auto s = prepare(); !s.isOk()) {
    std::cerr << "dtrun: " << s.message() << "\n";
    finish(startupExitCode(s));
    return exitCode_;
  }
  signals_->watch([this](int sig) { onSignal(sig); });
  if (job_) {
    rendezvous();
  } else {
    startAttempt();
  }
  io_.run();
  liveView_.reset();   // no client is answered from a job that ended
  stacks_.reset();     // ends a dump of stacks still under way
  hangWatch_.reset();  // ends a dump still under way
  job_.reset();        // sends what is still queued (leave, bye) before the store may go away
  group_.clear();      // kills and reaps anything still running (only on an internal error)
  group_.flushConsole(kConsoleFlushAtExit);
  return exitCode_;
}

Status Agent::prepare() {
  // Handled signals and SIGCHLD arrive through a signalfd; blocked before the store's thread
  // exists, so that it inherits the mask.
  // SIGTSTP (Ctrl-Z) and SIGCONT (fg): the workers stop and go on with dtrun.
  std::vector<int> taken = {SIGCHLD, SIGTSTP, SIGCONT, stackDumpSignal()};
  taken.insert(taken.end(), config_.signalsToHandle.begin(), config_.signalsToHandle.end());
  taken.insert(taken.end(), config_.signalsToForward.begin(), config_.signalsToForward.end());
  DTRUN_ASSIGN_OR_RETURN(signals_, SignalFeed::open(io_, taken));
  // A closed console must not kill the agent; workers reset it.
  static_cast<void>(::signal(SIGPIPE, SIG_IGN));
  // Orphaned grandchildren are re-parented here instead of to init, so they can be reaped.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (config_.command.empty()) {
    return Status::invalidArgument("no entrypoint to run");
  }
  const auto& multi = config_.multiNode;
  // With etcd every agent serves a workers' store: the round's node 0's is the workers'.
  if (!multi || multi->hostsStore || multi->etcd) {
    DTRUN_ASSIGN_OR_RETURN(store_, startAgentStore(config_));
  }
  // Before the first join (or attempt): a node that fails a check never joins; a non-host
  // waits for the store's host as long as the join would.
  DTRUN_TRY(health_.checkHere(
      healthPlan(multi && !store_ ? multi->readTimeout : std::chrono::milliseconds(0))));
  std::unique_ptr<ProgressExchange> exchange;
  std::unique_ptr<LiveExchange> liveExchange;
  rdzv::StoreFactory stackStores;  // the job's store, for the stacks of every node
  if (multi) {
    DTRUN_ASSIGN_OR_RETURN(auto link,
                           connectJob(config_, *multi, host_, store_.get(), [this](Status s) {
                             boost::asio::post(io_, [this, s = std::move(s)] { onStoreLost(s); });
                           }));
    keepers_ = std::move(link.keepers);
    workersStore_ = std::move(link.workersStore);
    etcd_ = std::move(link.etcd);
    jobStore_ = link.reportStores;
    job_ = std::make_unique<JobCoordinator>(io_, std::move(link.member), multi->keepAliveInterval,
                                            [this](const Status& s) { onStoreLost(s); });
    if (const auto& console = group_.collapsedConsole()) {  // the job's lines to one console
      auto relay = ConsoleRelay::connect(io_, link.stores, config_.runId, console, gathersJob());
      if (relay.isOk()) {
        consoleRelay_ = std::move(relay).value();
      } else {
        log::agent().warn("--console=collapse merges this node's ranks only: {}",
                          relay.status().message());
      }
    }
    if (LiveView::wanted(config_)) {  // this node in the job's live view
      if (config_.statusPort >= 0) {
        stackStores = link.stores;
      }
      auto connected = LiveExchange::connect(io_, link.stores, config_.runId, gathersJob());
      if (connected.isOk()) {
        liveExchange = std::move(connected).value();
      } else {
        log::agent().warn("the live status shows this node only: {}", connected.status().message());
      }
    }
    if (config_.hangTimeout.count() > 0) {  // the other nodes' ranks, for the diagnosis
      auto connected = ProgressExchange::connect(io_, link.stores, config_.runId);
      if (connected.isOk()) {
        exchange = std::move(connected).value();
      } else {
        log::agent().warn("hang detection sees this node's ranks only: {}",
                          connected.status().message());
      }
    }
  }
  hangWatch_ = std::make_unique<HangWatch>(io_, config_, host_, envValue(inheritedEnv_, "PATH"),
                                           std::move(exchange));
  DTRUN_ASSIGN_OR_RETURN(runDir_, createRunDir(config_, host_, envValue(inheritedEnv_, "TMPDIR")));
  writeRunFacts(runDir_, config_, host_);
  log_.setRunDir(runDir_);
  stacks_ = std::make_unique<StackDumps>(io_, config_, host_, envValue(inheritedEnv_, "PATH"),
                                         group_, [this] { return stackFacts(); });
  if (stackStores) {
    if (const Status s = stacks_->connect(stackStores, gathersJob()); !s.isOk()) {
      log::agent().warn("the stacks on demand are this node's only: {}", s.message());
    }
  }
  if (LiveView::wanted(config_)) {
    DTRUN_ASSIGN_OR_RETURN(
        liveView_, LiveView::start(
                       io_, config_, host_, group_, [this] { return liveFacts(); },
                       std::move(liveExchange), [this](const Straggler& s) { onStraggler(s); }));
  }
  if (config_.statusPort >= 0) {
    // GET /stacks: asked on the server's thread, dumped from the loop, replied from there.
    liveView_->serveStacks([this](StatusServer::StacksReply reply) {
      boost::asio::post(io_, [this, reply = std::move(reply)] {
        stacks_->request([reply](const StackDumps::Answer& a) { reply(a.text); });
      });
    });
    log::agent().info("live status of this node: http://{}:{}/ (/status, /metrics)",
                      config_.statusAddr, liveView_->port());
  }
  return Status::ok();
}

LiveFacts Agent::liveFacts() const {
  LiveFacts facts;
  if (assignment_) {
    facts.nodeRank = assignment_->nodeRank;
    facts.nodeCount = assignment_->nodeCount;
    facts.round = assignment_->round;
  }
  facts.attempt = restartCount_;
  facts.restarts = restartCount_;
  if (finished_) {
    facts.state = "finished";
  } else if (stopReason_ != StopReason::kNone) {
    facts.state = "stopping";
  } else if (job_ && !assignment_) {
    facts.state = "rendezvous";
  } else if (group_.workers().empty()) {
    facts.state = "starting";
  } else if (group_.allExited()) {
    facts.state = "restarting";
  } else {
    facts.state = "running";
  }
  return facts;
}

// Named once (until it recovers) by the agent that sees the whole job.
void Agent::onStraggler(const Straggler& s) {
  std::cerr << std::fixed << std::setprecision(2) << "dtrun: straggler: rank " << s.rank << " on "
            << s.host << " (node " << s.nodeRank << ") reaches collectives " << s.lateSeconds
            << " s after the others, late in " << s.lateCount << " of the last " << s.judged
            << " (--straggler_threshold="
            << static_cast<double>(config_.stragglerThreshold.count()) / 1000.0 << ")\n"
            << std::defaultfloat;
  log_.stragglerNamed(StragglerRecord{Clock::now(), restartCount_, s.rank, s.nodeRank, s.host,
                                      s.lateSeconds, s.lateCount, s.judged});
}

StackFacts Agent::stackFacts() const {
  StackFacts facts;
  facts.nodeRank = assignment_ ? assignment_->nodeRank : 0;
  facts.otherNodes = liveView_ ? liveView_->otherNodes() : std::vector<int>{};
  facts.runDir = runDir_;
  return facts;
}

// SIGRTMIN+3: the stacks into the run directory, and one line naming the file.
void Agent::dumpStacksOnSignal() {
  log::agent().info("received SIGRTMIN+3: dumping the stacks of every worker (the job runs on)");
  stacks_->request([](const StackDumps::Answer& a) {
    std::cerr << "dtrun: stacks of every running worker, grouped: "
              << (a.file.empty() ? "(not written)" : a.file) << "\n";
  });
}

HealthPlan Agent::healthPlan(std::chrono::milliseconds storeConnectWait) const {
  std::string logRoot = runDir_.string();
  if (logRoot.empty()) {
    const std::string tmp = envValue(inheritedEnv_, "TMPDIR");
    logRoot = !config_.logDir.empty() ? config_.logDir : tmp.empty() ? "/tmp" : tmp;
  }
  // This node's own store is asked on loopback, as its keepers ask it (job_setup.cpp).
  return planHealthChecks(config_, logRoot, store_ ? "127.0.0.1" : config_.masterAddr, storePort(),
                          storeConnectWait);
}

// A node that fails a check leaves the job, so a spare takes its place instead of the round
// failing on it, and exits 1 (no restart loop on a broken node).
void Agent::leaveUnhealthy(const Status& s) {
  std::cerr << "dtrun: " << s.message()
            << (job_ ? "; this node leaves the job" : "; not restarting") << "\n";
  if (job_) {
    job_->leave(s.message());
  }
  // One node: the job ends here, and the worker's failure that asked for the restart stays its
  // cause. (Many: this node leaves, the job goes on without it.)
  if (!job_ && !failures_.empty()) {
    stopReason_ = StopReason::kFailure;
    std::cerr << formatFailureReport(config_.entrypointName, host_, failures_);
    recordRootCause(failures_.front());
    finish(failures_.front().status.shellCode());
    return;
  }
  stopReason_ = StopReason::kStartup;
  finish(1);
}

std::uint16_t Agent::storePort() const { return store_ ? store_->port() : config_.storePort; }

// Whether this agent gathers the job: prints its collapsed console, waits at the end until
// every node passed the exit barrier, and writes the one report. The store's host; with etcd,
// the agent that runs the keeper.
bool Agent::gathersJob() const { return etcd_ ? etcd_->leads() : store_ != nullptr; }

// The job's store as messages name it.
std::string Agent::jobStoreName() const {
  if (config_.multiNode && config_.multiNode->etcd) {
    std::string endpoints;
    for (const auto& e : config_.multiNode->etcd->endpoints) {
      endpoints += (endpoints.empty() ? "" : ",") + e;
    }
    return "etcd at " + endpoints;
  }
  return "the rendezvous store at " + config_.masterAddr + ":" + std::to_string(storePort());
}

void Agent::onSignal(int sig) {
  if (sig == SIGCHLD) {  // workers' exits come through their pidfds; this reaps orphans
    group_.reapOrphans();
    group_.noticeStops();
    return;
  }
  if (sig == stackDumpSignal()) {
    dumpStacksOnSignal();
    return;
  }
  const auto& handled = config_.signalsToHandle;
  if (sig == SIGTSTP && std::find(handled.begin(), handled.end(), sig) == handled.end()) {
    // Workers run in process groups of their own: Ctrl-Z reaches dtrun alone.
    log::agent().info("received SIGTSTP: stopping every worker, then dtrun (fg resumes them)");
    group_.suspend();
    static_cast<void>(::raise(SIGSTOP));
    return;
  }
  if (sig == SIGCONT) {
    group_.resume();
    return;
  }
  const auto& forwarded = config_.signalsToForward;
  if (std::find(forwarded.begin(), forwarded.end(), sig) != forwarded.end()) {
    log::agent().info("received {}: forwarding it to every worker (the job keeps running)",
                      signalName(sig));
    log_.signalReceived(sig, false);
    forwardedSignals_.insert(sig);
    group_.signalAll(sig);
    return;
  }
  if (stopReason_ == StopReason::kSignal && sig == SIGINT) {
    log::agent().warn("second SIGINT: killing every worker now");
    group_.signalAll(SIGKILL);
    return;
  }
  log::agent().warn("received {}: forwarding it to every worker and stopping", signalName(sig));
  log_.signalReceived(sig, true);
  stopReason_ = StopReason::kSignal;
  stopSignal_ = sig;
  hangWatch_->stopDump();
  beginStop(sig);
  if (group_.allExited()) {  // between rounds: nothing to wait for
    boost::asio::post(io_, [this] { onAllExited(); });
  }
}

// The job failed with `root` as its cause: into the run record, and into dtrun's own
// TORCHELASTIC_ERROR_FILE when a scheduler or an outer launcher gave one.
void Agent::recordRootCause(const WorkerFailure& root) {
  log_.setRootCause(root);
  if (!config_.errorFile.empty()) {
    writeRootCauseErrorFile(config_.errorFile, root, host_);
  }
}

void Agent::finish(int code) {
  finished_ = true;
  exitCode_ = code;
  log_.end(stopReason_, failures_, hangThisAttempt_, stopSignal_, roundEnd_, group_);
  log_.finish(code, stopReason_);
  io_.stop();
}

}  // namespace detail

int run(const AgentConfig& config) {
  detail::startWorkerGuardian();  // before the first thread: it forks
  int code = 0;
  {
    detail::Agent agent(config);
    code = agent.run();
  }
  detail::stopWorkerGuardian();  // dtrun exits only after its own helper is gone
  return code;
}

int stackDumpSignal() { return SIGRTMIN + 3; }

}  // namespace dtrun::agent
