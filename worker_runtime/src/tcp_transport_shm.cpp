// The Tcp transport's frames over a peer's shared-memory ring (shm_link.h): the same frames as on
// a socket, the socket left for doorbells and to notice the peer's death.
#include <algorithm>
#include <cerrno>

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
