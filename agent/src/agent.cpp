// The agent's event loop: one thread, one io_context over a signalfd, one pidfd per worker, the
// workers' output pipes and the shutdown-grace timer. Nothing sleeps or polls.
#include "dtrun/agent.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>  // before Asio (Boost 1.74 under C++20)

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/rendezvous.h"
#include "dtrun/round.h"

#include "child_process.h"
#include "failure_report.h"
#include "hang_detector.h"
#include "job_coordinator.h"
#include "log.h"
#include "output_pump.h"
#include "progress_exchange.h"
#include "progress_file.h"
#include "run_report.h"
#include "worker_env.h"
#include "worker_guardian.h"

extern char** environ;  // NOLINT: POSIX declares it nowhere

namespace dtrun::agent {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using detail::ChildProcess;
using detail::ExitStatus;
using detail::WorkerFailure;

constexpr int kExitCannotRun = 127;
constexpr std::size_t kStderrTailLines = 20;
// A hang fails the round with timeout(1)'s code, so scripts can tell it from a worker's own.
constexpr int kExitHang = 124;
constexpr std::chrono::milliseconds kStackToolTimeout{15000};
// How long a Python worker gets to write its stacks after the signal (faulthandler writes
// from the signal handler, so this is only the scheduling delay).
constexpr std::chrono::milliseconds kPythonStackWait{2000};
constexpr std::chrono::milliseconds kHangCheckMax{1000};
constexpr std::chrono::milliseconds kPeerDumpGrace{2000};

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

UniqueFd openLog(const fs::path& path) {
  return UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
}

struct Worker {
  int localRank = 0;
  int rank = 0;
  fs::path dir;
  std::optional<ChildProcess> child;
  UniqueFd outPipe;  // pipes' read ends and log files, until watchWorker() hands them to pumps
  UniqueFd errPipe;
  UniqueFd outLog;
  UniqueFd errLog;
  std::unique_ptr<asio::posix::stream_descriptor> exitWatch;  // a dup of the pidfd
  std::unique_ptr<detail::OutputPump> out;
  std::unique_ptr<detail::OutputPump> err;
  std::optional<ExitStatus> status;
  std::optional<progress::ProgressReader> progress;  // mapped once the worker started
};

// Why the group is being stopped: a worker failed (restart or report), a handled signal arrived
// (exit 128+signal), the group could not be started at all (exit with startupExitCode_), the
// job's round ended elsewhere (rendezvous again), or the job's store was lost (exit 1).
enum class StopReason : std::uint8_t {
  kNone,
  kFailure,
  kSignal,
  kStartup,
  kRoundEnded,
  kStoreLost
};

// The worker's own account of its failure: its error file, else the tail of its stderr.
void describeFromFiles(WorkerFailure& failure, const fs::path& dir) {
  if (!detail::readErrorFile((dir / "error.json").string(), failure)) {
    failure.message = detail::tailOfFile((dir / "stderr.log").string(), kStderrTailLines);
  }
}

class Agent {
 public:
  explicit Agent(const AgentConfig& config)
      : config_(config),
        graceTimer_(io_),
        hangTimer_(io_),
        inheritedEnv_(environSnapshot()),
        host_(hostName()) {
    record_.runId = config.runId;
    record_.entrypoint = config.entrypointName;
    record_.command = config.command;
    record_.host = host_;
    record_.minNodes = config.multiNode ? config.multiNode->minNodes : 1;
    record_.maxNodes = config.multiNode ? config.multiNode->maxNodes : 1;
    record_.nprocPerNode = config.nprocPerNode;
    record_.maxRestarts = config.maxRestarts;
    record_.agentStart = detail::Clock::now();
  }

  int run() {
    if (auto s = prepare(); !s.isOk()) {
      std::cerr << "dtrun: " << s.message() << "\n";
      finish(s.code() == Errc::kNotFound ? kExitCannotRun : 1);
      return exitCode_;
    }
    watchSignals();
    if (job_) {
      rendezvous();
    } else {
      startGroup();
    }
    io_.run();
    job_.reset();      // sends what is still queued (leave, bye) before the store may go away
    workers_.clear();  // kills and reaps anything still running (only on an internal error)
    return exitCode_;
  }

 private:
  Status prepare() {
    // Handled signals and SIGCHLD arrive through a signalfd; block them before the store's
    // thread exists so that it inherits the mask.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    for (const int sig : config_.signalsToHandle) {
      sigaddset(&set, sig);
    }
    for (const int sig : config_.signalsToForward) {
      sigaddset(&set, sig);
    }
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signalFd_ = UniqueFd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
    if (!signalFd_.valid()) {
      return Status::system("signalfd", errno);
    }
    static_cast<void>(
        ::signal(SIGPIPE, SIG_IGN));  // a closed console must not kill the agent; workers reset it
    // Orphaned grandchildren are re-parented here instead of to init, so they can be reaped.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);

    if (config_.command.empty()) {
      return Status::invalidArgument("no entrypoint to run");
    }
    executable_ = detail::findExecutable(config_.command[0], envValue(inheritedEnv_, "PATH"));
    if (executable_.empty()) {
      return Status::error(Errc::kNotFound,
                           "cannot run " + config_.command[0] + ": not found in PATH");
    }

