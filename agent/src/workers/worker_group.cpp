#include "workers/worker_group.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <system_error>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fd_io.h"
#include "log.h"
#include "workers/worker_env.h"
#include "workers/worker_pid.h"

namespace dtrun::agent::detail {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;

constexpr std::chrono::milliseconds kExitRetry{20};
// The node's progress file of an attempt, a slot per local rank (progress_file.h).
constexpr std::string_view kProgressFile = "progress";

UniqueFd openLog(const fs::path& path) {
  return UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
}

// A record that cannot be written is lost alone: the attempt runs without it.
void writeRecord(const fs::path& path, std::string_view text) {
  if (const UniqueFd fd = openLog(path); !fd.valid() || !io::writeAll(fd.get(), text)) {
    log::agent().warn("cannot write {}: {}", path.string(),
                      std::error_code(errno, std::generic_category()).message());
  }
}

// A worker's two output pipes (read ends) and log files, from its start until its pumps own them.
struct WorkerStreams {
  UniqueFd outPipe;
  UniqueFd errPipe;
  UniqueFd outLog;
  UniqueFd errLog;
};

std::shared_ptr<DuplicateSink> openDuplicates(const std::vector<std::string>& filters,
                                              const fs::path& path) {
  if (filters.empty()) {
    return nullptr;
  }
  auto sink = std::make_shared<DuplicateSink>();
  sink->filters = filters;
  sink->file = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!sink->file.valid()) {
    log::agent().warn("cannot open {}: duplicated lines are not copied", path.string());
  }
  return sink;
}

Result<std::pair<UniqueFd, UniqueFd>> makePipe() {
  std::array<int, 2> fds{-1, -1};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
    return Status::system("pipe2", errno);
  }
  return std::pair<UniqueFd, UniqueFd>{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// What rank `w`'s environment says of its place (the spawn's variables and the record).
WorkerPlacement environmentOf(const AgentConfig& config, const Worker& w,
                              const GroupPlacement& placement) {
  WorkerPlacement env;
  env.localRank = w.localRank;
  env.rank = w.rank;
  env.worldSize = placement.worldSize;
  env.groupRank = placement.groupRank;
  env.groupWorldSize = placement.groupWorldSize;
  env.restartCount = placement.restartCount;
  env.masterAddr = placement.masterAddr.empty() ? config.masterAddr : placement.masterAddr;
  env.masterPort = placement.masterPort;
  if (!w.dir.empty()) {  // else --log_dir=/dev/null: all three empty, as torchrun's ""
    env.errorFile = (w.dir / "error.json").string();
    env.logDir = w.dir.string();
    env.progressFile = (placement.attemptDir / kProgressFile).string();
  }
  return env;
}

}  // namespace

WorkerGroup::WorkerGroup(asio::io_context& io, const AgentConfig& config,
                         std::vector<std::string> inheritedEnv, std::string hostName,
                         ExitHandler onExit)
    : io_(io),
      config_(config),
      inheritedEnv_(std::move(inheritedEnv)),
      hostName_(std::move(hostName)),
      onExit_(std::move(onExit)),
      graceTimer_(io),
      console_(std::make_shared<ConsoleOut>(io)) {
  if (config_.console == AgentConfig::Console::kCollapse) {
    collapsed_ = std::make_shared<CollapsedConsole>(io_, console_, config_.consoleWindow);
  }
}

