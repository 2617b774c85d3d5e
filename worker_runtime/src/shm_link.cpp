#include "shm_link.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>
#include <utility>

#include <sched.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

namespace dtrun::runtime::detail::shm {
namespace {

constexpr std::uint64_t kMagic = 0x314d485354524454ULL;  // "DTRTSHM1"
// Segment: a page of header (magic, capacity, the two rings' control words, then the two sides'
// SideInfo), then ring 0's data, then ring 1's.
constexpr std::size_t kHeaderBytes = 4096;
constexpr std::size_t kControlOffset = 64;
constexpr std::size_t kSideOffset = kControlOffset + 2 * sizeof(RingControl);
constexpr std::uint64_t kCanary = 0x59504f43454e4f44ULL;  // "DONECOPY"

struct SegmentHeader {
  std::uint64_t magic;
  std::uint64_t capacity;
};

static_assert(sizeof(RingControl) == 256, "four cache lines per direction");
static_assert(kSideOffset + 2 * sizeof(SideInfo) <= kHeaderBytes, "controls fit the page");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "atomics in shared memory must be lock-free (address-free)");

RingControl* controlAt(void* base, int ring) {
  return std::launder(
      reinterpret_cast<RingControl*>(static_cast<std::byte*>(base) + kControlOffset +
                                     static_cast<std::size_t>(ring) * sizeof(RingControl)));
}

SideInfo* sideAt(void* base, int side) {
  return std::launder(
      reinterpret_cast<SideInfo*>(static_cast<std::byte*>(base) + kSideOffset +
                                  static_cast<std::size_t>(side) * sizeof(SideInfo)));
}

}  // namespace

std::unique_ptr<Link> Link::create(const std::string& path, std::size_t capacity,
                                   std::string& error) {
  auto segment = Segment::create(path, kHeaderBytes + 2 * capacity, error);
  if (!segment) {
    return nullptr;
  }
  void* base = segment->data();
  auto* header = new (base) SegmentHeader{kMagic, capacity};
  (void)header;
  for (int ring = 0; ring < 2; ++ring) {
    new (controlAt(base, ring)) RingControl{};
    new (sideAt(base, ring)) SideInfo{};
  }
  return std::unique_ptr<Link>(new Link(std::move(segment), capacity, true));
}

std::unique_ptr<Link> Link::open(const std::string& path, std::string& error) {
  auto segment = Segment::open(path, 0, error, kHeaderBytes);
  if (!segment) {
    return nullptr;
  }
  SegmentHeader header{};
  std::memcpy(&header, segment->data(), sizeof header);
  if (header.magic != kMagic || kHeaderBytes + 2 * header.capacity != segment->bytes() ||
      !std::has_single_bit(header.capacity)) {
    error = path + " has a foreign header";
    return nullptr;
  }
  return std::unique_ptr<Link>(new Link(std::move(segment), header.capacity, false));
}

Link::Link(std::unique_ptr<Segment> segment, std::size_t capacity, bool creator)
    : segment_(std::move(segment)),
      capacity_(capacity),
      tx_(controlAt(segment_->data(), creator ? 0 : 1)),
      rx_(controlAt(segment_->data(), creator ? 1 : 0)),
      txData_(segment_->data() + kHeaderBytes + (creator ? 0 : capacity)),
      rxData_(segment_->data() + kHeaderBytes + (creator ? capacity : 0)),
      txHead_(tx_->head.load(std::memory_order_relaxed)),
      self_(sideAt(segment_->data(), creator ? 0 : 1)),
      peer_(sideAt(segment_->data(), creator ? 1 : 0)),
      canary_(kCanary) {
  self_->canary.store(reinterpret_cast<std::uintptr_t>(&canary_), std::memory_order_relaxed);
  self_->pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_release);
}

Link::~Link() = default;

// ---- producer ---------------------------------------------------------------------------------

std::size_t Link::freeBytes() const {
  return capacity_ - static_cast<std::size_t>(txHead_ - tx_->tail.load(std::memory_order_acquire));
}

std::size_t Link::put(const std::byte* src, std::size_t n) {
  n = std::min(n, freeBytes());
  const std::size_t at = static_cast<std::size_t>(txHead_) & (capacity_ - 1);
  const std::size_t first = std::min(n, capacity_ - at);
  if (first > 0) {
    std::memcpy(txData_ + at, src, first);
  }
  if (n > first) {
    std::memcpy(txData_, src + first, n - first);
  }
  txHead_ += n;
  return n;
}

