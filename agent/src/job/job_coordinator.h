// The agent's link to the other nodes of a multi-node job: the round protocol's blocking calls
// run on two threads of their own (waits on one, notifications and heartbeats on the other) and
// every outcome is posted back to the agent's io_context, so the agent's loop never blocks.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>  // before Asio (Boost 1.74 under C++20)

#include <boost/asio/io_context.hpp>

#include "dtrun/round.h"

namespace dtrun::agent::detail {

// Runs queued tasks in order on one thread; optionally runs `idle` every `period` when there is
// nothing else to do. The destructor runs what is still queued, then joins.
class TaskThread {
 public:
  explicit TaskThread(std::chrono::milliseconds period = std::chrono::milliseconds(0),
                      std::function<void()> idle = nullptr);
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;
  TaskThread(TaskThread&&) = delete;
  TaskThread& operator=(TaskThread&&) = delete;
  ~TaskThread();
  void post(std::function<void()> task);

 private:
  void loop();
  std::chrono::milliseconds period_;
  std::function<void()> idle_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

class JobCoordinator {
 public:
  using OnError = std::function<void(const Status&)>;

  // Heartbeats start at once; `onStoreLost` gets the first failure of a notification.
  JobCoordinator(boost::asio::io_context& io, std::unique_ptr<rdzv::RoundMember> member,
                 std::chrono::milliseconds keepAliveInterval, OnError onStoreLost);
  JobCoordinator(const JobCoordinator&) = delete;
  JobCoordinator& operator=(const JobCoordinator&) = delete;
  JobCoordinator(JobCoordinator&&) = delete;
  JobCoordinator& operator=(JobCoordinator&&) = delete;
  ~JobCoordinator();

  void join(std::function<void(const rdzv::JoinOutcome&)> onJoined, OnError onError);
  void watchEnd(std::function<void(const rdzv::RoundEnd&)> onEnded, OnError onError);
  void waitFinished(std::chrono::milliseconds timeout, std::function<void()> then);

  void endRound(const rdzv::RoundEnd& end);
  void done();
  void bye();
  void leave(const std::string& why);

 private:
  // Runs `call` on the notifier thread; a failure goes to onStoreLost (once).
  void notify(std::function<Status()> call);
  // Runs `call` here, on the notifier thread; a failure goes to onStoreLost (once).
  void send(const std::function<Status()>& call);

  boost::asio::io_context& io_;
  std::unique_ptr<rdzv::RoundMember> member_;
  OnError onStoreLost_;
  std::atomic<bool> cancel_{false};
  std::atomic<bool> lost_{false};
  // Nothing goes out after the bye, heartbeats included: past the exit barrier the job's keys are
  // removed (etcd), and a late message would be left behind.
  std::atomic<bool> saidBye_{false};
  // Declared last: destroyed first, while the member they use still exists.
  std::unique_ptr<TaskThread> waiter_;
  std::unique_ptr<TaskThread> notifier_;
};

}  // namespace dtrun::agent::detail
