// The Tcp transport's set-up and shut-down, posting, cancel and abort, completion and failure.
// Waiting is in tcp_transport_wait.cpp, the frames over sockets in tcp_framing.cpp, over
// shared-memory rings in tcp_transport_shm.cpp.
#include "tcp_transport.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dtrun/runtime.h"

#include "log.h"
#include "tcp_frames.h"

namespace dtrun::runtime::detail::tcp {
namespace {

constexpr std::size_t kChunkPoolMax = 16;

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

void Transport::peerClosed(Peer& p) {
  if (p.leaving) {
    peerFailed(p, "connection to " + peerName(p) + " closed (it left the group)", false);
  } else {
    peerFailed(p, "connection to " + peerName(p) + " closed", true);
  }
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
  for (Op* op : p.awaitingRead) {
    fail(*op, std::string(op->opName) + ": " + reason);
  }
  p.awaitingRead.clear();
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