    const auto& multi = config_.multiNode;
    if (!multi || multi->hostsStore) {
      rdzv::ServerOptions storeOptions;
      storeOptions.host = config_.storeListenHost;
      storeOptions.port = config_.storePort;
      storeOptions.token = config_.storeToken;
      auto store = rdzv::StoreServer::start(storeOptions);
      if (store.isOk()) {
        store_ = std::move(store).value();
      } else if (multi && multi->hostGuessed) {
        log::agent().info("port {} is taken on this host: joining the store there as a client",
                          config_.storePort);
      } else {
        return Status::connection(
            "cannot start the store: " + store.status().message() +
            (config_.storePort != 0 ? " (choose another --master_port, or omit it for a free port)"
                                    : ""));
      }
    }
    if (multi) {
      if (auto s = connectJob(*multi); !s.isOk()) {
        return s;
      }
    }
    return prepareRunDir();
  }

  // Multi-node: the keeper service beside a store this agent hosts, and this node's member.
  Status connectJob(const MultiNodeConfig& multi) {
    if (store_) {
      auto keepers = rdzv::KeeperService::start(store_->port(), config_.storeToken);
      if (!keepers.isOk()) {
        return keepers.status();
      }
      keepers_ = std::move(keepers).value();
    }
    rdzv::RoundSettings settings;
    settings.minNodes = multi.minNodes;
    settings.maxNodes = multi.maxNodes;
    settings.maxRestarts = config_.maxRestarts;
    settings.joinTimeout = multi.joinTimeout;
    settings.lastCallTimeout = multi.lastCallTimeout;
    settings.closeTimeout = multi.closeTimeout;
    settings.keepAliveInterval = multi.keepAliveInterval;
    settings.keepAliveMaxAttempt = multi.keepAliveMaxAttempt;
    rdzv::NodeRecord self;
    self.agentId = host_ + ":" + std::to_string(::getpid());
    self.host = host_;
    self.nproc = config_.nprocPerNode;
    self.nodeRankHint = multi.nodeRank;
    self.schedulerOrder = multi.schedulerOrder;
    self.storeHost = store_ != nullptr;
    rdzv::ClientOptions client;
    client.host = store_ ? "127.0.0.1" : config_.masterAddr;
    client.port = storePort();
    client.timeout = multi.readTimeout;
    client.token = config_.storeToken;
    auto member = rdzv::RoundMember::connect(client, config_.runId, settings, self);
    if (!member.isOk()) {
      return Status::connection("cannot reach the rendezvous store at " + config_.masterAddr + ":" +
                                std::to_string(client.port) + ": " + member.status().message());
    }
    job_ = std::make_unique<detail::JobCoordinator>(io_, std::move(member).value(),
                                                    multi.keepAliveInterval,
                                                    [this](const Status& s) { onStoreLost(s); });
    if (config_.hangTimeout.count() > 0) {  // the other nodes' ranks, for the diagnosis
      auto exchange = detail::ProgressExchange::connect(io_, client, config_.runId);
      if (exchange.isOk()) {
        exchange_ = std::move(exchange).value();
      } else {
        log::agent().warn("hang detection sees this node's ranks only: {}",
                          exchange.status().message());
      }
    }
    return Status::ok();
  }

  [[nodiscard]] std::uint16_t storePort() const {
    return store_ ? store_->port() : config_.storePort;
  }

