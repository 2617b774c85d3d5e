#include "tcp_transport.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <climits>

#include "dtrun/runtime.h"

#include "log.h"
#include "reduce.h"

namespace dtrun::runtime::detail::tcp {
namespace {

constexpr std::size_t kHeaderBytes = sizeof(FrameHeader);
static_assert(kHeaderBytes == 16, "the frame header is two 64-bit words on the wire");

// Control frames, never a collective's tag (collective sequence numbers use 30 bits).
constexpr std::uint64_t kByeTag = ~std::uint64_t{0};        // orderly exit: EOF follows
constexpr std::uint64_t kAbortTag = ~std::uint64_t{0} - 1;  // payload: why the sender failed
constexpr std::size_t kMaxAbortBytes = std::size_t{64} * 1024;
// A header claiming more than this is garbage (a stray or corrupted stream), not a message.
constexpr std::uint64_t kMaxFrameBytes = std::uint64_t{1} << 44;

// Small messages are read many per syscall into the peer's stage and copied out; the tail of a
// large payload is read straight into its destination (no copy).
constexpr std::size_t kStageBytes = std::size_t{64} * 1024;
constexpr std::size_t kDirectReadMin = std::size_t{16} * 1024;
constexpr std::size_t kMaxIov = 64;
constexpr std::size_t kChunkPoolMax = 16;
// Ring traffic is published (and consumed) in pieces of at most this, so the other side starts
// copying a large message out while the rest is still being copied in.
constexpr std::size_t kShmPiece = std::size_t{128} * 1024;
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

std::string errnoText(int err) { return std::system_category().message(err); }

// Lands n payload bytes of `op`'s message at op.moved: copied, or combined into what is there.
void deliver(Op& op, const std::byte* src, std::size_t n) {
  if (!op.reduce) {
    std::memcpy(op.data + op.moved, src, n);
    op.moved += n;
    return;
  }
  const std::size_t esize = elementSize(op.reduceType);
  while (n > 0) {
    const std::size_t partial = op.moved % esize;
    if (partial != 0 || n < esize) {
      // An element split between arrivals waits in carry until it is whole.
      const std::size_t k = std::min(esize - partial, n);
      std::memcpy(op.carry.data() + partial, src, k);
      op.moved += k;
      src += k;
      n -= k;
      if (op.moved % esize == 0) {
        reduceInto(op.data + op.moved - esize, op.carry.data(), 1, op.reduceType, op.reduceOp);
      }
      continue;
    }
    const std::size_t whole = n / esize;
    reduceInto(op.data + op.moved, src, whole, op.reduceType, op.reduceOp);
    op.moved += whole * esize;
    src += whole * esize;
    n -= whole * esize;
  }
}

// Transports alive in this process, so that exit() without destroying the process group still
// says goodbye: peers then see an orderly departure, not a crash that aborts their collectives.
struct Registry {
  std::mutex mutex;
  std::vector<Transport*> live;
};

Registry& registry() {
  static auto* instance = new Registry;  // never destroyed: atexit handlers may still use it
  return *instance;
}

void sayGoodbyeAtExit() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (Transport* t : r.live) {
    t->sayGoodbye();
  }
}

}  // namespace

Transport::Transport(std::vector<UniqueFd> fds, std::vector<std::unique_ptr<shm::Link>> links,
                     std::vector<int> globalRanks, std::chrono::microseconds spin)
    : globalRanks_(std::move(globalRanks)), spin_(spin), spinBudget_(spin) {
  peers_.resize(fds.size());
  for (std::size_t r = 0; r < fds.size(); ++r) {
    Peer& p = peers_[r];
    p.globalRank = globalRanks_[r];
    if (fds[r].valid()) {
      p.fd = std::move(fds[r]);
      if (r < links.size() && links[r]) {
        p.shm = std::move(links[r]);
      } else {
        p.stage = std::make_unique_for_overwrite<std::byte[]>(kStageBytes);
        tcpPeers_ = true;
      }
    }
  }
  shmPeers_.reserve(peers_.size());
  shmWatch_.reserve(peers_.size());
  shmWantSpace_.reserve(peers_.size());
  wakeFd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wakeFd_.valid()) {
    throw CommError("tcp: eventfd: " + errnoText(errno));
  }
  pollFds_.reserve(peers_.size() + 1);
  pollPeers_.reserve(peers_.size());
}

