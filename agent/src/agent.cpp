// The agent's wiring: one thread, one io_context over a signalfd, the workers' pidfds and pipes and
// a few timers; nothing sleeps or polls. The parts, in the order a launch meets them:
//   job_setup    the store this node may host, the keepers beside it, the round membership
//   health_checks  --health_checks before each round: a broken node stays out of the job
//   run_dir      <log_dir>/<run_id> on this node
//   WorkerGroup  one attempt's processes: spawn, output, exits (worker_group.h)
//   HangWatch    --hang_timeout: progress files, diagnosis, stack dumps off the loop
//   AttemptLog   the run record: attempts, causes, outcome, --report
//   decideAfterAttempt  what happens once the group is down (attempt_policy.h)
// This file only connects their events: exits, signals, the round's news.
#include "dtrun/agent.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <utility>  // before Asio (Boost 1.74 under C++20)

#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/etcd.h"
#include "dtrun/rendezvous.h"
#include "dtrun/round.h"

#include "console/console_relay.h"
#include "hang/hang_watch.h"
#include "health/health_checks.h"
#include "health/health_runner.h"
#include "health/net_check.h"
#include "job/attempt_policy.h"
#include "job/attempt_progress.h"
#include "job/job_coordinator.h"
#include "job/job_setup.h"
#include "job/run_dir.h"
#include "log.h"
#include "report/attempt_log.h"
#include "report/failure_report.h"
#include "report/job_report.h"
#include "report/root_cause_file.h"
#include "signal_mask.h"
#include "workers/oom_kills.h"
#include "workers/worker_group.h"
#include "workers/worker_guardian.h"

extern char** environ;  // NOLINT: POSIX declares it nowhere

namespace dtrun::agent {

static_assert(kExitNoProgress == rdzv::kExitNoProgress, "one exit code for a crash loop");
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using detail::ExitStatus;
using detail::StopReason;
using detail::WorkerFailure;

constexpr std::size_t kStderrTailLines = 20;
// How long a console that is not read may hold up dtrun's exit (the log files have every byte).
constexpr std::chrono::milliseconds kConsoleFlushAtExit{5000};
// Every node of a hung job dumps its stacks at about the same time; stopping this node's workers
// at once would break the connections of workers another node is still dumping.
constexpr std::chrono::milliseconds kPeerDumpGrace{2000};
// dtrun-netcheck bounds its exchange itself; this is its time to start and print on top.
constexpr std::chrono::milliseconds kNetcheckGrace{3000};
// How long a round's end waits for this node's network check to print (the figures are all
// gathered when the node they named leaves; a check waiting for an absent peer is cut off).
constexpr std::chrono::milliseconds kNetcheckAfterRoundEnd{1000};

std::vector<std::string> environSnapshot() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    out.emplace_back(*e);
  }
  return out;
}

std::string envValue(const std::vector<std::string>& env, const std::string& name) {
  const std::string prefix = name + "=";
  for (const auto& entry : env) {
    if (entry.rfind(prefix, 0) == 0) {
      return entry.substr(prefix.size());
    }
  }
  return {};
}

std::string hostName() {
  std::array<char, 256> buffer{};
  if (::gethostname(buffer.data(), buffer.size() - 1) != 0) {
    return "localhost";
  }
  return buffer.data();
}

// The worker's own account of its failure: its error file, else the tail of its stderr.
void describeFromFiles(WorkerFailure& failure, const fs::path& dir) {
  if (dir.empty()) {                 // --log_dir=/dev/null: the worker had neither
    if (!failure.status.signaled) {  // (a signal's own line says more)
      failure.message = "(--log_dir=/dev/null: no error file or stderr log was kept)";
    }
    return;
  }
  if (!detail::readErrorFile((dir / "error.json").string(), failure)) {
    failure.message = detail::tailOfFile((dir / "stderr.log").string(), kStderrTailLines);
  }
  if (!failure.status.killedBy.empty()) {  // the worker's own last words cannot say it
    failure.message =
        failure.status.killedBy + (failure.message.empty() ? "" : "\n" + failure.message);
  }
}

class Agent {
 public:
  explicit Agent(const AgentConfig& config)
      : config_(config),
        peerGraceTimer_(io_),
        restartTimer_(io_),
        inheritedEnv_(environSnapshot()),
        host_(hostName()),
        group_(io_, config, inheritedEnv_, host_,
               [this](const detail::Worker& w, ExitStatus status) {
                 onWorkerExited(w, std::move(status));
               }),
        log_(config, host_) {}

  int run() {
    if (auto s = prepare(); !s.isOk()) {
      std::cerr << "dtrun: " << s.message() << "\n";
      finish(detail::startupExitCode(s));
      return exitCode_;
    }
    watchSignals();
    if (job_) {
      rendezvous();
    } else {
      startAttempt();
    }
    io_.run();
    hangWatch_.reset();  // ends a dump still under way
    job_.reset();        // sends what is still queued (leave, bye) before the store may go away
    group_.clear();      // kills and reaps anything still running (only on an internal error)
    group_.flushConsole(kConsoleFlushAtExit);
    return exitCode_;
  }

 private:
  // ---- set-up ----