GroupStart WorkerGroup::start(const GroupPlacement& placement) {
  std::error_code ec;
  // An empty attempt directory is --log_dir=/dev/null: no directory, log, progress or
  // duplicates file (the workers' dirs stay empty too).
  const bool files = !placement.attemptDir.empty();
  if (files) {
    fs::create_directories(placement.attemptDir, ec);
  }
  graceTimer_.cancel();
  stopSignal_ = 0;
  workers_.clear();
  workers_.resize(static_cast<std::size_t>(config_.nprocPerNode));
  if (collapsed_) {  // a group of every rank on this console leaves at once
    const std::size_t local =
        config_.localRanksFilter ? config_.localRanksFilter->size() : workers_.size();
    collapsed_->setExpectedRanks(collapsed_->jobWide() && !config_.localRanksFilter
                                     ? static_cast<std::size_t>(placement.worldSize)
                                     : local);
  }
  stdoutDuplicates_ = files ? openDuplicates(config_.duplicateStdoutFilters,
                                             placement.attemptDir / "filtered_stdout.log")
                            : nullptr;
  stderrDuplicates_ = files ? openDuplicates(config_.duplicateStderrFilters,
                                             placement.attemptDir / "filtered_stderr.log")
                            : nullptr;
  const std::string progressFile = (placement.attemptDir / kProgressFile).string();
  if (files && !progress::createProgressFile(progressFile, workers_.size(),
                                             config_.stragglerThreshold.count() > 0)) {
    log::agent().warn("cannot create {}: no rank reports progress", progressFile);
  }
  std::vector<WorkerStreams> streams(workers_.size());
  GroupStart result;
  for (std::size_t i = 0; i < workers_.size() && result.status.isOk(); ++i) {
    Worker& w = workers_[i];
    w.localRank = static_cast<int>(i);
    w.rank = placement.rankOffset + w.localRank;
    if (files) {
      w.dir = placement.attemptDir / std::to_string(w.localRank);
      fs::create_directory(w.dir, ec);
      streams[i].outLog = openLog(w.dir / "stdout.log");
      streams[i].errLog = openLog(w.dir / "stderr.log");
    }
    result.status = startWorker(w, placement, streams[i].outPipe, streams[i].errPipe)
                        .withContext("cannot start rank " + std::to_string(w.rank) +
                                     " (local rank " + std::to_string(w.localRank) + ")");
    if (result.status.isOk() && anyStartedWorkerFailed()) {
      break;
    }
  }
  result.spawned = std::chrono::system_clock::now();
  // Once every worker was started, not between two starts, and one file each for the whole
  // group: the records (two files per rank) took a quarter of a 16-worker launch.
  std::string environments;
  std::string pids;
  for (auto& w : workers_) {
    if (!w.child) {
      continue;
    }
    if (auto s = w.child->confirmExec(); !s.isOk() && result.status.isOk()) {
      result.status = s;
    } else if (s.isOk() && !result.firstRunning) {
      result.firstRunning = std::chrono::system_clock::now();
    }
    if (w.dir.empty()) {
      continue;
    }
    environments += environmentRecord(config_, environmentOf(config_, w, placement));
    pids += workerPidLine(w.localRank, w.rank, w.child->pid());
    if (auto reader =
            progress::ProgressReader::open(progressFile, static_cast<std::size_t>(w.localRank))) {
      w.progress.emplace(std::move(*reader));
    }
  }
  if (!pids.empty()) {
    writeRecord(placement.attemptDir / "environment", environments);
    writeRecord(placement.attemptDir / kWorkerPidsFile, pids);
  }
  int started = 0;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    if (workers_[i].child) {
      // After a failed start only the exits are watched: the group is killed, nothing is shown.
      if (result.status.isOk()) {
        watch(workers_[i], std::move(streams[i].outPipe), std::move(streams[i].errPipe),
              std::move(streams[i].outLog), std::move(streams[i].errLog));
      } else {
        watchExit(i);
      }
      ++started;
    }
  }
  if (result.status.isOk()) {
    log::agent().info("attempt {}: started {} of {} worker(s) of {}", placement.restartCount,
                      started, config_.nprocPerNode, config_.entrypointName);
  }
  return result;
}