bool Link::publish() {
  tx_->head.store(txHead_, std::memory_order_release);
  // Pairs with the fence in prepareSleep(): either the sleeper sees the new head, or we see its
  // flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return tx_->consumerSleeping.load(std::memory_order_relaxed) != 0 &&
         tx_->consumerSleeping.exchange(0) != 0;
}

// ---- consumer ---------------------------------------------------------------------------------

std::span<const std::byte> Link::readable() const {
  const std::uint64_t tail = rx_->tail.load(std::memory_order_relaxed);
  const std::uint64_t head = rx_->head.load(std::memory_order_acquire);
  const std::size_t at = static_cast<std::size_t>(tail) & (capacity_ - 1);
  const auto ready = static_cast<std::size_t>(head - tail);
  return {rxData_ + at, std::min(ready, capacity_ - at)};
}

bool Link::release(std::size_t n) {
  const std::uint64_t tail = rx_->tail.load(std::memory_order_relaxed) + n;
  rx_->tail.store(tail, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // A waiting producer is woken once half the ring is free, not for every piece: a wake-up is a
  // context switch, and with more ranks than cores a switch can cost a time slice. The consumer
  // drains the ring completely, so it always gets there.
  return rx_->producerWaiting.load(std::memory_order_relaxed) != 0 &&
         rx_->head.load(std::memory_order_relaxed) - tail <= capacity_ / 2 &&
         rx_->producerWaiting.exchange(0) != 0;
}

// ---- sleeping ---------------------------------------------------------------------------------

bool Link::prepareSleep(bool wantSpace) {
  rx_->consumerSleeping.store(1, std::memory_order_relaxed);
  if (wantSpace) {
    tx_->producerWaiting.store(1, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return hasData() || (wantSpace && hasSpace());
}

void Link::endSleep() {
  rx_->consumerSleeping.store(0, std::memory_order_relaxed);
  tx_->producerWaiting.store(0, std::memory_order_relaxed);
}

bool Link::hasData() const {
  return rx_->head.load(std::memory_order_acquire) != rx_->tail.load(std::memory_order_relaxed);
}

bool Link::hasSpace() const {
  // Half the ring: the level at which release() wakes a waiting producer.
  return tx_->head.load(std::memory_order_relaxed) - tx_->tail.load(std::memory_order_acquire) <=
         capacity_ / 2;
}

// ---- remote reads -----------------------------------------------------------------------------

void Link::probePeer() {
  if (oneCopyBytes_ == 0 || peer_->pid.load(std::memory_order_acquire) == 0) {
    return;
  }
  std::uint64_t seen = 0;
  std::string error;
  if (readPeer(peer_->canary.load(std::memory_order_relaxed), reinterpret_cast<std::byte*>(&seen),
               sizeof seen, error) &&
      seen == kCanary) {
    self_->readsPeer.store(1, std::memory_order_release);
  }
}

namespace {

// Shared reads go in chunks of this: small enough that the side that finishes first waits for
// at most one chunk of the other's, large enough that claiming one costs nothing next to it.
constexpr std::uint64_t kChunkBytes = std::uint64_t{1} << 20U;
constexpr std::uint64_t kIndexMask = 0xffffffffULL;

std::uint64_t chunksOf(std::uint64_t bytes) { return (bytes + kChunkBytes - 1) / kChunkBytes; }

// One copy between this process and `pid`: read (into `local` from `remote`) or write.
bool copyWith(pid_t pid, bool write, std::byte* local, std::uint64_t remote, std::size_t n,
              std::string& error) {
  while (n > 0) {
    iovec mine{local, n};
    // NOLINTNEXTLINE(performance-no-int-to-ptr): an address in the other process
    iovec theirs{reinterpret_cast<void*>(static_cast<std::uintptr_t>(remote)), n};
    const ssize_t got = write ? ::process_vm_writev(pid, &mine, 1, &theirs, 1, 0)
                              : ::process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      error = got < 0 ? std::system_category().message(errno) : "nothing copied";
      return false;
    }
    local += got;
    remote += static_cast<std::uint64_t>(got);
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace

bool Link::sharesRead(std::size_t n) const {
  return n >= 2 * kChunkBytes && peer_->readsPeer.load(std::memory_order_acquire) != 0;
}

void Link::openShared(std::uint64_t from, std::byte* to, std::size_t n) {
  self_->from.store(from, std::memory_order_relaxed);
  self_->to.store(reinterpret_cast<std::uintptr_t>(to), std::memory_order_relaxed);
  self_->bytes.store(n, std::memory_order_relaxed);
  self_->helped.store(0, std::memory_order_relaxed);
  self_->helpFailed.store(0, std::memory_order_relaxed);
  ++transfers_;
  self_->claim.store(transfers_ << 32U, std::memory_order_release);
}

bool Link::finishShared(std::string& error) {
  const std::uint64_t from = self_->from.load(std::memory_order_relaxed);
  // NOLINTNEXTLINE(performance-no-int-to-ptr): our own buffer's address, kept in the header
  auto* to = reinterpret_cast<std::byte*>(
      static_cast<std::uintptr_t>(self_->to.load(std::memory_order_relaxed)));
  const std::uint64_t bytes = self_->bytes.load(std::memory_order_relaxed);
  const std::uint64_t chunks = chunksOf(bytes);
  std::uint64_t mine = 0;
  bool ok = true;
  for (;;) {
    const std::uint64_t index = self_->claim.fetch_add(1, std::memory_order_acq_rel) & kIndexMask;
    if (index >= chunks) {
      break;
    }
    ++mine;
    const std::uint64_t at = index * kChunkBytes;
    if (!copyWith(peer_->pid.load(std::memory_order_relaxed), false, to + at, from + at,
                  std::min(kChunkBytes, bytes - at), error)) {
      ok = false;
      break;
    }
  }
  // Closed to further claims; what the peer took before must be done before the buffer is
  // handed back (even after a failure: its copy may still be writing into it).
  const std::uint64_t taken =
      std::min(self_->claim.exchange((transfers_ << 32U) | kIndexMask, std::memory_order_acq_rel) &
                   kIndexMask,
               chunks);
  const std::uint64_t theirs = taken - mine;
  const pid_t pid = peer_->pid.load(std::memory_order_relaxed);
  for (unsigned spins = 0; self_->helped.load(std::memory_order_acquire) < theirs; ++spins) {
    if (spins % 1024 == 1023 && ::kill(pid, 0) != 0 && errno == ESRCH) {
      error = "the peer exited while it copied part of the message";
      return false;
    }
    ::sched_yield();
  }
  if (ok && self_->helpFailed.load(std::memory_order_acquire) != 0) {
    error = "the peer's part of the copy failed";
    return false;
  }
  return ok;
}

bool Link::peerNeedsHelp() const {
  const std::uint64_t claim = peer_->claim.load(std::memory_order_acquire);
  return (claim >> 32U) != 0 &&
         (claim & kIndexMask) < chunksOf(peer_->bytes.load(std::memory_order_relaxed));
}

bool Link::helpPeer(std::string& error) {
  if (self_->readsPeer.load(std::memory_order_relaxed) == 0) {
    return true;  // we cannot write into the peer: it copies every chunk itself
  }
  std::uint64_t claim = peer_->claim.load(std::memory_order_acquire);
  for (;;) {
    // The transfer's terms, read after its claim word: a claim that still succeeds below proves
    // the transfer they belong to is still open (a new one starts only once all are taken).
    const std::uint64_t from = peer_->from.load(std::memory_order_relaxed);
    const std::uint64_t to = peer_->to.load(std::memory_order_relaxed);
    const std::uint64_t bytes = peer_->bytes.load(std::memory_order_relaxed);
    const std::uint64_t index = claim & kIndexMask;
    if ((claim >> 32U) == 0 || index >= chunksOf(bytes)) {
      return true;
    }
    if (!peer_->claim.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) {
      continue;  // `claim` holds the current word now
    }
    const std::uint64_t at = index * kChunkBytes;
    // NOLINTNEXTLINE(performance-no-int-to-ptr): our own buffer's address, sent to the peer
    auto* local = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(from + at));
    const bool copied = copyWith(peer_->pid.load(std::memory_order_relaxed), true, local, to + at,
                                 std::min(kChunkBytes, bytes - at), error);
    if (!copied) {
      peer_->helpFailed.store(1, std::memory_order_relaxed);
    }
    peer_->helped.fetch_add(1, std::memory_order_release);
    if (!copied) {
      return false;
    }
    claim = peer_->claim.load(std::memory_order_acquire);
  }
}

bool Link::readPeer(std::uint64_t from, std::byte* to, std::size_t n, std::string& error) const {
  return copyWith(peer_->pid.load(std::memory_order_acquire), false, to, from, n, error);
}

}  // namespace dtrun::runtime::detail::shm
