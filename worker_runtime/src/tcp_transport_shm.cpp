// The Tcp transport's frames over a peer's shared-memory ring (shm_link.h): the same frames as on
// a socket, the socket left for doorbells and to notice the peer's death.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include <sys/socket.h>
#include <unistd.h>

#include "tcp_frames.h"
#include "tcp_transport.h"

namespace dtrun::runtime::detail::tcp {
namespace {

// Ring traffic is published (and consumed) in pieces of at most this, so the other side starts
// copying a large message out while the rest is still being copied in.
constexpr std::size_t kShmPiece = std::size_t{128} * 1024;

}  // namespace

void Transport::pumpWriteShm(Peer& p) {
  bool wake = false;
  std::size_t unpublished = 0;
  while (!p.sendQueue.empty() && !p.dead) {
    Op* op = p.sendQueue.front();
    if (op->moved == 0 && (op->tag & kCollectiveTagBit) == 0 && p.shm->readsRemotely(op->bytes)) {
      // A point-to-point message big enough: its address goes instead of its bytes.
      op->remote = true;
      op->header.length |= kRemoteFrameBit;
    }
    const std::size_t frame = kHeaderBytes + (op->remote ? kRemoteAddressBytes : op->bytes);
    std::size_t n = 0;
    std::size_t want = 0;
    if (op->moved < kHeaderBytes) {
      want = kHeaderBytes - op->moved;
      n = p.shm->put(reinterpret_cast<const std::byte*>(&op->header) + op->moved, want);
    } else if (op->remote) {
      const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(op->data));
      want = frame - op->moved;
      n = p.shm->put(reinterpret_cast<const std::byte*>(&address) + (op->moved - kHeaderBytes),
                     want);
    } else {
      want = std::min(kShmPiece, frame - op->moved);
      n = p.shm->put(op->data + (op->moved - kHeaderBytes), want);
    }
    op->moved += n;
    unpublished += n;
    if (op->moved == frame) {
      p.sendQueue.pop_front();
      if (op->remote) {
        p.awaitingRead.push_back(op);  // done when the peer has read it
      } else {
        complete(*op);
      }
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

void Transport::completeRemoteReads(Peer& p) {
  if (p.awaitingRead.empty()) {
    return;
  }
  // The peer may be reading one of ours with a share of the copying left for us.
  if (std::string error; !p.shm->helpPeer(error)) {
    peerFailed(p, "copying a message into " + peerName(p) + " failed: " + error, true);
    return;
  }
  const std::uint64_t done = p.shm->peerReadsDone();
  while (p.readsCompleted < done && !p.awaitingRead.empty()) {
    Op* op = p.awaitingRead.front();
    p.awaitingRead.pop_front();
    ++p.readsCompleted;
    complete(*op);
  }
}

bool Transport::readFromPeer(Peer& p, std::uint64_t from, std::byte* to, std::size_t n,
                             std::string& error) {
  if (!p.shm->sharesRead(n)) {
    return p.shm->readPeer(from, to, n, error);
  }
  p.shm->openShared(from, to, n);
  ringDoorbell(p);  // the sender, waiting for this read, takes chunks of it too
  return p.shm->finishShared(error);
}

void Transport::readRemoteMessage(Peer& p) {
  std::uint64_t address = 0;
  std::memcpy(&address, p.remoteAddress.data(), sizeof address);
  const std::size_t length = p.remoteLength;
  p.rx = RxState::kHeader;
  const auto it = std::find_if(p.posted.begin(), p.posted.end(),
                               [&](const Op* op) { return op->tag == p.header.tag; });
  Op* op = it != p.posted.end() ? *it : nullptr;
  std::string error;
  bool read = true;
  Op* reading = nullptr;
  if (op != nullptr && op->bytes != length) {
    p.posted.erase(it);
    op->matched = true;
    fail(*op, std::string(op->opName) + ": " + peerName(p) + " sent " + std::to_string(length) +
                  " bytes for a receive of " + std::to_string(op->bytes) + " bytes (tag " +
                  std::to_string(op->tag) + ")");
  } else if (op != nullptr && !op->reduce) {
    p.posted.erase(it);
    op->matched = true;
    read = readFromPeer(p, address, op->data, length, error);
    if (read) {
      op->moved = length;
      complete(*op);
    } else {
      reading = op;  // out of `posted` already: failed below with the pair
    }
  } else {
    // Not posted yet (or combining): the bytes wait in a chunk, as a ring's message would.
    p.rxChunk = takeChunk(length);
    p.rxChunk.tag = p.header.tag;
    read = readFromPeer(p, address, p.rxChunk.data.get(), length, error);
    if (read) {
      p.rx = RxState::kIntoChunk;
      finishMessage(p);
    } else {
      returnChunk(std::move(p.rxChunk));
    }
  }
  if (!read) {
    // The sender waits for this read and will not send the bytes another way.
    const std::string why = "reading a message of " + std::to_string(length) + " bytes from " +
                            peerName(p) + " failed: " + error +
                            " (without DTRUN_SHM_ONE_COPY_BYTES they go through the ring)";
    if (reading != nullptr) {
      fail(*reading, std::string(reading->opName) + ": " + why);
    }
    peerFailed(p, why, true);
    return;
  }
  p.shm->noteReadDone();
  ringDoorbell(p);  // the sender may sleep until its send completes
}

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
      peerClosed(p);
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

}  // namespace dtrun::runtime::detail::tcp