Status WorkerGroup::startWorker(Worker& w, const GroupPlacement& placement, UniqueFd& outPipe,
                                UniqueFd& errPipe) {
  DTRUN_ASSIGN_OR_RETURN(auto out, makePipe());
  DTRUN_ASSIGN_OR_RETURN(auto err, makePipe());
  outPipe = std::move(out.first);
  errPipe = std::move(err.first);

  const WorkerPlacement env = environmentOf(config_, w, placement);
  SpawnRequest request;
  request.path = config_.executable.empty() ? config_.command.at(0) : config_.executable;
  request.argv = substituteLocalRank(config_.command, w.localRank);
  request.env = workerEnvironment(inheritedEnv_, config_, env);
  if (static_cast<std::size_t>(w.localRank) < config_.placement.size()) {
    const LocalPlacement& placed = config_.placement[static_cast<std::size_t>(w.localRank)];
    request.cpus = placed.cpus;
    request.memNodes = placed.memNodes;
  }
  request.stdoutFd = out.second.get();
  request.stderrFd = err.second.get();
  DTRUN_ASSIGN_OR_RETURN(auto child, ChildProcess::start(request));
  w.child.emplace(std::move(child));
  return Status::ok();
}

void WorkerGroup::watch(Worker& w, UniqueFd outPipe, UniqueFd errPipe, UniqueFd outLog,
                        UniqueFd errLog) {
  w.out = makePump(w, std::move(outPipe), std::move(outLog), Streams::kOut, STDOUT_FILENO);
  w.err = makePump(w, std::move(errPipe), std::move(errLog), Streams::kErr, STDERR_FILENO);
  watchExit(static_cast<std::size_t>(w.localRank));
}

void WorkerGroup::watchExit(std::size_t index) {
  Worker& w = workers_[index];
  w.exitWatch = std::make_unique<asio::posix::stream_descriptor>(
      io_, ::fcntl(w.child->exitFd(), F_DUPFD_CLOEXEC, 0));
  w.exitWatch->async_wait(asio::posix::descriptor_base::wait_read,
                          [this, index](const boost::system::error_code& ec) {
                            if (!ec) {
                              onExitReadable(index);
                            }
                          });
}

std::unique_ptr<OutputPump> WorkerGroup::makePump(const Worker& w, UniqueFd pipe, UniqueFd logFile,
                                                  Streams stream, int consoleFd) {
  const auto has = [stream](Streams s) {
    return (static_cast<unsigned>(s) & static_cast<unsigned>(stream)) != 0;
  };
  const bool tee = has(config_.tee.forRank(w.localRank));
  // With --log_dir=/dev/null there is no file to redirect to: the stream stays on the console.
  const bool redirected =
      tee || (!config_.discardsLogs() && has(config_.redirects.forRank(w.localRank)));
  const bool shown = !config_.localRanksFilter || config_.localRanksFilter->count(w.localRank) != 0;
  // One rank alone on the console cannot mix with another: its bytes pass as they come.
  const std::size_t onConsole =
      config_.localRanksFilter ? config_.localRanksFilter->size() : workers_.size();
  ConsoleMode mode = ConsoleMode::kNone;
  if (shown && tee) {
    mode = ConsoleMode::kLines;
  } else if (shown && !redirected) {
    mode = onConsole <= 1 ? ConsoleMode::kRaw : ConsoleMode::kLines;
  }
  const bool collapse = collapsed_ && mode != ConsoleMode::kNone;
  if (collapse) {
    mode = ConsoleMode::kLines;  // every rank's lines, even a single one's, behind its ranks
  }
  auto duplicates = !tee                      ? nullptr
                    : stream == Streams::kOut ? stdoutDuplicates_
                                              : stderrDuplicates_;
  // Every stream lands in the rank's log file, redirected or not.
  auto pump = std::make_unique<OutputPump>(
      io_, std::move(pipe), std::move(logFile), mode, console_, consoleFd,
      tee && !collapse ? linePrefix(w) : std::string(), std::move(duplicates));
  if (collapse) {
    pump->collapseInto(collapsed_, w.rank,
                       stream == Streams::kOut ? ConsoleStream::kOut : ConsoleStream::kErr);
  }
  if (w.child) {
    // 'R': on a CPU or waiting for one, as a worker between two pieces of a line is.
    pump->holdWhileRunning([pid = static_cast<unsigned>(w.child->pid())] {
      const auto stat = readProcStat(pid);
      return stat && stat->state == 'R';
    });
  }
  pump->start();
  return pump;
}