Transport::~Transport() { stop(); }

void Transport::start() {
  {
    static std::once_flag atExit;
    std::call_once(atExit, [] {
      if (std::atexit(sayGoodbyeAtExit) != 0) {
        log::runtime().warn("tcp: atexit failed: peers will take an exit() for a crash");
      }
    });
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.live.push_back(this);
  }
  background_ = std::thread([this] {
    try {
      backgroundLoop();
    } catch (const std::exception& e) {
      // Nothing may escape a thread; the waiting callers time out instead.
      log::runtime().error("tcp: progress thread failed: {}", e.what());
    }
  });
}

void Transport::sayGoodbye() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_ || !abortReason_.empty()) {
    return;
  }
  for (Peer& p : peers_) {
    if (p.fd.valid() && !p.dead && !p.byeSent) {
      sendControl(p, kByeTag, {});
      p.byeSent = true;
    }
  }
}

void Transport::stop() {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    std::erase(r.live, this);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
    kick();
  }
  backgroundCv_.notify_all();
  if (background_.joinable()) {
    background_.join();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (Peer& p : peers_) {
    if (!p.fd.valid() || p.dead) {
      continue;
    }
    // Read what is already there, so closing does not reset a peer still reading our data.
    pumpRead(p);
    if (!p.dead && abortReason_.empty() && !p.byeSent) {
      sendControl(p, kByeTag, {});
    }
    peerFailed(p, "the process group was destroyed", false);
  }
  sweepAsync();
  waitersCv_.notify_all();
}

// ---- posting --------------------------------------------------------------------------------

void Transport::post(Op& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  postLocked(op);
}

void Transport::postAsync(const std::shared_ptr<Op>& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  op->async = true;
  postLocked(*op);
  if (op->finished()) {
    return;
  }
  async_.push_back(op);
  if (!driving_) {
    backgroundCv_.notify_one();
  }
}

void Transport::postLocked(Op& op) {
  op.state = OpState::kPosted;
  op.moved = 0;
  op.matched = false;
  if (stopping_) {
    fail(op, std::string(op.opName) + ": the process group was destroyed");
    return;
  }
  if (!abortReason_.empty()) {
    fail(op, std::string(op.opName) + ": the group is unusable after an earlier failure (" +
                 abortReason_ + ")");
    return;
  }
  Peer& p = peers_[static_cast<std::size_t>(op.peer)];
  if (op.kind == OpKind::kRecv) {
    // A message that already arrived comes first, even from a peer that has left since.
    if (matchUnexpected(p, op)) {
      return;
    }
    if (p.dead) {
      fail(op, std::string(op.opName) + ": " + p.deadReason);
      return;
    }
    p.posted.push_back(&op);
    return;
  }
  if (p.dead) {
    fail(op, std::string(op.opName) + ": " + p.deadReason);
    return;
  }
  op.header = FrameHeader{op.tag, op.bytes};
  p.sendQueue.push_back(&op);
  if (p.sendQueue.size() == 1) {
    pumpWrite(p);  // most small sends complete right here, with no poll at all
  }
  if (!op.finished() && driving_) {
    kick();  // the driver must add POLLOUT for this peer
  }
}

bool Transport::matchUnexpected(Peer& p, Op& op) {
  for (auto it = p.unexpected.begin(); it != p.unexpected.end(); ++it) {
    if (it->tag != op.tag) {
      continue;
    }
    Chunk chunk = std::move(*it);
    p.unexpected.erase(it);
    op.matched = true;
    if (chunk.size != op.bytes) {
      fail(op, std::string(op.opName) + ": " + peerName(p) + " sent " + std::to_string(chunk.size) +
                   " bytes for a receive of " + std::to_string(op.bytes) + " bytes (tag " +
                   std::to_string(op.tag) + ")");
    } else {
      op.moved = 0;
      if (op.bytes > 0) {
        deliver(op, chunk.data.get(), op.bytes);
      }
      op.moved = op.bytes;
      complete(op);
    }
    returnChunk(std::move(chunk));
    return true;
  }
  return false;
}