  Status prepareRunDir() {
    std::error_code ec;
    fs::path base = config_.logDir;
    if (base.empty()) {
      const std::string tmp = envValue(inheritedEnv_, "TMPDIR");
      std::string pattern = (tmp.empty() ? "/tmp" : tmp) + "/dtrun-XXXXXX";
      if (::mkdtemp(pattern.data()) == nullptr) {
        return Status::system("mkdtemp(" + pattern + ")", errno);
      }
      base = pattern;
    }
    // A run id used before under the same log dir gets a fresh directory: logs are never lost.
    // The agents of several nodes may share a log dir (one file system under a scheduler): each
    // takes its directory with an atomic mkdir, the node that loses takes "<run_id>-<host>".
    fs::create_directories(base, ec);
    if (ec) {
      return Status::invalidArgument("--log_dir: cannot create " + base.string() + ": " +
                                     ec.message());
    }
    fs::path dir;
    for (int n = 1; dir.empty(); ++n) {
      std::string name = config_.runId;
      if (n == 2 && config_.multiNode) {
        name += "-" + host_;
      } else if (n >= 2) {
        name += "-" + std::to_string(n);
      }
      const fs::path candidate = base / name;
      const int err = ::mkdir(candidate.c_str(), 0777) == 0 ? 0 : errno;
      if (err == 0 || (err == EEXIST && !config_.multiNode && fs::is_empty(candidate, ec))) {
        dir = candidate;
      } else if (err != EEXIST) {
        return Status::system("--log_dir: mkdir " + candidate.string(), err);
      }
    }
    // Workers get paths under it (error file, log dir) and may change directory: absolute.
    runDir_ = fs::absolute(dir, ec);
    log::agent().info("per-rank logs in {}", runDir_.string());
    return Status::ok();
  }

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
    if (sig == SIGCHLD) {
      reapAvailable();
      return;
    }
    if (std::find(config_.signalsToForward.begin(), config_.signalsToForward.end(), sig) !=
        config_.signalsToForward.end()) {
      log::agent().info("received {}: forwarding it to every worker (the job keeps running)",
                        detail::signalName(sig));
      signalAll(sig);
      return;
    }
    if (stopReason_ == StopReason::kSignal && sig == SIGINT) {
      log::agent().warn("second SIGINT: killing every worker now");
      signalAll(SIGKILL);
      return;
    }
    log::agent().warn("received {}: forwarding it to every worker and stopping",
                      detail::signalName(sig));
    stopReason_ = StopReason::kSignal;
    stopSignal_ = sig;
    beginStop(sig);
    if (allExited()) {  // between rounds: nothing to wait for
      asio::post(io_, [this] { onAllExited(); });
    }
  }

  // ---- multi-node ----

  void rendezvous() {
    log::agent().info("rendezvous of job '{}' at {}:{} ({}..{} nodes)", config_.runId,
                      config_.masterAddr, storePort(), config_.multiNode->minNodes,
                      config_.multiNode->maxNodes);
    workers_.clear();
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
    startGroup();
    job_->watchEnd([this](const rdzv::RoundEnd& end) { onRoundEnded(end); },
                   [this](const Status& s) { onStoreLost(s); });
  }

  void onRoundEnded(const rdzv::RoundEnd& end) {
    roundEnd_ = end;
    if (stopReason_ == StopReason::kNone && !allExited()) {
      log::agent().warn("round {} ended: {}; stopping this node's workers", assignment_->round,
                        end.message);
      stopReason_ = StopReason::kRoundEnded;
      if (end.exitCode == kExitHang && config_.hangTimeout.count() > 0) {
        dumpForPeerHang(end);
        stopAfterPeerDumps();
        return;
      }
      beginStop(SIGTERM);
      return;
    }
    afterRound();
  }

  // Once the local group is down and the round's end is known: exit after success, otherwise
  // join the next round.
  void afterRound() {
    if (finished_ || !allExited() || !roundEnd_ || stopReason_ == StopReason::kSignal ||
        stopReason_ == StopReason::kStoreLost || stopReason_ == StopReason::kStartup) {
      return;
    }
    if (roundEnd_->kind == rdzv::RoundEnd::Kind::kSuccess) {
      job_->bye();
      if (store_) {  // the store outlives every node's last request
        job_->waitFinished(config_.multiNode->closeTimeout, [this] { finish(0); });
      } else {
        finish(0);
      }
      return;
    }
    log::agent().info("rendezvous again: {}", roundEnd_->message);
    rendezvous();
  }

  // The job is over: with an error, every agent prints its root cause and exits with its code;
  // a spare also learns here that the job succeeded without it (exit 0).
  void jobClosed(const rdzv::RoundEnd& end) {
    std::vector<WorkerFailure> failures = failures_;
    if (auto root = detail::decodeFailure(end.detail)) {
      const bool local = std::any_of(failures.begin(), failures.end(), [&](const auto& f) {
        return f.pid == root->pid && f.rank == root->rank;
      });
      if (!local) {
        failures.push_back(*root);
      }
    }
    std::cerr << "dtrun: job '" << config_.runId << "' is over: " << end.message << "\n";
    if (auto root = detail::decodeFailure(end.detail)) {
      record_.rootCause = *root;
    }
    if (!failures.empty()) {
      std::cerr << detail::formatFailureReport(config_.entrypointName, host_, failures);
    }
    job_->bye();
    if (store_) {  // the others must still read the news from this store
      job_->waitFinished(config_.multiNode->closeTimeout,
                         [this, code = end.exitCode] { finish(code); });
    } else {
      finish(end.exitCode);
    }
  }

  void onStoreLost(const Status& status) {
    // Already stopping for a signal: a scheduler's scancel reaches every node, and the store's
    // host may be gone first; the exit code must still say "signalled" (128+signal), not 1.
    if (finished_ || stopReason_ == StopReason::kStoreLost || stopReason_ == StopReason::kSignal) {
      return;
    }
    std::cerr << "dtrun: lost the rendezvous store at " << config_.masterAddr << ":" << storePort()
              << ": " << status.message() << "; stopping this node's workers\n";
    stopReason_ = StopReason::kStoreLost;
    beginStop(SIGTERM);
    if (allExited()) {
      asio::post(io_, [this] { onAllExited(); });
    }
  }

  // Starts the workers one after another without waiting for their execs (confirmed together
  // afterwards), and stops starting more as soon as a started one has already failed: the group
  // is going to be stopped, and every further start would only delay the restart.
  void startGroup() {
    fs::path attemptDir = runDir_ / ("attempt_" + std::to_string(restartCount_));
    std::error_code ec;
    if (assignment_ && fs::exists(attemptDir, ec)) {  // a membership change keeps the attempt
      attemptDir += "-round" + std::to_string(assignment_->round);
    }
    fs::create_directories(attemptDir, ec);
    workers_.clear();
    workers_.resize(static_cast<std::size_t>(config_.nprocPerNode));
    stopReason_ = StopReason::kNone;
    failures_.clear();
    hangThisAttempt_ = false;
    remoteProgress_.clear();
    attemptDir_ = attemptDir;
    beginAttemptRecord();
    Status status = Status::ok();
    for (int localRank = 0; localRank < config_.nprocPerNode && status.isOk(); ++localRank) {
      Worker& w = workers_[static_cast<std::size_t>(localRank)];
      w.localRank = localRank;
      w.rank = (assignment_ ? assignment_->rankOffset : 0) + localRank;
      w.dir = attemptDir / std::to_string(w.localRank);  // keyed by local rank, as torchrun
      fs::create_directory(w.dir, ec);
      w.outLog = openLog(w.dir / "stdout.log");
      w.errLog = openLog(w.dir / "stderr.log");
      if (!progress::createProgressFile((w.dir / "progress").string())) {
        log::agent().warn("cannot create {}: rank {} reports no progress",
                          (w.dir / "progress").string(), w.rank);
      }
      status = startWorker(w);
      if (status.isOk() && anyStartedWorkerFailed()) {
        break;
      }
    }
    attempt().spawned = detail::Clock::now();
    for (auto& w : workers_) {
      if (w.child) {
        auto s = w.child->confirmExec();
        if (!s.isOk() && status.isOk()) {
          status = s;
        } else if (s.isOk() && !attempt().firstRunning) {
          attempt().firstRunning = detail::Clock::now();
        }
        auto& rank = attempt().ranks[static_cast<std::size_t>(w.localRank)];
        rank.pid = w.child->pid();
        if (auto reader = progress::ProgressReader::open((w.dir / "progress").string())) {
          w.progress.emplace(std::move(*reader));
        }
      }
    }
    if (!status.isOk()) {
      std::cerr << "dtrun: " << status.message() << "\n";
      startupExitCode_ = status.code() == Errc::kNotFound ? kExitCannotRun : 1;
      stopReason_ = StopReason::kStartup;  // not a worker failure: no restart, no report
      beginStop(SIGKILL);
      if (allExited()) {  // nothing is left running: nothing will be reaped
        asio::post(io_, [this] { onAllExited(); });
      }
      return;
    }
    int started = 0;
    for (auto& w : workers_) {
      if (w.child) {
        watchWorker(w);
        ++started;
      }
    }
    log::agent().info("attempt {}: started {} of {} worker(s) of {}", restartCount_, started,
                      config_.nprocPerNode, config_.entrypointName);
    armHangCheck();
  }

  // ---- the run report ----

  detail::AttemptRecord& attempt() { return record_.attempts.back(); }

  void beginAttemptRecord() {
    detail::AttemptRecord a;
    a.attempt = restartCount_;
    if (assignment_) {
      a.round = static_cast<int>(assignment_->round);
      a.nodeRank = assignment_->nodeRank;
      a.nodeCount = assignment_->nodeCount;
      a.worldSize = assignment_->worldSize;
      a.rendezvousJoined = joinSent_;
      a.roundClosed = roundClosed_;
    } else {
      a.worldSize = config_.nprocPerNode;
    }
    a.started = detail::Clock::now();
    for (int localRank = 0; localRank < config_.nprocPerNode; ++localRank) {
      detail::RankRecord rank;
      rank.localRank = localRank;
      rank.rank = (assignment_ ? assignment_->rankOffset : 0) + localRank;
      rank.logDir = (attemptDir_ / std::to_string(localRank)).string();
      a.ranks.push_back(rank);
    }
    record_.attempts.push_back(std::move(a));
  }

  // The startup milestones the workers wrote into their progress files.
  void collectTimeline() {
    const auto toClock = [](std::int64_t ns) -> std::optional<detail::Clock::time_point> {
      if (ns == 0) {
        return std::nullopt;
      }
      return detail::Clock::time_point(
          std::chrono::duration_cast<detail::Clock::duration>(std::chrono::nanoseconds(ns)));
    };
    for (const Worker& w : workers_) {
      if (!w.progress) {
        continue;
      }
      if (const auto snapshot = w.progress->read()) {
        auto& rank = attempt().ranks[static_cast<std::size_t>(w.localRank)];
        rank.storeConnected = toClock(snapshot->storeConnectedNs);
        rank.communicatorReady = toClock(snapshot->commReadyNs);
      }
    }
  }

  void endAttemptRecord() {
    if (record_.attempts.empty() || attempt().ended) {
      return;
    }
    collectTimeline();
    attempt().ended = detail::Clock::now();
    switch (stopReason_) {
      case StopReason::kNone:
        attempt().cause = failures_.empty() ? "succeeded" : "worker_failed";
        break;
      case StopReason::kFailure:
        attempt().cause = hangThisAttempt_ ? "hang" : "worker_failed";
        break;
      case StopReason::kSignal:
        attempt().cause = "signal";
        attempt().message = "received " + detail::signalName(stopSignal_);
        break;
      case StopReason::kStartup:
        attempt().cause = "startup_failed";
        break;
      case StopReason::kRoundEnded:
        attempt().cause = "round_ended";
        attempt().message = roundEnd_ ? roundEnd_->message : "";
        break;
      case StopReason::kStoreLost:
        attempt().cause = "store_lost";
        break;
    }
    if (!failures_.empty() && attempt().message.empty()) {
      const WorkerFailure& f = failures_.front();
      attempt().message = hangThisAttempt_ && record_.hang ? record_.hang->summary
                                                           : "rank " + std::to_string(f.rank) +
                                                                 " failed: " + f.status.describe();
    }
    if (config_.verbose) {
      std::cerr << detail::formatTimeline(record_, attempt());
    }
  }

  // ---- hang detection ----

  void armHangCheck() {
    if (config_.hangTimeout.count() <= 0) {
      return;
    }
    hangTimer_.expires_after(
        std::clamp(config_.hangTimeout / 4, std::chrono::milliseconds(50), kHangCheckMax));
    hangTimer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopReason_ != StopReason::kNone || finished_) {
        return;
      }
      checkForHang();
    });
  }

  [[nodiscard]] std::vector<detail::RankProgress> localProgress() const {
    std::vector<detail::RankProgress> ranks;
    for (const Worker& w : workers_) {
      if (!w.child || !w.child->running() || !w.progress) {
        continue;
      }
      if (auto snapshot = w.progress->read()) {
        ranks.push_back(detail::RankProgress{w.rank, w.child->pid(), host_, *snapshot});
      }
    }
    return ranks;
  }

  void checkForHang() {
    std::vector<detail::RankProgress> ranks = localProgress();
    if (exchange_ && assignment_) {
      // The other nodes matter once this node's ranks have been quiet for half the timeout:
      // reading them earlier would cost every node O(nodes) requests on every tick.
      const std::int64_t now = progress::monotonicNs();
      std::int64_t newest = 0;
      for (const auto& rank : ranks) {
        newest = std::max(newest, rank.snapshot.ops > 0 ? rank.snapshot.changedNs : 0);
      }
      const bool quiet = now - newest >= std::chrono::nanoseconds(config_.hangTimeout).count() / 2;
      if (!quiet) {
        remoteProgress_.clear();  // stale the moment this node's ranks move again
      }
      exchange_->exchange(static_cast<std::int64_t>(assignment_->round), assignment_->nodeRank,
                          assignment_->nodeCount, ranks, quiet,
                          [this](std::vector<detail::RankProgress> remote) {
                            remoteProgress_ = std::move(remote);
                          });
      const int first = assignment_->rankOffset;
      const int last = first + config_.nprocPerNode;
      for (const auto& remote : remoteProgress_) {
        if (remote.rank < first || remote.rank >= last) {
          ranks.push_back(remote);
        }
      }
      std::sort(ranks.begin(), ranks.end(),
                [](const auto& a, const auto& b) { return a.rank < b.rank; });
    }
    auto diagnosis = detail::diagnoseHang(ranks, progress::monotonicNs(), config_.hangTimeout);
    if (!diagnosis) {
      armHangCheck();
      return;
    }
    onHang(std::move(*diagnosis));
  }

  // Dumps every running worker's stacks into <rank>/stack.txt and hang.txt (with the
  // diagnosis first) and records the hang for the report.
  void dumpStacks(detail::HangDiagnosis& diagnosis) {
    log::agent().warn("dumping the stacks of every worker into {}", attemptDir_.string());
    // Python workers first: faulthandler writes from the signal handler while eu-stack works.
    for (const Worker& w : workers_) {
      if (w.child && w.child->running() && w.progress) {
        if (const auto snapshot = w.progress->read(); snapshot && snapshot->stackSignal > 0) {
          ::kill(w.child->pid(), snapshot->stackSignal);
        }
      }
    }
    const std::string path = envValue(inheritedEnv_, "PATH");
    std::string hangText =
        "dtrun: hang detected (" + diagnosis.reason + "): " + diagnosis.summary + "\n";
    for (const Worker& w : workers_) {
      if (!w.child || !w.child->running()) {
        continue;
      }
      std::string stack = detail::nativeStack(w.child->pid(), path, kStackToolTimeout);
      const auto snapshot = w.progress ? w.progress->read() : std::nullopt;
      if (snapshot && snapshot->stackSignal > 0) {
        const fs::path pythonStack = w.dir / "python_stack.txt";
        const auto deadline = std::chrono::steady_clock::now() + kPythonStackWait;
        std::error_code ec;
        while (fs::file_size(pythonStack, ec) == 0 && std::chrono::steady_clock::now() < deadline) {
          ::usleep(20000);
        }
        stack +=
            "\nPython stacks (faulthandler):\n" + detail::tailOfFile(pythonStack.string(), 200);
      }
      const fs::path stackFile = w.dir / "stack.txt";
      static_cast<void>(detail::writeFileAtomically(stackFile.string(), stack));
      hangText += "\n==== rank " + std::to_string(w.rank) + " (local rank " +
                  std::to_string(w.localRank) + ", pid " + std::to_string(w.child->pid()) +
                  ") ====\n" + stack;
      for (auto& rank : diagnosis.ranks) {
        if (rank.rank == w.rank) {
          rank.stackFile = stackFile.string();
          rank.stack = stack;
        }
      }
    }
    const fs::path hangFile = attemptDir_ / "hang.txt";
    static_cast<void>(detail::writeFileAtomically(hangFile.string(), hangText));
    std::cerr << "dtrun: hang: " << diagnosis.summary
              << "\ndtrun: stacks of this node's workers in " << hangFile.string() << "\n";
    detail::HangRecord hang;
    hang.detectedAt = detail::Clock::now();
    hang.reason = diagnosis.reason;
    hang.summary = diagnosis.summary;
    hang.reportFile = hangFile.string();
    hang.ranks = diagnosis.ranks;
    record_.hang = std::move(hang);
  }

  // Fails the round as a worker failure would (so the restart rules apply), naming the first
  // suspect on whichever node it runs, and dumps the stacks. The round's end goes out before
  // the dumps and the stop: the other nodes dump their workers' stacks meanwhile, before this
  // node's stopped workers break their connections.
  void onHang(detail::HangDiagnosis diagnosis) {
    log::agent().error("hang: {}", diagnosis.summary);
    const auto suspect = std::find_if(diagnosis.ranks.begin(), diagnosis.ranks.end(),
                                      [](const detail::HangRank& r) { return r.suspect; });
    WorkerFailure failure;
    failure.localRank = -1;  // a rank of another node
    if (suspect != diagnosis.ranks.end()) {
      failure.rank = suspect->rank;
      failure.pid = suspect->pid;
      failure.host = suspect->host;
      for (const Worker& w : workers_) {
        if (w.rank == suspect->rank) {
          failure.localRank = w.localRank;
          failure.nodeRank = assignment_ ? assignment_->nodeRank : -1;
        }
      }
    }
    failure.status = ExitStatus{false, kExitHang};
    failure.time = detail::Clock::now();
    failure.errorFile = (attemptDir_ / "hang.txt").string();
    failure.message = "hang: " + diagnosis.summary;
    hangThisAttempt_ = true;
    stopReason_ = StopReason::kFailure;
    failures_.push_back(failure);
    if (job_) {
      job_->endRound(rdzv::RoundEnd{rdzv::RoundEnd::Kind::kFailure,
                                    "hang found on " + host_ + ": " + diagnosis.summary,
                                    detail::encodeFailure(failure), kExitHang});
    }
    dumpStacks(diagnosis);
    if (job_) {
      stopAfterPeerDumps();
    } else {
      beginStop(SIGTERM);
    }
  }

  // Another node found the hang: this node's stacks belong in the diagnosis too. The suspect is
  // the rank the round's end names.
  void dumpForPeerHang(const rdzv::RoundEnd& end) {
    const auto root = detail::decodeFailure(end.detail);
    detail::HangDiagnosis diagnosis;
    diagnosis.reason = "no_progress";
    diagnosis.summary = end.message;
    const std::int64_t now = progress::monotonicNs();
    std::vector<detail::RankProgress> ranks = localProgress();
    for (const auto& remote : remoteProgress_) {
      if (std::none_of(ranks.begin(), ranks.end(),
                       [&](const auto& r) { return r.rank == remote.rank; })) {
        ranks.push_back(remote);
      }
    }
    std::sort(ranks.begin(), ranks.end(),
              [](const auto& a, const auto& b) { return a.rank < b.rank; });
    for (const auto& rank : ranks) {
      diagnosis.ranks.push_back(detail::hangRankOf(rank, now, root && root->rank == rank.rank));
    }
    if (root && std::none_of(diagnosis.ranks.begin(), diagnosis.ranks.end(),
                             [](const detail::HangRank& r) { return r.suspect; })) {
      detail::HangRank suspect;  // on a node whose progress this one never saw
      suspect.rank = root->rank;
      suspect.host = root->host;
      suspect.pid = root->pid;
      suspect.suspect = true;
      diagnosis.ranks.push_back(suspect);
    }
    dumpStacks(diagnosis);
  }

  // Every node of a hung job dumps its stacks at about the same time; stopping this node's
  // workers at once would break the connections of workers another node is still dumping.
  void stopAfterPeerDumps() {
    hangTimer_.expires_after(kPeerDumpGrace);
    hangTimer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && !finished_) {
        beginStop(SIGTERM);
      }
    });
  }

  // Peeks (without reaping) whether a worker of the group being started already exited badly.
  [[nodiscard]] bool anyStartedWorkerFailed() const {
    return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) {
      siginfo_t info{};
      return w.child &&
             ::waitid(P_PID, static_cast<id_t>(w.child->pid()), &info,
                      WEXITED | WNOHANG | WNOWAIT) == 0 &&
             info.si_pid != 0 && !(info.si_code == CLD_EXITED && info.si_status == 0);
    });
  }

  Status startWorker(Worker& w) {
    std::array<int, 2> outPipe{-1, -1};
    std::array<int, 2> errPipe{-1, -1};
    if (::pipe2(outPipe.data(), O_CLOEXEC) != 0) {
      return Status::system("pipe2", errno);
    }
    w.outPipe = UniqueFd(outPipe[0]);
    UniqueFd outWrite(outPipe[1]);
    if (::pipe2(errPipe.data(), O_CLOEXEC) != 0) {
      return Status::system("pipe2", errno);
    }
    w.errPipe = UniqueFd(errPipe[0]);
    UniqueFd errWrite(errPipe[1]);

    detail::WorkerPlacement placement;
    placement.localRank = w.localRank;
    placement.rank = w.rank;
    placement.worldSize = assignment_ ? assignment_->worldSize : config_.nprocPerNode;
    placement.groupRank = assignment_ ? assignment_->nodeRank : 0;
    placement.groupWorldSize = assignment_ ? assignment_->nodeCount : 1;
    placement.restartCount = restartCount_;
    placement.masterAddr = config_.masterAddr;
    placement.masterPort = storePort();
    placement.errorFile = (w.dir / "error.json").string();
    placement.logDir = w.dir.string();
    placement.progressFile = (w.dir / "progress").string();

    detail::SpawnRequest request;
    request.path = executable_;
    request.argv = detail::substituteLocalRank(config_.command, w.localRank);
    request.env = detail::workerEnvironment(inheritedEnv_, config_, placement);
    request.stdoutFd = outWrite.get();
    request.stderrFd = errWrite.get();
    auto child = ChildProcess::start(request);
    if (!child.isOk()) {
      return child.status();
    }
    w.child.emplace(std::move(child).value());
    return Status::ok();
  }

  // Output pumps and the exit watch of a started worker.
  void watchWorker(Worker& w) {
    w.out = makePump(w, std::move(w.outPipe), std::move(w.outLog), Streams::kOut, STDOUT_FILENO);
    w.err = makePump(w, std::move(w.errPipe), std::move(w.errLog), Streams::kErr, STDERR_FILENO);
    w.exitWatch = std::make_unique<asio::posix::stream_descriptor>(
        io_, ::fcntl(w.child->exitFd(), F_DUPFD_CLOEXEC, 0));
    w.exitWatch->async_wait(asio::posix::descriptor_base::wait_read,
                            [this](const boost::system::error_code& ec) {
                              if (!ec) {
                                reapAvailable();
                              }
                            });
  }

  std::unique_ptr<detail::OutputPump> makePump(const Worker& w, UniqueFd pipe, UniqueFd logFile,
                                               Streams stream, int consoleFd) {
    const auto has = [stream](Streams s) {
      return (static_cast<unsigned>(s) & static_cast<unsigned>(stream)) != 0;
    };
    const bool tee = has(config_.tee.forRank(w.localRank));
    const bool redirected = tee || has(config_.redirects.forRank(w.localRank));
    const bool shown =
        !config_.localRanksFilter || config_.localRanksFilter->count(w.localRank) != 0;
    detail::ConsoleMode mode = detail::ConsoleMode::kNone;
    if (shown && tee) {
      mode = detail::ConsoleMode::kPrefixed;
    } else if (shown && !redirected) {
      mode = detail::ConsoleMode::kRaw;
    }
    // Every stream lands in the rank's log file, redirected or not.
    auto pump = std::make_unique<detail::OutputPump>(
        io_, std::move(pipe), std::move(logFile), mode, consoleFd,
        "[" + config_.role + std::to_string(w.localRank) + "]:");
    pump->start();
    return pump;
  }

  // Reaps every child that exited: workers (whose status is handled) and orphaned grandchildren
  // re-parented to this subreaper. Peeks first so that a worker is only ever reaped as itself.
  void reapAvailable() {
    for (;;) {
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) {
        return;
      }
      Worker* worker = nullptr;
      for (auto& w : workers_) {
        if (w.child && w.child->pid() == info.si_pid && w.child->running()) {
          worker = &w;
        }
      }
      if (worker == nullptr) {
        int ignored = 0;
        ::waitpid(info.si_pid, &ignored, WNOHANG);
        continue;
      }
      if (auto status = worker->child->tryReap()) {
        onWorkerExited(*worker, *status);
      }
    }
  }

  void onWorkerExited(Worker& w, ExitStatus status) {
    w.status = status;
    if (!record_.attempts.empty()) {
      attempt().ranks[static_cast<std::size_t>(w.localRank)].exit = status;
    }
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
      stopReason_ = StopReason::kFailure;
      beginStop(SIGTERM);
      if (job_) {  // end the round for every node now, with this failure as its cause
        describeFromFiles(failure, w.dir);
        failure.host = host_;
        failure.nodeRank = assignment_ ? assignment_->nodeRank : -1;
        job_->endRound(rdzv::RoundEnd{
            rdzv::RoundEnd::Kind::kFailure,
            "rank " + std::to_string(w.rank) + " on " + host_ + " failed: " + status.describe(),
            detail::encodeFailure(failure), status.shellCode()});
      }
      failures_.push_back(failure);
    }
    if (allExited()) {
      onAllExited();
    }
  }

  void signalAll(int sig) {
    for (auto& w : workers_) {
      if (w.child && w.child->running()) {
        w.child->signalGroup(sig);
      }
    }
  }

  void beginStop(int sig) {
    if (!record_.attempts.empty() && !attempt().stopBegan) {
      attempt().stopBegan = detail::Clock::now();
    }
    hangTimer_.cancel();
    signalAll(sig);
    graceTimer_.expires_after(config_.shutdownTimeout);
    graceTimer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) {
        return;
      }
      log::agent().warn("workers still running {} ms after the stop signal: sending SIGKILL",
                        config_.shutdownTimeout.count());
      signalAll(SIGKILL);
    });
  }

  // True once every worker that was started has been reaped (as an exit, or by confirmExec()).
  [[nodiscard]] bool allExited() const {
    return std::all_of(workers_.begin(), workers_.end(),
                       [](const Worker& w) { return !w.child || !w.child->running(); });
  }

  void onAllExited() {
    if (finished_ || !allExited()) {
      return;
    }
    graceTimer_.cancel();
    hangTimer_.cancel();
    endAttemptRecord();
    for (auto& w : workers_) {
      if (w.child) {
        w.child->signalGroup(SIGKILL);  // whatever the worker left behind in its group
      }
      if (w.out) {
        w.out->drainAndStop();
      }
      if (w.err) {
        w.err->drainAndStop();
      }
    }
    if (stopReason_ == StopReason::kStartup) {
      if (job_) {
        job_->leave("its workers could not start");
      }
      finish(startupExitCode_);
      return;
    }
    if (stopReason_ == StopReason::kSignal) {
      if (job_) {
        job_->leave("received " + detail::signalName(stopSignal_));
      }
      finish(128 + stopSignal_);
      return;
    }
    if (stopReason_ == StopReason::kStoreLost) {
      finish(1);
      return;
    }
    if (job_) {
      if (stopReason_ == StopReason::kNone && failures_.empty()) {
        log::agent().info("this node's {} worker(s) succeeded; waiting for the other nodes",
                          workers_.size());
        job_->done();
      }
      afterRound();
      return;
    }
    if (failures_.empty()) {
      log::agent().info("all {} worker(s) succeeded", workers_.size());
      finish(0);
      return;
    }
    for (auto& failure : failures_) {
      if (!hangThisAttempt_) {
        describeFromFiles(failure, workers_[static_cast<std::size_t>(failure.localRank)].dir);
      }
    }
    const WorkerFailure& root = failures_.front();
    if (restartCount_ < config_.maxRestarts) {
      ++restartCount_;
      log::agent().warn("restarting the worker group (restart {} of {}) after rank {} failed: {}",
                        restartCount_, config_.maxRestarts, root.rank, root.status.describe());
      startGroup();
      return;
    }
    std::cerr << detail::formatFailureReport(config_.entrypointName, host_, failures_);
    record_.rootCause = root;
    finish(root.status.shellCode());
  }

  void finish(int code) {
    finished_ = true;
    exitCode_ = code;
    endAttemptRecord();
    writeReport();
    io_.stop();
  }

  void writeReport() {
    record_.ended = detail::Clock::now();
    record_.exitCode = exitCode_;
    if (exitCode_ == 0) {
      record_.outcome = "succeeded";
    } else if (stopReason_ == StopReason::kSignal) {
      record_.outcome = "signal";
    } else if (stopReason_ == StopReason::kStoreLost) {
      record_.outcome = "store_lost";
    } else if (stopReason_ == StopReason::kStartup || record_.attempts.empty()) {
      record_.outcome = "startup_failed";
    } else if (record_.rootCause && record_.rootCause->status.code == kExitHang &&
               !record_.rootCause->status.signaled && record_.hang) {
      record_.outcome = "hang";
    } else {
      record_.outcome = "failed";
    }
    if (config_.reportFile.empty() && !config_.verbose) {
      return;
    }
    std::cerr << detail::formatSummary(record_);
    if (config_.reportFile.empty()) {
      return;
    }
    if (detail::writeFileAtomically(config_.reportFile, detail::reportJson(record_))) {
      std::cerr << "dtrun: run report in " << config_.reportFile << "\n";
    } else {
      std::cerr << "dtrun: cannot write the run report to " << config_.reportFile << ": "
                << std::error_code(errno, std::generic_category()).message() << "\n";
    }
  }

  const AgentConfig& config_;
  asio::io_context io_;
  asio::steady_timer graceTimer_;
  asio::steady_timer hangTimer_;  // the next look at the workers' progress files
  const std::vector<std::string> inheritedEnv_;
  const std::string host_;
  std::unique_ptr<rdzv::StoreServer> store_;  // outlives every worker group (and the keepers)
  std::unique_ptr<rdzv::KeeperService> keepers_;
  std::unique_ptr<detail::JobCoordinator> job_;
  std::optional<rdzv::Assignment> assignment_;
  std::optional<rdzv::RoundEnd> roundEnd_;
  UniqueFd signalFd_;
  std::unique_ptr<asio::posix::stream_descriptor> signalWatch_;
  std::string executable_;
  fs::path runDir_;
  std::vector<Worker> workers_;
  std::vector<WorkerFailure> failures_;
  int restartCount_ = 0;
  StopReason stopReason_ = StopReason::kNone;
  int stopSignal_ = 0;
  int exitCode_ = 0;
  int startupExitCode_ = 0;
  bool finished_ = false;
  detail::JobRecord record_;  // what --report writes and the summary at exit shows
  fs::path attemptDir_;
  std::optional<detail::Clock::time_point> joinSent_;
  std::optional<detail::Clock::time_point> roundClosed_;
  bool hangThisAttempt_ = false;                        // this attempt's failure is a detected hang
  std::unique_ptr<detail::ProgressExchange> exchange_;  // multi-node --hang_timeout only
  std::vector<detail::RankProgress> remoteProgress_;    // the other nodes' latest ranks
};

}  // namespace

int run(const AgentConfig& config) {
  detail::startWorkerGuardian();  // before the first thread: it forks
  Agent agent(config);
  return agent.run();
}

}  // namespace dtrun::agent