std::string WorkerGroup::linePrefix(const Worker& w) const {
  const std::string& pattern = config_.logLinePrefixTemplate.empty()
                                   ? std::string(kDefaultLinePrefixTemplate)
                                   : config_.logLinePrefixTemplate;
  return expandLinePrefix(pattern, {{"role_name", config_.role},
                                    {"rank", std::to_string(w.rank)},
                                    {"local_rank", std::to_string(w.localRank)},
                                    {"hostname", hostName_},
                                    {"pid", std::to_string(w.child ? w.child->pid() : 0)}});
}

// The one path by which a worker's exit becomes known: its pidfd turned readable.
void WorkerGroup::onExitReadable(std::size_t index) {
  Worker& w = workers_[index];
  if (!w.child || !w.child->running()) {
    return;
  }
  const auto status = w.child->tryReap();
  if (!status) {
    // The pidfd turns readable when the worker exits, but while a tracer is attached the zombie
    // is the tracer's to see first: waitid finds nothing until it detaches. The pidfd stays
    // readable (a new wait would spin), so the exit is asked for again shortly.
    if (!w.exitRetry) {
      w.exitRetry = std::make_unique<asio::steady_timer>(io_);
    }
    w.exitRetry->expires_after(kExitRetry);
    w.exitRetry->async_wait([this, index](const boost::system::error_code& ec) {
      if (!ec) {
        onExitReadable(index);
      }
    });
    return;
  }
  w.status = status;
  terminal_.release(w.child->pid());  // a worker leads its own process group
  reapOrphans();
  onExit_(w, *status);  // may start the next attempt: `w` is not touched afterwards
}

void WorkerGroup::reapOrphans() {
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0 ||
        isOwnedChild(info.si_pid)) {
      return;  // nothing exited, or the first exited child is its owner's to reap
    }
    int ignored = 0;
    ::waitpid(info.si_pid, &ignored, WNOHANG);
  }
}

void WorkerGroup::suspend() {
  suspended_ = true;
  signalAll(SIGSTOP);
}

void WorkerGroup::resume() {
  if (suspended_) {
    suspended_ = false;
    signalAll(SIGCONT);
  }
}

void WorkerGroup::noticeStops() {
  for (const auto& w : workers_) {
    if (!w.child || !w.child->running()) {
      continue;
    }
    const pid_t pid = w.child->pid();
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WNOHANG) != 0 ||
        info.si_pid == 0) {
      continue;  // running (a stop is reported once; the exit stays for its pidfd)
    }
    const int signal = info.si_status;
    if (suspended_) {
      continue;  // dtrun stopped them itself (Ctrl-Z)
    }
    if (signal != SIGTTIN && signal != SIGTTOU) {
      log::agent().warn("rank {} (pid {}) is stopped by {}; it goes on after kill -CONT {}", w.rank,
                        pid, signalName(signal), pid);
    } else if (terminal_.lend(pid)) {
      log::agent().info("rank {} (pid {}) reads the terminal: it has it until it exits", w.rank,
                        pid);
    } else {
      const pid_t holder = terminal_.holder();
      const auto other = std::find_if(workers_.begin(), workers_.end(), [holder](const Worker& x) {
        return holder != 0 && x.child && x.child->pid() == holder;
      });
      log::agent().warn(
          "rank {} (pid {}) is stopped: it uses the terminal ({}), which {}; give it its input "
          "from a file instead (dtrun ... < input)",
          w.rank, pid, signalName(signal),
          other != workers_.end()
              ? "rank " + std::to_string(other->rank) + " has now"
              : std::string("only dtrun's own process group may use (dtrun runs without a "
                            "terminal, or in the background)"));
    }
  }
}

// Peeks (without reaping) whether a worker of the group being started already exited badly.
bool WorkerGroup::anyStartedWorkerFailed() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) {
    siginfo_t info{};
    return w.child &&
           ::waitid(P_PID, static_cast<id_t>(w.child->pid()), &info, WEXITED | WNOHANG | WNOWAIT) ==
               0 &&
           info.si_pid != 0 && !(info.si_code == CLD_EXITED && info.si_status == 0);
  });
}