// ---- waiting --------------------------------------------------------------------------------

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
    if (shmWatch_[k]->hasData() || (shmWantSpace_[k] != 0 && shmWatch_[k]->hasSpace())) {
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

// ---- cancel and abort -----------------------------------------------------------------------

void Transport::cancel(Op& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (op.state != OpState::kPosted) {
    return;
  }
  Peer& p = peers_[static_cast<std::size_t>(op.peer)];
  if (op.kind == OpKind::kRecv) {
    if (p.rxOp == &op) {
      // Its message is arriving: drop the rest of it so the stream stays in step.
      p.rxOp = nullptr;
      p.rx = p.rxLeft > 0 ? RxState::kDiscard : RxState::kHeader;
    } else {
      std::erase(p.posted, &op);
    }
  } else if (op.moved == 0) {
    std::erase(p.sendQueue, &op);
  } else {
    // Half a frame is on the wire and the buffer is going away: the stream cannot continue.
    peerFailed(p, "connection to " + peerName(p) + " closed after a send to it timed out", false);
  }
  if (!op.finished()) {
    fail(op, std::string(op.opName) + ": cancelled");
  }
  sweepAsync();
}

void Transport::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!abortReason_.empty()) {
      return;
    }
    abortReason_ = reason;
    for (Peer& p : peers_) {
      if (!p.fd.valid() || p.dead) {
        continue;
      }
      sendControl(p, kAbortTag, reason);
      peerFailed(p, "the group failed: " + reason, false);
    }
    sweepAsync();
    if (driving_) {
      kick();
    }
  }
  waitersCv_.notify_all();
}

// ---- writing --------------------------------------------------------------------------------

void Transport::pumpWrite(Peer& p) {
  if (p.shm) {
    pumpWriteShm(p);
    return;
  }
  while (!p.sendQueue.empty() && !p.dead) {
    std::array<iovec, kMaxIov> iov{};
    std::size_t count = 0;
    std::size_t total = 0;
    for (Op* op : p.sendQueue) {
      if (count + 2 > kMaxIov) {
        break;
      }
      std::size_t offset = op->moved;
      if (offset < kHeaderBytes) {
        iov[count++] = {reinterpret_cast<std::byte*>(&op->header) + offset, kHeaderBytes - offset};
        total += kHeaderBytes - offset;
        offset = kHeaderBytes;
      }
      const std::size_t payload = offset - kHeaderBytes;
      if (payload < op->bytes) {
        iov[count++] = {op->data + payload, op->bytes - payload};
        total += op->bytes - payload;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = count;
    // MSG_NOSIGNAL: a peer that died must become a CommError, not a SIGPIPE.
    const ssize_t n = ::sendmsg(p.fd.get(), &msg, MSG_NOSIGNAL);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) {
        continue;
      }
      if (err == EAGAIN || err == EWOULDBLOCK) {
        return;
      }
      if (err == EPIPE || err == ECONNRESET) {
        // The peer may have said why before it closed (an abort frame not read yet): a rank
        // that failed because a third one died is then named with that one, not as the cause.
        pumpRead(p);
        if (p.dead) {
          return;
        }
      }
      peerFailed(p, "connection to " + peerName(p) + " failed: " + errnoText(err), !p.leaving);
      return;
    }
    auto left = static_cast<std::size_t>(n);
    while (!p.sendQueue.empty()) {
      Op* op = p.sendQueue.front();
      const std::size_t need = kHeaderBytes + op->bytes - op->moved;
      const std::size_t take = std::min(left, need);
      op->moved += take;
      left -= take;
      if (take < need) {
        break;
      }
      p.sendQueue.pop_front();
      complete(*op);
    }
    if (static_cast<std::size_t>(n) < total) {
      return;  // the socket buffer is full: wait for POLLOUT
    }
  }
}

