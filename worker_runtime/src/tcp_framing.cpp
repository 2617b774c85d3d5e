// The Tcp transport's frames over sockets: writing queued sends (header and payload gathered into
// one writev), control frames (goodbye, abort), reading and parsing the stream into receives
// (consume, beginMessage and finishMessage also parse what the shared-memory rings carry).
#include <array>
#include <cerrno>

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp_frames.h"
#include "tcp_transport.h"

namespace dtrun::runtime::detail::tcp {
namespace {

constexpr std::size_t kMaxAbortBytes = std::size_t{64} * 1024;
// A header claiming more than this is garbage (a stray or corrupted stream), not a message.
constexpr std::uint64_t kMaxFrameBytes = std::uint64_t{1} << 44;

// A payload tail of at least this is read straight into its destination (see kStageBytes).
constexpr std::size_t kDirectReadMin = std::size_t{16} * 1024;
constexpr std::size_t kMaxIov = 64;

}  // namespace

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
      peerClosed(p);
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
      case RxState::kRemoteAddress: {
        const std::size_t got = kRemoteAddressBytes - p.rxLeft;
        take = std::min(len, p.rxLeft);
        std::memcpy(p.remoteAddress.data() + got, src, take);
        p.rxLeft -= take;
        if (p.rxLeft == 0) {
          readRemoteMessage(p);
        }
        break;
      }
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
  if (p.shm && (h.length & kRemoteFrameBit) != 0 &&
      (h.length & ~kRemoteFrameBit) <= kMaxFrameBytes && h.tag != kAbortTag) {
    p.remoteLength = static_cast<std::size_t>(h.length & ~kRemoteFrameBit);
    p.rxLeft = kRemoteAddressBytes;
    p.rx = RxState::kRemoteAddress;
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
    p.saidWhy = true;
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

}  // namespace dtrun::runtime::detail::tcp
