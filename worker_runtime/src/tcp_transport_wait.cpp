// The Tcp transport's waiting: whichever thread waits drives progress (poll(), after a short
// adaptive spin), the background thread only for isend/irecv while nobody waits.
#include <algorithm>
#include <cstdint>

#include <unistd.h>

#include <climits>

#include "tcp_frames.h"
#include "tcp_transport.h"

namespace dtrun::runtime::detail::tcp {
namespace {

// While spinning on rings alone, poll() the sockets (kicks, doorbells, EOF) every this many
// rounds only.
constexpr unsigned kShmPollEvery = 64;
// With the adaptive spin budget at zero, every this many waits spin the full budget once more.
constexpr unsigned kSpinProbeEvery = 64;

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

WaitResult Transport::wait(Op& op, Clock::time_point deadline, bool abortOnCrash) {
  std::unique_lock<std::mutex> lock(mutex_);
  driveUntil(
      lock, [&] { return op.finished() || (abortOnCrash && !crashReasons_.empty()); }, deadline,
      false);
  if (op.finished()) {
    return WaitResult::kFinished;
  }
  return abortOnCrash && !crashReasons_.empty() ? WaitResult::kPeerCrashed : WaitResult::kTimedOut;
}

bool Transport::isFinished(const Op& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  return op.finished();
}

std::vector<std::string> Transport::crashReasons() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<pollfd> fds;
  std::vector<std::size_t> owners;
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r].fd.valid() && !peers_[r].dead) {
      fds.push_back(pollfd{peers_[r].fd.get(), POLLIN, 0});
      owners.push_back(r);
    }
  }
  // Under the lock, like every read: a driver in poll() on the same sockets finds them drained.
  if (!fds.empty() && ::poll(fds.data(), fds.size(), 0) > 0) {
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents != 0 && !peers_[owners[k]].dead) {
        pumpRead(peers_[owners[k]]);
      }
    }
  }
  return crashReasons_;
}

std::vector<int> Transport::crashedWithoutReason() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<int> ranks;
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (peers_[r].crashed && !peers_[r].saidWhy) {
      ranks.push_back(static_cast<int>(r));
    }
  }
  return ranks;
}

template <typename Pred>
bool Transport::driveUntil(std::unique_lock<std::mutex>& lock, Pred done,
                           Clock::time_point deadline, bool background) {
  bool isDriver = false;
  bool result = false;
  // Whatever happens (even bad_alloc), the driver role must be given back or every other
  // waiter would hang.
  struct Release {
    Transport& t;
    bool& isDriver;
    bool background;
    Release(Transport& transport, bool& driver, bool bg)
        : t(transport), isDriver(driver), background(bg) {}
    Release(const Release&) = delete;
    Release& operator=(const Release&) = delete;
    Release(Release&&) = delete;
    Release& operator=(Release&&) = delete;
    ~Release() {
      if (!isDriver) {
        // A caller that asked for the role but left without it (its op finished, or it timed
        // out) must not leave the background thread waiting for a hand-off that never comes.
        if (!background && t.handoff_ && t.waiters_ == 0) {
          t.handoff_ = false;
          if (!t.async_.empty()) {
            t.backgroundCv_.notify_one();
          }
        }
        return;
      }
      t.driving_ = false;
      if (t.waiters_ > 0) {
        t.waitersCv_.notify_all();
      }
      if (!background && !t.async_.empty()) {
        t.backgroundCv_.notify_one();
      }
    }
  } release(*this, isDriver, background);

  for (;;) {
    if (done()) {
      result = true;
      break;
    }
    if (!isDriver) {
      if (driving_) {
        if (background) {
          break;  // a caller drives; it will hand the role back
        }
        if (!handoff_) {
          handoff_ = true;  // ask the background thread to leave poll() to us
          kick();
        }
        ++waiters_;
        const bool timedOut = waitersCv_.wait_until(lock, deadline) == std::cv_status::timeout;
        --waiters_;
        if (timedOut && !done()) {
          break;
        }
        continue;
      }
      driving_ = true;
      isDriver = true;
      if (!background) {
        handoff_ = false;
      }
    }
    if (Clock::now() >= deadline) {
      break;
    }
    pollOnce(lock, deadline, !background && spin_.count() > 0);
  }
  return result;
}