void WorkerGroup::signalAll(int signal) {
  for (auto& w : workers_) {
    if (w.child && w.child->running()) {
      w.child->signalGroup(signal);
    }
  }
}

void WorkerGroup::stop(int signal) {
  // A worker checkpointing on the first SIGTERM may die of a second one (a shell's trap runs
  // again, Python's handler raises again), and a new grace period would put SIGKILL off.
  if (stopSignal_ != 0 && (signal != SIGKILL || stopSignal_ == SIGKILL)) {
    log::agent().info("the workers were sent {} already: not signalled again",
                      signalName(stopSignal_));
    return;
  }
  stopSignal_ = signal;
  signalAll(signal);
  signalAll(SIGCONT);  // a stopped worker (SIGSTOP, SIGTTIN) acts on the stop only once continued
  graceTimer_.expires_after(config_.shutdownTimeout);
  graceTimer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) {
      return;
    }
    log::agent().warn("workers still running {} ms after the stop signal: sending SIGKILL",
                      config_.shutdownTimeout.count());
    signalAll(SIGKILL);
    graceTimer_.expires_after(config_.killWait);
    graceTimer_.async_wait([this](const boost::system::error_code& error) {
      if (!error) {
        abandonStuck();
      }
    });
  });
}

// SIGKILL ends a process at its next return from the kernel; one that never returns (a read
// from a dead NFS server or a FUSE daemon that does not answer, a hung driver call) holds the
// group forever. It is named with where it waits, and no longer waited for.
void WorkerGroup::abandonStuck() {
  bool any = false;
  for (auto& w : workers_) {
    if (!w.child || !w.child->running()) {
      continue;
    }
    w.stuck = "still there " + std::to_string(config_.killWait.count()) +
              " ms after SIGKILL: " + kernelWaitOf(w.child->pid());
    w.child->abandon();
    any = true;
  }
  if (any && onStuck_) {
    onStuck_();  // last: it may end the attempt, and the next one replaces workers_
  }
}

void WorkerGroup::settle() {
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
  killEscapees();
  if (collapsed_) {
    collapsed_->flushAll();  // the attempt's last lines before anything the agent says next
  }
}

// What left a worker's process group (setsid, a daemon's double fork) is out of reach of the
// group kill; once its parent exited it is this subreaper's child, and it ends with the attempt.
void WorkerGroup::killEscapees() {
  std::string named;
  const auto abandoned = [this](pid_t pid) {  // stuck: named already, and SIGKILL cannot help
    return std::any_of(workers_.begin(), workers_.end(), [pid](const Worker& w) {
      return !w.stuck.empty() && w.child && w.child->pid() == pid;
    });
  };
  for (const auto& [pid, name] : unownedLiveChildren()) {
    if (abandoned(pid)) {
      continue;
    }
    if (::getpgid(pid) == pid) {
      ::kill(-pid, SIGKILL);  // it leads a group of its own: what it started there goes too
    }
    ::kill(pid, SIGKILL);
    named += (named.empty() ? "pid " : ", pid ") + std::to_string(pid) + " (" + name + ")";
  }
  if (named.empty()) {
    return;
  }
  log::agent().warn("killed what the workers left outside their process groups: {}", named);
  // Reaped here, briefly: the agent may exit next, and would leave them as zombies to its parent.
  for (int tries = 0; tries < 100 && !unownedLiveChildren().empty(); ++tries) {
    ::usleep(10000);  // NOLINT: at most a second, once, for processes SIGKILL ends at once
  }
  reapOrphans();
}

bool WorkerGroup::allExited() const {
  return std::all_of(workers_.begin(), workers_.end(),
                     [](const Worker& w) { return !w.child || !w.child->running(); });
}

const Worker* WorkerGroup::findByRank(int rank) const {
  const auto it = std::find_if(workers_.begin(), workers_.end(),
                               [rank](const Worker& w) { return w.rank == rank; });
  return it == workers_.end() ? nullptr : &*it;
}

}  // namespace dtrun::agent::detail
