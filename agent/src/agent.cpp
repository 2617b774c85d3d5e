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
#include "job_coordinator.h"
#include "log.h"
#include "output_pump.h"
#include "worker_env.h"

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
      : config_(config), graceTimer_(io_), inheritedEnv_(environSnapshot()), host_(hostName()) {}

  int run() {
    if (auto s = prepare(); !s.isOk()) {
      std::cerr << "dtrun: " << s.message() << "\n";
      return s.code() == Errc::kNotFound ? kExitCannotRun : 1;
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
    Status status = Status::ok();
    for (int localRank = 0; localRank < config_.nprocPerNode && status.isOk(); ++localRank) {
      Worker& w = workers_[static_cast<std::size_t>(localRank)];
      w.localRank = localRank;
      w.rank = (assignment_ ? assignment_->rankOffset : 0) + localRank;
      w.dir = attemptDir / std::to_string(w.localRank);  // keyed by local rank, as torchrun
      fs::create_directory(w.dir, ec);
      w.outLog = openLog(w.dir / "stdout.log");
      w.errLog = openLog(w.dir / "stderr.log");
      status = startWorker(w);
      if (status.isOk() && anyStartedWorkerFailed()) {
        break;
      }
    }
    for (auto& w : workers_) {
      if (w.child) {
        if (auto s = w.child->confirmExec(); !s.isOk() && status.isOk()) {
          status = s;
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
      describeFromFiles(failure, workers_[static_cast<std::size_t>(failure.localRank)].dir);
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
    finish(root.status.shellCode());
  }

  void finish(int code) {
    finished_ = true;
    exitCode_ = code;
    io_.stop();
  }

  const AgentConfig& config_;
  asio::io_context io_;
  asio::steady_timer graceTimer_;
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
};

}  // namespace

int run(const AgentConfig& config) {
  Agent agent(config);
  return agent.run();
}

}  // namespace dtrun::agent