void Transport::pollOnce(std::unique_lock<std::mutex>& lock, Clock::time_point deadline,
                         bool spin) {
  pollFds_.clear();
  pollPeers_.clear();
  shmPeers_.clear();
  shmWatch_.clear();
  shmWantSpace_.clear();
  shmReadsSeen_.clear();
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    const Peer& p = peers_[r];
    if (!p.fd.valid() || p.dead) {
      continue;
    }
    // Always POLLIN: a peer that dies is noticed at once, whatever we are waiting for. A peer
    // with a ring needs no POLLOUT: a full ring is announced in the ring, and the doorbell
    // arrives as POLLIN.
    const bool onSocket = !p.shm;
    const auto events =
        static_cast<short>(POLLIN | (onSocket && !p.sendQueue.empty() ? POLLOUT : 0));
    pollFds_.push_back(pollfd{p.fd.get(), events, 0});
    pollPeers_.push_back(static_cast<int>(r));
    if (p.shm) {
      shmPeers_.push_back(static_cast<int>(r));
      shmWatch_.push_back(p.shm.get());
      shmWantSpace_.push_back(p.sendQueue.empty() ? 0 : 1);
      shmReadsSeen_.push_back(p.awaitingRead.empty() ? kNoReadsAwaited : p.readsCompleted);
    }
  }
  pollFds_.push_back(pollfd{wakeFd_.get(), POLLIN, 0});

  int timeoutMs = -1;
  if (deadline != Clock::time_point::max()) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    timeoutMs = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, INT_MAX));
  }
  // The spin's budget adapts: it doubles (up to spin_) when spinning found the answer and halves
  // when it did not. Where other load shares the cores, a spinning rank holds the core its peer
  // needs to answer, so spinning stops paying (2 ranks on 2 busy cores: 31 us per message
  // spinning 20 us, 8 us not spinning); at zero, every kSpinProbeEvery-th wait tries again.
  std::chrono::microseconds budget{0};
  if (spin) {
    budget = spinBudget_.count() > 0 || ++spinProbe_ % kSpinProbeEvery != 0 ? spinBudget_ : spin_;
  }
  lock.unlock();
  int rc = 0;
  bool ringsReady = false;
  if (budget.count() > 0) {
    // A short busy-poll first: the answer usually comes within microseconds, and sleeping in
    // poll() costs a scheduler wake-up (~8 us here) per message. Bounded, and only where every
    // local rank has a core of its own (see spinFor()). Rings are checked every round (two
    // loads each); the sockets every round only when some peer uses one.
    const auto spinEnd = std::min(deadline, Clock::now() + budget);
    unsigned round = 0;
    do {
      if (!shmWatch_.empty()) {
        ringsReady = shmReady();
        if (ringsReady) {
          break;
        }
      }
      if (tcpPeers_ || shmWatch_.empty() || round++ % kShmPollEvery == 0) {
        rc = ::poll(pollFds_.data(), pollFds_.size(), 0);
      } else {
        cpuRelax();
      }
    } while (rc == 0 && Clock::now() < spinEnd);
  }
  const bool spinHit = rc != 0 || ringsReady;
  if (rc == 0 && !ringsReady) {
    for (std::size_t k = 0; k < shmWatch_.size(); ++k) {
      ringsReady = shmWatch_[k]->prepareSleep(shmWantSpace_[k] != 0) || ringsReady;
    }
    if (!ringsReady) {
      rc = ::poll(pollFds_.data(), pollFds_.size(), timeoutMs);
    }
    for (shm::Link* link : shmWatch_) {
      link->endSleep();
    }
  }
  lock.lock();
  if (budget.count() > 0) {
    spinBudget_ =
        spinHit ? std::min(spin_, spinBudget_ * 2 + std::chrono::microseconds(1)) : spinBudget_ / 2;
  }
  if (rc <= 0 && shmPeers_.empty()) {
    return;  // timed out or EINTR: the caller checks its deadline
  }
  const std::uint64_t before = completions_;
  if (rc > 0) {
    for (std::size_t k = 0; k < pollPeers_.size(); ++k) {
      const short revents = pollFds_[k].revents;
      if (revents == 0) {
        continue;
      }
      Peer& p = peers_[static_cast<std::size_t>(pollPeers_[k])];
      if (p.dead) {
        continue;  // failed while we were in poll()
      }
      if ((revents & POLLOUT) != 0) {
        pumpWrite(p);
      }
      if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        pumpRead(p);
      }
    }
    if (pollFds_.back().revents != 0) {
      std::uint64_t value = 0;
      [[maybe_unused]] const auto n = ::read(wakeFd_.get(), &value, sizeof value);
    }
  }
  // Rings need no event to be read: whatever arrived (or was freed) is handled now.
  for (const int r : shmPeers_) {
    Peer& p = peers_[static_cast<std::size_t>(r)];
    if (!p.dead) {
      drainRing(p);
      completeRemoteReads(p);
    }
    if (!p.dead && !p.sendQueue.empty()) {
      pumpWriteShm(p);
    }
  }
  if (completions_ != before && waiters_ > 0) {
    waitersCv_.notify_all();
  }
  sweepAsync();
}

bool Transport::shmReady() const {
  for (std::size_t k = 0; k < shmWatch_.size(); ++k) {
    if (shmWatch_[k]->hasData() || (shmWantSpace_[k] != 0 && shmWatch_[k]->hasSpace()) ||
        (shmReadsSeen_[k] != kNoReadsAwaited &&
         (shmWatch_[k]->peerReadsDone() != shmReadsSeen_[k] || shmWatch_[k]->peerNeedsHelp()))) {
      return true;
    }
  }
  return false;
}

void Transport::kick() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wakeFd_.get(), &one, sizeof one);
}

void Transport::backgroundLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    backgroundCv_.wait(lock,
                       [&] { return stopping_ || (!async_.empty() && !driving_ && !handoff_); });
    if (stopping_) {
      return;
    }
    driveUntil(
        lock, [&] { return stopping_ || async_.empty() || handoff_; }, Clock::time_point::max(),
        true);
  }
}
}  // namespace dtrun::runtime::detail::tcp