  Status prepare() {
    // Handled signals and SIGCHLD arrive through a signalfd; blocked before the store's thread
    // exists, so that it inherits the mask.
    // SIGTSTP (Ctrl-Z) and SIGCONT (fg): the workers stop and go on with dtrun.
    std::vector<int> taken = {SIGCHLD, SIGTSTP, SIGCONT};
    taken.insert(taken.end(), config_.signalsToHandle.begin(), config_.signalsToHandle.end());
    taken.insert(taken.end(), config_.signalsToForward.begin(), config_.signalsToForward.end());
    const sigset_t set = signals::block(taken);
    signalFd_ = UniqueFd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
    if (!signalFd_.valid()) {
      return Status::system("signalfd", errno);
    }
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
      DTRUN_ASSIGN_OR_RETURN(store_, detail::startAgentStore(config_));
    }
    // Before the first join (or attempt): a node that fails a check never joins; a non-host
    // waits for the store's host as long as the join would.
    DTRUN_TRY(checkHealth(multi && !store_ ? multi->readTimeout : std::chrono::milliseconds(0)));
    std::unique_ptr<detail::ProgressExchange> exchange;
    if (multi) {
      DTRUN_ASSIGN_OR_RETURN(
          auto link, detail::connectJob(config_, *multi, host_, store_.get(), [this](Status s) {
            asio::post(io_, [this, s = std::move(s)] { onStoreLost(s); });
          }));
      keepers_ = std::move(link.keepers);
      workersStore_ = std::move(link.workersStore);
      etcd_ = std::move(link.etcd);
      jobStore_ = link.reportStores;
      job_ = std::make_unique<detail::JobCoordinator>(io_, std::move(link.member),
                                                      multi->keepAliveInterval,
                                                      [this](const Status& s) { onStoreLost(s); });
      if (const auto& console = group_.collapsedConsole()) {  // the job's lines to one console
        auto relay =
            detail::ConsoleRelay::connect(io_, link.stores, config_.runId, console, gathersJob());
        if (relay.isOk()) {
          consoleRelay_ = std::move(relay).value();
        } else {
          log::agent().warn("--console=collapse merges this node's ranks only: {}",
                            relay.status().message());
        }
      }
      if (config_.hangTimeout.count() > 0) {  // the other nodes' ranks, for the diagnosis
        auto connected = detail::ProgressExchange::connect(io_, link.stores, config_.runId);
        if (connected.isOk()) {
          exchange = std::move(connected).value();
        } else {
          log::agent().warn("hang detection sees this node's ranks only: {}",
                            connected.status().message());
        }
      }
    }
    hangWatch_ = std::make_unique<detail::HangWatch>(
        io_, config_, host_, envValue(inheritedEnv_, "PATH"), std::move(exchange));
    DTRUN_ASSIGN_OR_RETURN(runDir_,
                           detail::createRunDir(config_, host_, envValue(inheritedEnv_, "TMPDIR")));
    return Status::ok();
  }

  // --health_checks: kOk when every check passed, else an error whose message is the console's
  // line. Blocks: only before the loop runs (prepare); between rounds, checkBeforeRound.
  Status checkHealth(std::chrono::milliseconds storeConnectWait) {
    if (!config_.healthChecks.any()) {
      return Status::ok();
    }
    return judgeHealth(healthRunner_.runHere(healthPlan(storeConnectWait)));
  }

  [[nodiscard]] detail::HealthPlan healthPlan(std::chrono::milliseconds storeConnectWait) const {
    std::string logRoot = runDir_.string();
    if (logRoot.empty()) {
      const std::string tmp = envValue(inheritedEnv_, "TMPDIR");
      logRoot = !config_.logDir.empty() ? config_.logDir : tmp.empty() ? "/tmp" : tmp;
    }
    // This node's own store is asked on loopback, as its keepers ask it (job_setup.cpp).
    return detail::planHealthChecks(config_, logRoot, store_ ? "127.0.0.1" : config_.masterAddr,
                                    storePort(), storeConnectWait);
  }

  // Every result to the event log and the report; the first failure's console line.
  Status judgeHealth(const std::vector<detail::CheckResult>& results) {
    log_.healthChecked(results, restartCount_);
    for (const auto& r : results) {
      if (!r.passed()) {
        return Status::error(Errc::kSystem, detail::failureLine(host_, r));
      }
      log::agent().debug("health check {}: {}", r.check, r.detail);
    }
    return Status::ok();
  }

  // Before a later round (or a restart), on the checks' own thread while the loop goes on: `next`
  // runs once every check passed. A node that fails one leaves the job, so a spare takes its
  // place instead of the round failing on it, and exits 1 (no restart loop on a broken node).
  void checkBeforeRound(std::function<void()> next) {
    if (!config_.healthChecks.any()) {
      next();
      return;
    }
    healthRunner_.run(
        healthPlan(std::chrono::milliseconds(0)),
        [this, next = std::move(next)](const std::vector<detail::CheckResult>& results) {
          if (finished_ || stopReason_ == StopReason::kSignal ||
              stopReason_ == StopReason::kStoreLost) {
            return;  // the job stopped meanwhile
          }
          if (const Status s = judgeHealth(results); !s.isOk()) {
            leaveUnhealthy(s);
            return;
          }
          next();
        });
  }

  void leaveUnhealthy(const Status& s) {
    std::cerr << "dtrun: " << s.message()
              << (job_ ? "; this node leaves the job" : "; not restarting") << "\n";
    if (job_) {
      job_->leave(s.message());
    }
    // One node: the job ends here, and the worker's failure that asked for the restart stays its
    // cause. (Many: this node leaves, the job goes on without it.)
    if (!job_ && !failures_.empty()) {
      stopReason_ = StopReason::kFailure;
      std::cerr << detail::formatFailureReport(config_.entrypointName, host_, failures_);
      recordRootCause(failures_.front());
      finish(failures_.front().status.shellCode());
      return;
    }
    stopReason_ = StopReason::kStartup;
    finish(1);
  }

  [[nodiscard]] std::uint16_t storePort() const {
    return store_ ? store_->port() : config_.storePort;
  }

  // Whether this agent gathers the job: prints its collapsed console, waits at the end until
  // every node passed the exit barrier, and writes the one report. The store's host; with etcd,
  // the agent that runs the keeper.
  [[nodiscard]] bool gathersJob() const { return etcd_ ? etcd_->leads() : store_ != nullptr; }

  // The job's store as messages name it.
  [[nodiscard]] std::string jobStoreName() const {
    if (config_.multiNode && config_.multiNode->etcd) {
      std::string endpoints;
      for (const auto& e : config_.multiNode->etcd->endpoints) {
        endpoints += (endpoints.empty() ? "" : ",") + e;
      }
      return "etcd at " + endpoints;
    }
    return "the rendezvous store at " + config_.masterAddr + ":" + std::to_string(storePort());
  }

  // ---- signals ----

  void watchSignals() {
    signalWatch_ = std::make_unique<asio::posix::stream_descriptor>(io_, ::dup(signalFd_.get()));
    armSignalWatch();
  }

  void armSignalWatch() {
    signalWatch_->async_wait(
        asio::posix::descriptor_base::wait_read, [this](const boost::system::error_code& ec) {
          if (ec) {
            return;
          }
          signalfd_siginfo info{};
          while (::read(signalFd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
            onSignal(static_cast<int>(info.ssi_signo));
          }
          armSignalWatch();
        });
  }

  void onSignal(int sig) {
    if (sig == SIGCHLD) {  // workers' exits come through their pidfds; this reaps orphans
      group_.reapOrphans();
      group_.noticeStops();
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
                        detail::signalName(sig));
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
    log::agent().warn("received {}: forwarding it to every worker and stopping",
                      detail::signalName(sig));
    log_.signalReceived(sig, true);
    stopReason_ = StopReason::kSignal;
    stopSignal_ = sig;
    hangWatch_->stopDump();
    beginStop(sig);
    if (group_.allExited()) {  // between rounds: nothing to wait for
      asio::post(io_, [this] { onAllExited(); });
    }
  }

  // ---- rounds (multi-node) ----

  void rendezvous() {
    log::agent().info("rendezvous of job '{}' through {} ({}..{} nodes)", config_.runId,
                      jobStoreName(), config_.multiNode->minNodes, config_.multiNode->maxNodes);
    group_.clear();
    if (!assignment_) {  // the first join was checked in prepare()
      join();
      return;
    }
    checkBeforeRound([this] { join(); });
  }

  void join() {
    // This node's workers' store (etcd, or a shared `dtrun store`) may be the next round's
    // workers': none of the last round's keys.
    const rdzv::StoreServer* workers = etcd_ ? store_.get() : workersStore_.get();
    if (workers != nullptr) {
      if (auto s = detail::clearWorkerStore(workers->port(), config_.storeToken); !s.isOk()) {
        log::agent().warn("emptying this node's workers' store: {}", s.message());
      }
    }
    joinSent_ = detail::Clock::now();
    job_->join([this](const rdzv::JoinOutcome& outcome) { onJoined(outcome); },
               [this](const Status& s) { onStoreLost(s); });
  }

  void onJoined(const rdzv::JoinOutcome& outcome) {
    if (finished_ || stopReason_ == StopReason::kSignal) {
      return;
    }
    if (outcome.closed) {
      jobClosed(outcome.end);
      return;
    }
    const auto& a = outcome.assignment;
    assignment_ = a;
    roundClosed_ = detail::Clock::now();
    roundEnd_.reset();
    restartCount_ = a.attempt;
    log::agent().info("round {}: node {} of {}, ranks {}..{} of world size {}, attempt {}", a.round,
                      a.nodeRank, a.nodeCount, a.rankOffset,
                      a.rankOffset + config_.nprocPerNode - 1, a.worldSize, a.attempt);
    job_->watchEnd([this](const rdzv::RoundEnd& end) { onRoundEnded(end); },
                   [this](const Status& s) { onStoreLost(s); });
    if (config_.healthChecks.network && a.nodeCount > 1) {
      checkNetwork();
    } else {
      startAttempt();
    }
  }

  // --health_checks=network: dtrun-netcheck on this node, off the loop; the workers start once
  // every node passed (onNetworkChecked).
  void checkNetwork() {
    const auto& a = *assignment_;
    preAttempt_ = true;
    roundEndDuringCheck_.reset();
    detail::NetcheckPlace place;
    place.nodeRank = a.nodeRank;
    place.nodeCount = a.nodeCount;
    // etcd, or a shared `dtrun store`: node 0's workers' store
    place.masterAddr = a.masterPort != 0 ? a.masterAddr : config_.masterAddr;
    place.masterPort = a.masterPort != 0 ? static_cast<std::uint16_t>(a.masterPort) : storePort();
    place.storeToken = config_.storeToken;
    place.storePrefix = "/dtrun/" + config_.runId + "/netcheck/round_" + std::to_string(a.round);
    const auto bound = config_.healthChecks.timeout;
    const auto& program = config_.healthChecks.netcheckProgram;
    const auto began = std::chrono::steady_clock::now();
    auto run = detail::NetcheckRun::start(
        io_, program, {program, "--host", host_, "--timeout_ms", std::to_string(bound.count())},
        detail::netcheckEnvironment(inheritedEnv_, place), bound + kNetcheckGrace,
        [this, began](const std::string& output, bool killed) {
          onNetworkChecked(output, killed, began);
        });
    if (!run.isOk()) {
      detail::CheckResult r;
      r.check = std::string(detail::kCheckNetwork);
      r.outcome = detail::CheckResult::Outcome::kFailed;
      r.detail = "cannot run " + program + ": " + run.status().message();
      r.at = std::chrono::system_clock::now();
      r.round = a.round;
      leaveUnhealthy(judgeHealth({r}));
      return;
    }
    netcheck_ = std::move(run).value();
  }

  void roundEndedBeforeWorkers(const rdzv::RoundEnd& end) {
    preAttempt_ = false;
    netcheck_.reset();
    netcheckGrace_.cancel();
    if (end.kind == rdzv::RoundEnd::Kind::kClosed) {
      jobClosed(end);
      return;
    }
    log::agent().info("rendezvous again: {}", end.message);
    rendezvous();
  }

  void onNetworkChecked(const std::string& output, bool killed,
                        std::chrono::steady_clock::time_point began) {
    // Reaped now: an owned child left unreaped would stop the subreaper's orphan reaping.
    netcheck_.reset();
    if (finished_ || !preAttempt_ || stopReason_ != StopReason::kNone) {
      return;
    }
    const auto& a = *assignment_;
    detail::CheckResult r;
    detail::NetVerdict verdict;
    bool othersCutOff = false;  // a timeout that named another node
    const auto measured = detail::parseNetcheckOutput(output);
    if (measured.isOk()) {
      verdict = detail::judgeNetwork(measured.value(), a.nodeRank, config_.healthChecks);
      r = verdict.result;
      r.network = detail::networkJson(measured.value(), verdict, config_.healthChecks);
    } else {
      r.check = std::string(detail::kCheckNetwork);
      const bool late = killed || measured.status().code() == Errc::kTimeout;
      r.outcome =
          late ? detail::CheckResult::Outcome::kTimedOut : detail::CheckResult::Outcome::kFailed;
      r.detail = killed ? "dtrun-netcheck did not finish within " +
                              std::to_string(config_.healthChecks.timeout.count()) +
                              " ms (--health_check_timeout)"
                        : measured.status().message();
      const auto cutOff = detail::namedUnreachable(output, a.nodeCount);
      if (std::find(cutOff.begin(), cutOff.end(), a.nodeRank) != cutOff.end()) {
        r.outcome = detail::CheckResult::Outcome::kFailed;
        r.detail = "no other node could reach node " + std::to_string(a.nodeRank) + " (" + host_ +
                   "): " + r.detail;
      } else {
        for (const int rank : cutOff) {
          r.detail += "; no other node could reach node " + std::to_string(rank);
        }
        othersCutOff = !cutOff.empty();
      }
    }
    r.at = std::chrono::system_clock::now() -
           std::chrono::duration_cast<std::chrono::system_clock::duration>(
               std::chrono::steady_clock::now() - began);
    r.took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - began);
    r.round = a.round;
    const Status s = judgeHealth({r});
    if (r.outcome == detail::CheckResult::Outcome::kFailed) {
      leaveUnhealthy(s);  // this node is below the floor, or its check could not run
      return;
    }
    if (const auto end = std::exchange(roundEndDuringCheck_, std::nullopt)) {
      roundEndedBeforeWorkers(*end);  // e.g. the node this check named left first
      return;
    }
    if (r.outcome == detail::CheckResult::Outcome::kTimedOut) {
      // A peer that never showed up (its agent died, or its network is down): the round forms
      // again without a dead node. A node whose check times out twice in a row is the one cut off.
      if (!othersCutOff && ++netcheckTimeouts_ >= 2) {
        leaveUnhealthy(s);
        return;
      }
      std::cerr << "dtrun: " << s.message() << "; the round forms again\n";
      job_->endRound(rdzv::RoundEnd{rdzv::RoundEnd::Kind::kMembership,
                                    "network check incomplete on " + host_ + ": " + r.detail, "",
                                    1});
      return;  // onRoundEnded rendezvouses again
    }
    netcheckTimeouts_ = 0;
    if (!verdict.warning.empty()) {
      log::agent().warn("health check network: {}", verdict.warning);
    }
    if (!verdict.named.empty()) {
      log::agent().warn("health check network: {}; waiting for the round to form again", r.detail);
      return;  // the named node leaves: onRoundEnded rendezvouses again
    }
    log::agent().info("health check network passed: {}", r.detail);
    preAttempt_ = false;
    startAttempt();
  }

  void onRoundEnded(const rdzv::RoundEnd& end) {
    roundEnd_ = end;
    if (preAttempt_) {  // the round ended before its workers started (the network check)
      if (netcheck_) {  // its result first: the report keeps every round's figures
        roundEndDuringCheck_ = end;
        // It is about to print when the end is the node it named leaving; a check still waiting
        // for a peer that will not come is not waited out.
        netcheckGrace_.expires_after(kNetcheckAfterRoundEnd);
        netcheckGrace_.async_wait([this](const boost::system::error_code& ec) {
          if (!ec && !finished_ && netcheck_) {
            if (const auto pending = std::exchange(roundEndDuringCheck_, std::nullopt)) {
              roundEndedBeforeWorkers(*pending);
            }
          }
        });
        return;
      }
      roundEndedBeforeWorkers(end);
      return;
    }
    if (stopReason_ == StopReason::kNone && !group_.allExited()) {
      log::agent().warn("round {} ended: {}; stopping this node's workers", assignment_->round,
                        end.message);
      stopReason_ = StopReason::kRoundEnded;
      if (end.exitCode == detail::kExitHang && config_.hangTimeout.count() > 0) {
        // Another node found a hang: this node's stacks belong in the diagnosis too.
        hangWatch_->cancel();
        hangWatch_->dump(group_, attemptDir_, hangWatch_->peerDiagnosis(end, group_),
                         [this](detail::HangRecord hang) { afterDump(std::move(hang)); });
        return;
      }
      beginStop(SIGTERM);
      return;
    }
    if (!finished_ && attemptSettled_) {  // the local group was already down
      decide(false);
    }
  }

  // The job is over: with an error, every agent prints its root cause and exits with its code;
  // a spare also learns here that the job succeeded without it (exit 0).
  void jobClosed(const rdzv::RoundEnd& end) {
    std::vector<WorkerFailure> failures = failures_;
    const auto root = detail::decodeFailure(end.detail);
    if (root) {
      const bool local = std::any_of(failures.begin(), failures.end(), [&](const auto& f) {
        return f.pid == root->pid && f.rank == root->rank;
      });
      if (!local) {
        failures.push_back(*root);
      }
      recordRootCause(*root);
    }
    std::cerr << "dtrun: job '" << config_.runId << "' is over: " << end.message << "\n";
    if (!failures.empty()) {
      std::cerr << detail::formatFailureReport(config_.entrypointName, host_, failures);
    }
    finishWithJob(end.exitCode);
  }

  // Leaves the job and exits; a store host first waits until every node has read the news.
  // Every node leaves its report in the store before its bye, so past the barrier the store's
  // host has them all for the job's one report.
  void finishWithJob(int code) {
    if (auto s =
            detail::sendNodeReport(jobStore_, config_.runId, log_.nodeReport(code, stopReason_));
        !s.isOk()) {
      log::agent().warn("this node's record is missing from the job's report: {}", s.message());
    }
    job_->bye();
    if (gathersJob()) {
      job_->waitFinished(config_.multiNode->closeTimeout, [this, code] {
        auto reports = detail::gatherNodeReports(jobStore_, config_.runId);
        if (reports.isOk()) {
          log_.setNodeReports(std::move(reports).value());
        } else {
          log::agent().warn("the job's report holds this node only: {}",
                            reports.status().message());
        }
        if (etcd_) {  // every node passed the barrier: nothing of the job stays in etcd
          if (auto s = etcd_->removeJobKeys(); !s.isOk()) {
            log::agent().warn("removing the job's keys from etcd: {}", s.message());
          }
        }
        finish(code);
      });
    } else {
      finish(code);
    }
  }

  void onStoreLost(const Status& status) {
    // Already stopping for a signal: a scheduler's scancel reaches every node, and the store's
    // host may be gone first; the exit code must still say "signalled" (128+signal), not 1.
    if (finished_ || stopReason_ == StopReason::kStoreLost || stopReason_ == StopReason::kSignal) {
      return;
    }
    std::cerr << "dtrun: lost " << jobStoreName() << ": " << status.message()
              << "; stopping this node's workers\n";
    stopReason_ = StopReason::kStoreLost;
    beginStop(SIGTERM);
    if (group_.allExited()) {
      asio::post(io_, [this] { onAllExited(); });
    }
  }

  // ---- one attempt ----

  void startAttempt() {
    // --log_dir=/dev/null: no directory (runDir_ is empty), so none for the attempt either.
    fs::path attemptDir =
        runDir_.empty() ? fs::path() : runDir_ / ("attempt_" + std::to_string(restartCount_));
    std::error_code ec;
    // A membership change keeps the attempt number: its round gets a directory of its own.
    if (assignment_ && !attemptDir.empty() && fs::exists(attemptDir, ec)) {
      attemptDir += "-round" + std::to_string(assignment_->round);
    }
    stopReason_ = StopReason::kNone;
    failures_.clear();
    hangThisAttempt_ = false;
    attemptProgress_ = detail::Progress::kUnknown;
    if (!config_.progressFile.empty()) {
      iterationAtStart_ = detail::readIteration(config_.progressFile);
    }
    attemptSettled_ = false;
    oomKillsBefore_ = oomKills_.kills();
    attemptDir_ = attemptDir;
    log_.begin(restartCount_, attemptDir, assignment_, joinSent_, roundClosed_);
    detail::GroupPlacement placement;
    placement.attemptDir = attemptDir;
    placement.rankOffset = assignment_ ? assignment_->rankOffset : 0;
    placement.worldSize = assignment_ ? assignment_->worldSize : config_.nprocPerNode;
    placement.groupRank = assignment_ ? assignment_->nodeRank : 0;
    placement.groupWorldSize = assignment_ ? assignment_->nodeCount : 1;
    placement.restartCount = restartCount_;
    placement.masterPort = storePort();
    if (assignment_ && assignment_->masterPort != 0) {  // etcd or a shared store: node 0's
      placement.masterAddr = assignment_->masterAddr;
      placement.masterPort = static_cast<std::uint16_t>(assignment_->masterPort);
    }
    const detail::GroupStart start = group_.start(placement);
    log_.started(start, group_);
    if (!start.status.isOk()) {
      std::cerr << "dtrun: " << start.status.message() << "\n";
      startupExitCode_ = detail::startupExitCode(start.status);
      stopReason_ = StopReason::kStartup;  // not a worker failure: no restart, no report
      beginStop(SIGKILL);
      if (group_.allExited()) {  // nothing is left running: nothing will be reaped
        asio::post(io_, [this] { onAllExited(); });
      }
      return;
    }
    hangWatch_->watch(group_, assignment_,
                      [this](detail::HangDiagnosis diagnosis) { onHang(std::move(diagnosis)); });
  }

  void onWorkerExited(const detail::Worker& w, ExitStatus status) {
    if (status.signaled && status.code == SIGKILL) {
      const auto kills = oomKills_.kills();
      if (kills && oomKillsBefore_ && *kills > *oomKillsBefore_) {
        status.killedBy = oomKills_.describeKill();
      }
      oomKillsBefore_ = kills;  // one OOM kill names one worker
    }
    log_.exited(w.localRank, status);
    log::agent().debug("rank {} (pid {}) exited: {}", w.rank, w.child->pid(), status.describe());
    if (stopReason_ == StopReason::kNone && !status.success()) {
      WorkerFailure failure;
      failure.rank = w.rank;
      failure.localRank = w.localRank;
      failure.pid = w.child->pid();
      failure.status = status;
      failure.time = std::chrono::system_clock::now();
      log::agent().warn("rank {} (pid {}) failed: {}; stopping the worker group", w.rank,
                        failure.pid, status.describe());
      if (status.signaled && forwardedSignals_.count(status.code) != 0) {
        log::agent().warn(
            "rank {} died of {}, which dtrun forwarded to it: a worker that does not handle it "
            "ends (list it in --signals_to_handle to stop the job on it instead)",
            w.rank, detail::signalName(status.code));
      }
      stopReason_ = StopReason::kFailure;
      beginStop(SIGTERM);
      describeFromFiles(failure, w.dir);
      failure.noRestart =
          failure.noRestart || (!status.signaled && status.code == agent::kExitNoRestart);
      judgeAttempt();
      if (job_) {  // end the round for every node now, with this failure as its cause
        failure.host = host_;
        failure.nodeRank = assignment_ ? assignment_->nodeRank : -1;
        job_->endRound(roundFailure(
            "rank " + std::to_string(w.rank) + " on " + host_ + " failed: " + status.describe(),
            failure, status.shellCode()));
      }
      failures_.push_back(failure);
    }
    if (group_.allExited()) {
      onAllExited();
    }
  }

  // Fails the round as a worker failure would (so the restart rules apply), naming the first
  // suspect on whichever node it runs, and dumps the stacks. The round's end goes out before
  // the dumps and the stop: the other nodes dump their workers' stacks meanwhile, before this
  // node's stopped workers break their connections.
  // Whether this failed attempt moved the job forward, from its ranks' progress files and the
  // user's checkpoint-iteration file; counts failed attempts in a row that did not.
  void judgeAttempt() {
    std::vector<progress::Snapshot> ranks;
    for (const detail::Worker& w : group_.workers()) {
      if (w.progress) {
        if (auto snapshot = w.progress->read()) {
          ranks.push_back(*snapshot);
        }
      }
    }
    const auto iterationNow =
        config_.progressFile.empty() ? std::nullopt : detail::readIteration(config_.progressFile);
    attemptProgress_ = detail::judgeProgress(ranks, iterationAtStart_, iterationNow);
    noProgressStreak_ = attemptProgress_ == detail::Progress::kNone ? noProgressStreak_ + 1 : 0;
  }

  // Runs `next` after `delay` (at once for 0), unless the job stops meanwhile.
  void after(std::chrono::milliseconds delay, std::function<void()> next) {
    if (delay.count() <= 0) {
      next();
      return;
    }
    restartTimer_.expires_after(delay);
    restartTimer_.async_wait([this, next = std::move(next)](const boost::system::error_code& ec) {
      if (!ec && !finished_ && stopReason_ != StopReason::kSignal) {
        next();
      }
    });
  }

  // The round's end for a failure here, with what the keeper needs to stop a crash loop.
  rdzv::RoundEnd roundFailure(std::string message, const WorkerFailure& failure, int code) const {
    rdzv::RoundEnd end{rdzv::RoundEnd::Kind::kFailure, std::move(message),
                       detail::encodeFailure(failure), code};
    end.progressed = attemptProgress_ != detail::Progress::kNone;
    end.noRestart = failure.noRestart;
    return end;
  }

  void onHang(detail::HangDiagnosis diagnosis) {
    log::agent().error("hang: {}", diagnosis.summary);
    const auto suspect = std::find_if(diagnosis.ranks.begin(), diagnosis.ranks.end(),
                                      [](const detail::HangRank& r) { return r.suspect; });
    WorkerFailure failure;
    failure.localRank = -1;  // a rank of another node
    failure.rank = -1;       // none, when no rank is to blame
    if (suspect != diagnosis.ranks.end()) {
      failure.rank = suspect->rank;
      failure.pid = suspect->pid;
      failure.host = suspect->host;
      if (const detail::Worker* w = group_.findByRank(suspect->rank)) {
        failure.localRank = w->localRank;
        failure.nodeRank = assignment_ ? assignment_->nodeRank : -1;
      }
    }
    failure.status = ExitStatus{false, detail::kExitHang};
    failure.time = detail::Clock::now();
    failure.errorFile = (attemptDir_ / "hang.txt").string();
    failure.message = "hang: " + diagnosis.summary;
    hangThisAttempt_ = true;
    stopReason_ = StopReason::kFailure;
    failures_.push_back(failure);
    judgeAttempt();
    if (job_) {
      job_->endRound(roundFailure("hang found on " + host_ + ": " + diagnosis.summary, failure,
                                  detail::kExitHang));
    }
    hangWatch_->dump(group_, attemptDir_, std::move(diagnosis),
                     [this](detail::HangRecord hang) { afterDump(std::move(hang)); });
  }

  // The stacks are in their files: now the workers stop (a signal may have stopped them already).
  void afterDump(detail::HangRecord hang) {
    log_.setHang(std::move(hang));
    if (finished_) {
      return;
    }
    if (stopReason_ != StopReason::kSignal) {
      if (job_) {
        peerGraceTimer_.expires_after(kPeerDumpGrace);
        peerGraceTimer_.async_wait([this](const boost::system::error_code& ec) {
          if (!ec && !finished_) {
            beginStop(SIGTERM);
          }
        });
      } else {
        beginStop(SIGTERM);
      }
    }
    if (group_.allExited()) {  // the workers ended during the dump
      onAllExited();
    }
  }

  void beginStop(int sig) {
    log_.stopBegan();
    hangWatch_->cancel();
    peerGraceTimer_.cancel();
    restartTimer_.cancel();
    group_.stop(sig);
  }

  // The group is down (or, between rounds, there is none): settle it, then ask the policy what
  // comes next. Called again when the reason changes (a signal, the store lost) after a settled
  // attempt waited at the barrier. A dump under way finishes first (its record belongs to this
  // attempt); afterDump() comes back here.
  void onAllExited() {
    if (finished_ || !group_.allExited() || hangWatch_->dumping()) {
      return;
    }
    attemptSettled_ = true;
    hangWatch_->cancel();
    peerGraceTimer_.cancel();
    log_.end(stopReason_, failures_, hangThisAttempt_, stopSignal_, roundEnd_, group_);
    group_.settle();
    decide(true);
  }

  // `groupJustEnded`: called as the group went down (not later, when the round's end arrived).
  void decide(bool groupJustEnded) {
    detail::AttemptEnd end;
    end.reason = stopReason_;
    end.multiNode = job_ != nullptr;
    end.failed = !failures_.empty();
    end.restartsUsed = restartCount_;
    end.maxRestarts = config_.maxRestarts;
    end.rootCauseCode = failures_.empty() ? 0 : failures_.front().status.shellCode();
    end.noRestart = !failures_.empty() && failures_.front().noRestart;
    end.noProgressStreak = noProgressStreak_;
    end.maxNoProgress = config_.maxNoProgressAttempts;
    end.signal = stopSignal_;
    end.startupExitCode = startupExitCode_;
    if (roundEnd_) {
      end.roundEnd = roundEnd_->kind;
    }
    const detail::Decision d = detail::decideAfterAttempt(end);
    if (d.leaveJob && job_) {
      job_->leave(stopReason_ == StopReason::kStartup
                      ? "its workers could not start"
                      : "received " + detail::signalName(stopSignal_));
    }
    if (d.reportLocalSuccess && groupJustEnded) {
      log::agent().info("this node's {} worker(s) succeeded; waiting for the other nodes",
                        group_.workers().size());
      job_->done();
    }
    switch (d.step) {
      case detail::NextStep::kAwaitRoundEnd:
        return;  // onRoundEnded() decides again
      case detail::NextStep::kRendezvous: {
        log::agent().info("rendezvous again: {}", roundEnd_->message);
        // After a failure every node waits the same backoff: the attempt number is the job's.
        const auto delay = roundEnd_->kind == rdzv::RoundEnd::Kind::kFailure
                               ? detail::restartDelay(restartCount_, config_.restartBackoff,
                                                      config_.restartBackoffMax)
                               : std::chrono::milliseconds(0);
        after(delay, [this] { rendezvous(); });
        return;
      }
      case detail::NextStep::kFinishAfterDrain:
        finishWithJob(d.exitCode);
        return;
      case detail::NextStep::kRestart: {
        const auto delay =
            detail::restartDelay(restartCount_, config_.restartBackoff, config_.restartBackoffMax);
        ++restartCount_;
        log::agent().warn(
            "restarting the worker group (restart {} of {}{}) after rank {} failed: {}",
            restartCount_, config_.maxRestarts,
            delay.count() > 0 ? ", in " + std::to_string(delay.count()) + " ms" : "",
            failures_.front().rank, failures_.front().status.describe());
        after(delay, [this] { checkBeforeRound([this] { startAttempt(); }); });
        return;
      }
      case detail::NextStep::kFinish:
        break;
    }
    if (!d.stoppedEarly.empty()) {
      std::cerr << "dtrun: not restarting: " << d.stoppedEarly << "\n";
    }
    if (d.reportFailure) {
      for (auto& failure : failures_) {
        if (!hangThisAttempt_) {
          describeFromFiles(failure,
                            group_.workers()[static_cast<std::size_t>(failure.localRank)].dir);
        }
      }
      std::cerr << detail::formatFailureReport(config_.entrypointName, host_, failures_);
      recordRootCause(failures_.front());
    } else if (d.exitCode == 0 && !job_) {
      log::agent().info("all {} worker(s) succeeded", group_.workers().size());
    } else if (stopReason_ == StopReason::kSignal && !config_.errorFile.empty()) {
      detail::writeErrorFile(config_.errorFile, detail::signalErrorJson(::getpid(), stopSignal_));
    }
    finish(d.exitCode);
  }

  // The job failed with `root` as its cause: into the run record, and into dtrun's own
  // TORCHELASTIC_ERROR_FILE when a scheduler or an outer launcher gave one.
  void recordRootCause(const WorkerFailure& root) {
    log_.setRootCause(root);
    if (!config_.errorFile.empty()) {
      detail::writeRootCauseErrorFile(config_.errorFile, root, host_);
    }
  }

  void finish(int code) {
    finished_ = true;
    exitCode_ = code;
    log_.end(stopReason_, failures_, hangThisAttempt_, stopSignal_, roundEnd_, group_);
    log_.finish(code, stopReason_);
    io_.stop();
  }

  const AgentConfig& config_;
  asio::io_context io_;
  asio::steady_timer peerGraceTimer_;  // a hung job's stop waits for the other nodes' dumps
  asio::steady_timer restartTimer_;    // --restart_backoff: the wait before the next attempt
  const std::vector<std::string> inheritedEnv_;
  const std::string host_;
  std::unique_ptr<rdzv::StoreServer> store_;  // outlives every worker group (and the keepers)
  // c10d, not the store's host: this node's workers' store (used in a round without the store's
  // host, e.g. on a shared `dtrun store`: node 0's serves the workers)
  std::unique_ptr<rdzv::StoreServer> workersStore_;
  rdzv::StoreFactory jobStore_;  // multi-node: the job's store, with a short timeout (reports)
  std::unique_ptr<rdzv::KeeperService> keepers_;
  std::unique_ptr<rdzv::EtcdPresence> etcd_;     // --rdzv_backend=etcd: lease, keeper candidacy
  std::unique_ptr<detail::JobCoordinator> job_;  // multi-node only
  detail::WorkerGroup group_;
  std::unique_ptr<detail::ConsoleRelay> consoleRelay_;  // --console=collapse, multi-node
  std::unique_ptr<detail::HangWatch> hangWatch_;
  std::shared_ptr<detail::HealthProbe> healthProbe_ = detail::systemHealthProbe();
  detail::HealthRunner healthRunner_{io_, healthProbe_};  // after io_: destroyed before it
  std::unique_ptr<detail::NetcheckRun> netcheck_;         // --health_checks=network, this round
  bool preAttempt_ = false;   // the round formed; its network check runs or names another node
  int netcheckTimeouts_ = 0;  // network checks in a row that did not complete
  std::optional<rdzv::RoundEnd> roundEndDuringCheck_;  // handled once the check's result is in
  asio::steady_timer netcheckGrace_{io_};  // ... or kNetcheckAfterRoundEnd after the round's end
  detail::AttemptLog log_;                 // what --report writes and the summary at exit shows
  UniqueFd signalFd_;
  std::unique_ptr<asio::posix::stream_descriptor> signalWatch_;
  fs::path runDir_;
  fs::path attemptDir_;
  // The current attempt and round.
  std::optional<rdzv::Assignment> assignment_;
  std::optional<rdzv::RoundEnd> roundEnd_;
  std::optional<detail::Clock::time_point> joinSent_;
  std::optional<detail::Clock::time_point> roundClosed_;
  std::vector<WorkerFailure> failures_;
  int restartCount_ = 0;
  detail::Progress attemptProgress_ = detail::Progress::kUnknown;  // of the attempt that failed
  int noProgressStreak_ = 0;                   // failed attempts in a row without progress
  std::optional<long long> iterationAtStart_;  // --progress_file's number when the attempt began
  StopReason stopReason_ = StopReason::kNone;
  int stopSignal_ = 0;
  std::set<int> forwardedSignals_;  // --signals_forwarded ones that reached the workers
  bool hangThisAttempt_ = false;    // this attempt's failure is a detected hang
  bool attemptSettled_ = false;     // the group is down and settled; the policy has been asked
  int startupExitCode_ = 0;
  const detail::OomKillCount oomKills_ = detail::OomKillCount::ofThisProcess();
  std::optional<long long> oomKillsBefore_;  // the cgroup's OOM kills when the attempt began
  int exitCode_ = 0;
  bool finished_ = false;
};

}  // namespace

int run(const AgentConfig& config) {
  detail::startWorkerGuardian();  // before the first thread: it forks
  int code = 0;
  {
    Agent agent(config);
    code = agent.run();
  }
  detail::stopWorkerGuardian();  // dtrun exits only after its own helper is gone
  return code;
}

}  // namespace dtrun::agent
