// The workers of one attempt on this node, as processes: their directories, pipes, log and
// progress files, spawn and exec confirmation, output pumps, signals and reaping. Mechanism only:
// it reports "local rank r exited with status s" and never decides what happens next (that is
// attempt_policy.h's job, wired in agent.cpp). Runs on the agent's event loop; not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/agent_config.h"
#include "dtrun/common.h"

#include "progress_file.h"
#include "workers/child_process.h"
#include "workers/output_pump.h"
#include "workers/terminal_handoff.h"

namespace dtrun::agent::detail {

struct Worker {
  int localRank = 0;
  int rank = 0;
  std::filesystem::path dir;  // <attempt dir>/<local rank>, as torchrun's
  std::optional<ChildProcess> child;
  std::unique_ptr<boost::asio::posix::stream_descriptor> exitWatch;  // a dup of the pidfd
  // Asks again while a tracer (eu-stack dumping its stack) holds the exited worker's zombie.
  std::unique_ptr<boost::asio::steady_timer> exitRetry;
  std::unique_ptr<OutputPump> out;
  std::unique_ptr<OutputPump> err;
  std::optional<ExitStatus> status;
  // Why SIGKILL did not end it within --kill_wait (kernelWaitOf); "" = it was not stuck. A stuck
  // worker is abandoned: counted as gone, never waited for again.
  std::string stuck;
  std::optional<progress::ProgressReader> progress;  // mapped once the worker started
};

// Where and as whom one attempt's workers run.
struct GroupPlacement {
  std::filesystem::path attemptDir;
  int rankOffset = 0;  // global rank of local rank 0
  int worldSize = 1;
  int groupRank = 0;
  int groupWorldSize = 1;
  int restartCount = 0;
  std::string masterAddr;  // "" = the agent's --master_addr
  std::uint16_t masterPort = 0;
};

// What starting the group did, for the attempt's record.
struct GroupStart {
  Status status;  // not ok: a worker could not be started (the group is being killed)
  std::chrono::system_clock::time_point spawned;
  std::optional<std::chrono::system_clock::time_point> firstRunning;  // the first exec confirmed
};

class WorkerGroup {
 public:
  // Called on the loop once per worker, when it has been reaped.
  using ExitHandler = std::function<void(const Worker& worker, ExitStatus status)>;
  // Called on the loop once the workers still there --kill_wait after SIGKILL were abandoned
  // (each one's Worker::stuck says where it waits).
  using StuckHandler = std::function<void()>;

  WorkerGroup(boost::asio::io_context& io, const AgentConfig& config,
              std::vector<std::string> inheritedEnv, std::string hostName, ExitHandler onExit);

  // Starts config.nprocPerNode workers one after another without waiting for their execs
  // (confirmed together afterwards), and stops starting more once a started one already failed:
  // the group is going to be stopped, and every further start would only delay the restart.
  GroupStart start(const GroupPlacement& placement);

  // `signal` to every running worker's process group.
  void signalAll(int signal);
  // signalAll(signal), then SIGKILL after config.shutdownTimeout unless every worker is gone;
  // a worker still there config.killWait after that is stuck in the kernel: it is named,
  // abandoned, and the handler given to onStuck is called. Once per group: a second stop (another
  // reason to stop arrived: the round ended, then dtrun's own SIGTERM) signals nobody again and
  // keeps the first one's grace period, unless it is SIGKILL after a gentler signal.
  void stop(int signal);
  void onStuck(StuckHandler handler) { onStuck_ = std::move(handler); }
  // Once every worker is reaped: cancels the grace timer, kills what the workers left in their
  // groups and copies their last output.
  void settle();

  // True once every started worker has been reaped (as an exit, or by exec confirmation).
  [[nodiscard]] bool allExited() const;
  [[nodiscard]] const std::vector<Worker>& workers() const { return workers_; }
  [[nodiscard]] const Worker* findByRank(int rank) const;
  // --console=collapse's console (null otherwise); the multi-node relay feeds it too.
  [[nodiscard]] const std::shared_ptr<CollapsedConsole>& collapsedConsole() const {
    return collapsed_;
  }

  // Kills and reaps every worker still running (the agent's last act; normally none is).
  void clear() { workers_.clear(); }
  // The agent's end: what the console could not take yet, for at most `limit`.
  void flushConsole(std::chrono::milliseconds limit) { console_->flush(limit); }

  // Reaps children re-parented to this subreaper (the agent is one); workers and other owned
  // children are left to their owners. Call on SIGCHLD.
  void reapOrphans();
  // Ctrl-Z and fg: every worker's group stops (SIGSTOP), and goes on (SIGCONT).
  void suspend();
  void resume();
  // Workers that stopped without exiting (SIGTTIN from reading the terminal, SIGSTOP): one that
  // reads the terminal gets it when dtrun can lend it; the others are named. Call on SIGCHLD.
  void noticeStops();

 private:
  Status startWorker(Worker& w, const GroupPlacement& placement, UniqueFd& outPipe,
                     UniqueFd& errPipe);
  void watch(Worker& w, UniqueFd outPipe, UniqueFd errPipe, UniqueFd outLog, UniqueFd errLog);
  void watchExit(std::size_t index);
  std::unique_ptr<OutputPump> makePump(const Worker& w, UniqueFd pipe, UniqueFd logFile,
                                       Streams stream, int consoleFd);
  [[nodiscard]] std::string linePrefix(const Worker& w) const;
  void onExitReadable(std::size_t index);
  [[nodiscard]] bool anyStartedWorkerFailed() const;
  void killEscapees();
  void abandonStuck();

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  const std::vector<std::string> inheritedEnv_;
  const std::string hostName_;  // ${hostname} of the line prefix
  const ExitHandler onExit_;
  StuckHandler onStuck_;
  boost::asio::steady_timer graceTimer_;  // SIGTERM -> SIGKILL, then SIGKILL -> stuck
  std::vector<Worker> workers_;
  // This attempt's filtered_stdout.log / filtered_stderr.log (null without filters).
  std::shared_ptr<DuplicateSink> stdoutDuplicates_;
  std::shared_ptr<DuplicateSink> stderrDuplicates_;
  std::shared_ptr<ConsoleOut> console_;          // dtrun's stdout and stderr, never blocking
  TerminalHandoff terminal_;                     // lent to a worker that reads it
  bool suspended_ = false;                       // stopped by suspend(): noticeStops is quiet
  int stopSignal_ = 0;                           // what stop() sent this group (0: nothing)
  std::shared_ptr<CollapsedConsole> collapsed_;  // --console=collapse only
};

}  // namespace dtrun::agent::detail
