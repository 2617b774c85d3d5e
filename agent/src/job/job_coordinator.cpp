#include "job/job_coordinator.h"

#include <boost/asio/post.hpp>

#include "log.h"

namespace dtrun::agent::detail {

namespace asio = boost::asio;

TaskThread::TaskThread(std::chrono::milliseconds period, std::function<void()> idle)
    : period_(period), idle_(std::move(idle)), thread_([this] { loop(); }) {}

TaskThread::~TaskThread() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TaskThread::post(std::function<void()> task) {
  {
    const std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_all();
}

void TaskThread::loop() {
  auto nextIdle = std::chrono::steady_clock::now() + period_;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (!tasks_.empty()) {
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      continue;
    }
    if (stopping_) {
      return;
    }
    if (!idle_) {
      wake_.wait(lock);
      continue;
    }
    // A timeout that races with the destructor's wake-up must not run `idle` once stopping:
    // the owner is already being torn down.
    if (wake_.wait_until(lock, nextIdle) == std::cv_status::timeout && !stopping_) {
      nextIdle = std::chrono::steady_clock::now() + period_;
      lock.unlock();
      idle_();
      lock.lock();
    }
  }
}

JobCoordinator::JobCoordinator(asio::io_context& io, std::unique_ptr<rdzv::RoundMember> member,
                               std::chrono::milliseconds keepAliveInterval, OnError onStoreLost)
    : io_(io), member_(std::move(member)), onStoreLost_(std::move(onStoreLost)) {
  waiter_ = std::make_unique<TaskThread>();
  // The heartbeat runs inline on the notifier thread: posting it through notifier_ from that
  // thread would race with ~JobCoordinator, which nulls notifier_ before joining the thread.
  notifier_ = std::make_unique<TaskThread>(
      keepAliveInterval, [this] { send([this] { return member_->heartbeat(); }); });
  notify([this] { return member_->heartbeat(); });
}

JobCoordinator::~JobCoordinator() {
  cancel_ = true;  // waits end within a slice; queued notifications (leave, bye) still go out
  waiter_.reset();
  notifier_.reset();
}

void JobCoordinator::join(std::function<void(const rdzv::JoinOutcome&)> onJoined, OnError onError) {
  waiter_->post([this, onJoined = std::move(onJoined), onError = std::move(onError)] {
    auto outcome = member_->join(
        cancel_, [](const std::string& line) { log::agent().info("rendezvous: {}", line); });
    if (outcome.isOk()) {
      asio::post(io_, [onJoined, value = std::move(outcome).value()] { onJoined(value); });
    } else if (outcome.status().code() != Errc::kCancelled) {
      asio::post(io_, [onError, status = outcome.status()] { onError(status); });
    }
  });
}

void JobCoordinator::watchEnd(std::function<void(const rdzv::RoundEnd&)> onEnded, OnError onError) {
  waiter_->post([this, onEnded = std::move(onEnded), onError = std::move(onError)] {
    auto end = member_->waitEnd(cancel_);
    if (end.isOk()) {
      asio::post(io_, [onEnded, value = std::move(end).value()] { onEnded(value); });
    } else if (end.status().code() != Errc::kCancelled) {
      asio::post(io_, [onError, status = end.status()] { onError(status); });
    }
  });
}

void JobCoordinator::waitFinished(std::chrono::milliseconds timeout, std::function<void()> then) {
  waiter_->post([this, timeout, then = std::move(then)] {
    if (auto s = member_->waitFinished(timeout); !s.isOk()) {
      log::agent().warn("exit barrier: {}", s.message());
    }
    asio::post(io_, then);
  });
}

void JobCoordinator::endRound(const rdzv::RoundEnd& end) {
  notify([this, end] { return member_->endRound(end).status(); });
}

void JobCoordinator::done() {
  notify([this] { return member_->done(); });
}

void JobCoordinator::bye() {
  notify([this] {
    saidBye_ = true;
    return member_->bye();
  });
}

void JobCoordinator::leave(const std::string& why) {
  notify([this, why] { return member_->leave(why); });
}

void JobCoordinator::notify(std::function<Status()> call) {
  notifier_->post([this, call = std::move(call)] { send(call); });
}

void JobCoordinator::send(const std::function<Status()>& call) {
  if (lost_.load() || saidBye_.load()) {
    return;
  }
  if (auto s = call(); !s.isOk() && !lost_.exchange(true)) {
    asio::post(io_, [this, s] { onStoreLost_(s); });
  }
}

}  // namespace dtrun::agent::detail