void Transport::pumpWriteShm(Peer& p) {
  bool wake = false;
  std::size_t unpublished = 0;
  while (!p.sendQueue.empty() && !p.dead) {
    Op* op = p.sendQueue.front();
    std::size_t n = 0;
    std::size_t want = 0;
    if (op->moved < kHeaderBytes) {
      want = kHeaderBytes - op->moved;
      n = p.shm->put(reinterpret_cast<const std::byte*>(&op->header) + op->moved, want);
    } else {
      want = std::min(kShmPiece, kHeaderBytes + op->bytes - op->moved);
      n = p.shm->put(op->data + (op->moved - kHeaderBytes), want);
    }
    op->moved += n;
    unpublished += n;
    if (op->moved == kHeaderBytes + op->bytes) {
      p.sendQueue.pop_front();
      complete(*op);
    }
    if (unpublished >= kShmPiece || n < want) {
      wake = p.shm->publish() || wake;
      unpublished = 0;
    }
    if (n < want) {
      break;  // the ring is full: the reader's doorbell says when there is room
    }
  }
  if (unpublished > 0) {
    wake = p.shm->publish() || wake;
  }
  if (wake) {
    ringDoorbell(p);
  }
}

void Transport::ringDoorbell(Peer& p) {
  const char bell = 1;
  // Never blocking: a full socket already holds doorbells enough.
  [[maybe_unused]] const auto n = ::send(p.fd.get(), &bell, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void Transport::sendControl(Peer& p, std::uint64_t tag, const std::string& payload) {
  // Only between frames: a half-written frame in front would make this one garbage.
  if (p.dead || (!p.sendQueue.empty() && p.sendQueue.front()->moved > 0)) {
    return;
  }
  FrameHeader header{tag, payload.size()};
  if (p.shm) {
    // Best effort, like the socket's: a ring without room for the whole frame misses it.
    if (p.shm->freeBytes() >= kHeaderBytes + payload.size()) {
      p.shm->put(reinterpret_cast<const std::byte*>(&header), kHeaderBytes);
      p.shm->put(reinterpret_cast<const std::byte*>(payload.data()), payload.size());
      if (p.shm->publish()) {
        ringDoorbell(p);
      }
    }
    return;
  }
  std::array<iovec, 2> iov{
      {{&header, kHeaderBytes}, {const_cast<char*>(payload.data()), payload.size()}}};
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = payload.empty() ? 1 : 2;
  // Best effort and never blocking: a peer that does not read simply misses the reason.
  [[maybe_unused]] const auto n = ::sendmsg(p.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

// ---- reading --------------------------------------------------------------------------------

void Transport::pumpReadShm(Peer& p) {
  drainRing(p);
  // The socket carries only doorbells now, and EOF when the peer is gone.
  std::array<char, 256> bells{};
  while (!p.dead) {
    const ssize_t n = ::read(p.fd.get(), bells.data(), bells.size());
    if (n > 0) {
      continue;
    }
    if (n == 0) {
      // Whatever the peer wrote before it closed (its goodbye, an abort reason) is in the ring.
      drainRing(p);
      if (p.leaving) {
        peerFailed(p, "connection to " + peerName(p) + " closed (it left the group)", false);
      } else {
        peerFailed(p, "connection to " + peerName(p) + " closed", true);
      }
      return;
    }
    const int err = errno;
    if (err == EINTR) {
      continue;
    }
    if (err != EAGAIN && err != EWOULDBLOCK) {
      drainRing(p);
      peerFailed(p, "connection to " + peerName(p) + " failed: " + errnoText(err), !p.leaving);
    }
    return;
  }
}

bool Transport::drainRing(Peer& p) {
  bool any = false;
  bool wake = false;
  while (!p.dead) {
    const std::span<const std::byte> ready = p.shm->readable();
    if (ready.empty()) {
      break;
    }
    const std::size_t n = std::min(ready.size(), kShmPiece);
    consume(p, ready.data(), n);
    wake = p.shm->release(n) || wake;
    any = true;
  }
  if (wake) {
    ringDoorbell(p);
  }
  return any;
}

void Transport::pumpRead(Peer& p) {
  if (p.shm) {
    pumpReadShm(p);
    return;
  }
  while (!p.dead) {
    std::byte* dst = p.stage.get();
    std::size_t want = kStageBytes;
    bool direct = false;
    if (p.rx == RxState::kIntoOp && p.rxLeft >= kDirectReadMin && !p.rxOp->reduce) {
      dst = p.rxOp->data + p.rxOp->moved;
      want = p.rxLeft;
      direct = true;
    } else if (p.rx == RxState::kIntoChunk && p.rxLeft >= kDirectReadMin) {
      dst = p.rxChunk.data.get() + (p.rxChunk.size - p.rxLeft);
      want = p.rxLeft;
      direct = true;
    }
    const ssize_t n = ::read(p.fd.get(), dst, want);
    if (n > 0) {
      const auto got = static_cast<std::size_t>(n);
      if (direct) {
        if (p.rx == RxState::kIntoOp) {
          p.rxOp->moved += got;
        }
        p.rxLeft -= got;
        if (p.rxLeft == 0) {
          finishMessage(p);
        }
      } else {
        consume(p, dst, got);
      }
      if (got < want) {
        return;  // drained for now; poll() says when there is more
      }
      continue;
    }
    if (n == 0) {
      if (p.leaving) {
        peerFailed(p, "connection to " + peerName(p) + " closed (it left the group)", false);
      } else {
        peerFailed(p, "connection to " + peerName(p) + " closed", true);
      }
      return;
    }
    const int err = errno;
    if (err == EINTR) {
      continue;
    }
    if (err == EAGAIN || err == EWOULDBLOCK) {
      return;
    }
    peerFailed(p, "connection to " + peerName(p) + " failed: " + errnoText(err), !p.leaving);
    return;
  }
}

void Transport::consume(Peer& p, const std::byte* src, std::size_t len) {
  while (len > 0 && !p.dead) {
    std::size_t take = 0;
    switch (p.rx) {
      case RxState::kHeader:
        take = std::min(len, kHeaderBytes - p.headerGot);
        std::memcpy(reinterpret_cast<std::byte*>(&p.header) + p.headerGot, src, take);
        p.headerGot += take;
        if (p.headerGot == kHeaderBytes) {
          p.headerGot = 0;
          beginMessage(p);
        }
        break;
      case RxState::kIntoOp:
        take = std::min(len, p.rxLeft);
        deliver(*p.rxOp, src, take);
        p.rxLeft -= take;
        if (p.rxLeft == 0) {
          finishMessage(p);
        }
        break;
      case RxState::kIntoChunk:
        take = std::min(len, p.rxLeft);
        std::memcpy(p.rxChunk.data.get() + (p.rxChunk.size - p.rxLeft), src, take);
        p.rxLeft -= take;
        if (p.rxLeft == 0) {
          finishMessage(p);
        }
        break;
      case RxState::kDiscard:
        take = std::min(len, p.rxLeft);
        p.rxLeft -= take;
        if (p.rxLeft == 0) {
          p.rx = RxState::kHeader;
        }
        break;
    }
    src += take;
    len -= take;
  }
}

void Transport::beginMessage(Peer& p) {
  const FrameHeader h = p.header;
  if (h.tag == kByeTag && h.length == 0) {
    p.leaving = true;
    return;
  }
  if (h.length > kMaxFrameBytes || (h.tag == kAbortTag && h.length > kMaxAbortBytes)) {
    peerFailed(p,
               peerName(p) + " sent a malformed frame (tag " + std::to_string(h.tag) + ", length " +
                   std::to_string(h.length) + ")",
               true);
    return;
  }
  const auto length = static_cast<std::size_t>(h.length);
  p.rxLeft = length;
  if (h.tag == kAbortTag) {
    p.rxChunk = takeChunk(length);
    p.rxChunk.tag = h.tag;
    p.rxAbortFrame = true;
    p.rx = RxState::kIntoChunk;
  } else {
    const auto it = std::find_if(p.posted.begin(), p.posted.end(),
                                 [&](const Op* op) { return op->tag == h.tag; });
    if (it != p.posted.end()) {
      Op& op = **it;
      p.posted.erase(it);
      op.matched = true;
      if (op.bytes != length) {
        fail(op, std::string(op.opName) + ": " + peerName(p) + " sent " + std::to_string(length) +
                     " bytes for a receive of " + std::to_string(op.bytes) + " bytes (tag " +
                     std::to_string(op.tag) + ")");
        p.rx = RxState::kDiscard;
      } else {
        p.rxOp = &op;
        p.rx = RxState::kIntoOp;
      }
    } else {
      p.rxChunk = takeChunk(length);
      p.rxChunk.tag = h.tag;
      p.rx = RxState::kIntoChunk;
    }
  }
  if (p.rxLeft == 0) {
    if (p.rx == RxState::kDiscard) {
      p.rx = RxState::kHeader;
    } else {
      finishMessage(p);
    }
  }
}

void Transport::finishMessage(Peer& p) {
  if (p.rx == RxState::kIntoOp) {
    Op* op = p.rxOp;
    p.rxOp = nullptr;
    p.rx = RxState::kHeader;
    complete(*op);
    return;
  }
  p.rx = RxState::kHeader;
  Chunk chunk = std::move(p.rxChunk);
  if (p.rxAbortFrame) {
    p.rxAbortFrame = false;
    const std::string why(reinterpret_cast<const char*>(chunk.data.get()), chunk.size);
    returnChunk(std::move(chunk));
    peerFailed(p, peerName(p) + " failed (" + why + ")", true);
    return;
  }
  // A receive may have been posted while this message was arriving.
  const auto it = std::find_if(p.posted.begin(), p.posted.end(),
                               [&](const Op* op) { return op->tag == chunk.tag; });
  if (it == p.posted.end()) {
    p.unexpected.push_back(std::move(chunk));
    return;
  }
  Op& op = **it;
  p.posted.erase(it);
  p.unexpected.push_front(std::move(chunk));
  matchUnexpected(p, op);
}

// ---- completion and failure -----------------------------------------------------------------

void Transport::complete(Op& op) {
  op.state = OpState::kDone;
  ++completions_;
  asyncFinished_ = asyncFinished_ || op.async;
}

void Transport::fail(Op& op, const std::string& reason) {
  op.state = OpState::kFailed;
  op.error = reason;
  ++completions_;
  asyncFinished_ = asyncFinished_ || op.async;
}

void Transport::peerFailed(Peer& p, const std::string& reason, bool crashed) {
  if (p.dead) {
    return;
  }
  p.dead = true;
  p.crashed = crashed;
  p.deadReason = reason;
  // shutdown, not close: a driver may be in poll() on this descriptor right now, and a closed
  // number could be reused by another socket. The destructor closes it.
  ::shutdown(p.fd.get(), SHUT_RDWR);
  if (crashed) {
    crashReasons_.push_back(reason);
  }
  for (Op* op : p.sendQueue) {
    fail(*op, std::string(op->opName) + ": " + reason);
  }
  p.sendQueue.clear();
  for (Op* op : p.posted) {
    fail(*op, std::string(op->opName) + ": " + reason);
  }
  p.posted.clear();
  if (p.rx == RxState::kIntoOp && p.rxOp != nullptr) {
    fail(*p.rxOp, std::string(p.rxOp->opName) + ": " + reason);
  }
  p.rxOp = nullptr;
  p.rx = RxState::kHeader;
  p.rxLeft = 0;
  // Messages that fully arrived stay receivable (p.unexpected).
  if (crashed) {
    log::runtime().debug("tcp: {}", reason);
  }
  if (waiters_ > 0) {
    waitersCv_.notify_all();
  }
}

Transport::Chunk Transport::takeChunk(std::size_t size) {
  for (auto it = chunkPool_.begin(); it != chunkPool_.end(); ++it) {
    if (it->capacity >= size) {
      Chunk chunk = std::move(*it);
      chunkPool_.erase(it);
      chunk.size = size;
      return chunk;
    }
  }
  Chunk chunk;
  chunk.capacity = std::max<std::size_t>(size, 4096);
  chunk.data = std::make_unique_for_overwrite<std::byte[]>(chunk.capacity);
  chunk.size = size;
  return chunk;
}

void Transport::returnChunk(Chunk chunk) {
  if (chunk.data && chunkPool_.size() < kChunkPoolMax) {
    chunkPool_.push_back(std::move(chunk));
  }
}

void Transport::sweepAsync() {
  if (!asyncFinished_) {
    return;
  }
  asyncFinished_ = false;
  std::erase_if(async_, [](const std::shared_ptr<Op>& op) { return op->finished(); });
}

std::string Transport::peerName(const Peer& p) const {
  return "rank " + std::to_string(p.globalRank);
}

}  // namespace dtrun::runtime::detail::tcp
