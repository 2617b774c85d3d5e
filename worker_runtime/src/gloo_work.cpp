#include "gloo_work.h"

#include <thread>

namespace dtrun::runtime::detail {

void GlooWork::wait(std::chrono::milliseconds timeout) {
  const auto limit = timeout.count() > 0 ? timeout : pending_->group->config().timeout;
  std::unique_lock<std::mutex> lock(pending_->mutex);
  if (pending_->phase == Phase::kPosted) {
    pending_->phase = Phase::kWaiting;
    lock.unlock();
    pending_->complete(limit);
    lock.lock();
  } else if (!pending_->changed.wait_for(lock, limit,
                                         [&] { return pending_->phase == Phase::kFinished; })) {
    // The Gloo wait goes on in the watcher thread, up to the group's timeout.
    throw TimeoutError(pending_->op + ": timed out after " + std::to_string(limit.count()) +
                       " ms waiting for " + pending_->group->describeRank(pending_->peer));
  }
  if (pending_->error != nullptr) {
    std::rethrow_exception(pending_->error);
  }
}

bool GlooWork::isCompleted() const {
  const std::lock_guard<std::mutex> lock(pending_->mutex);
  if (pending_->phase == Phase::kPosted) {
    // Detached: the thread owns what it uses, so dropping an unfinished Work does not block;
    // Gloo's own timeout bounds the thread's life. It sets kFinished only after this returns
    // the lock.
    std::thread watcher(
        [pending = pending_] { pending->complete(pending->group->config().timeout); });
    pending_->phase = Phase::kWaiting;
    watcher.detach();
  }
  return pending_->phase == Phase::kFinished;
}

void GlooWork::Pending::complete(std::chrono::milliseconds limit) {
  std::exception_ptr failure;
  try {
    group->run(
        op, {peer},
        [&] {
          const bool completed = isSend ? buffer->waitSend(limit) : buffer->waitRecv(limit);
          if (!completed) {
            throw gloo::IoException("the operation was aborted");
          }
        },
        limit);
  } catch (...) {
    failure = std::current_exception();
  }
  {
    const std::lock_guard<std::mutex> lock(mutex);
    phase = Phase::kFinished;
    error = failure;
  }
  changed.notify_all();
}

}  // namespace dtrun::runtime::detail
