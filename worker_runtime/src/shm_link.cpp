#include "shm_link.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>
#include <utility>

namespace dtrun::runtime::detail::shm {
namespace {

constexpr std::uint64_t kMagic = 0x314d485354524454ULL;  // "DTRTSHM1"
// Segment: a page of header (magic, capacity, then the two rings' control words), then ring 0's
// data, then ring 1's.
constexpr std::size_t kHeaderBytes = 4096;
constexpr std::size_t kControlOffset = 64;

struct SegmentHeader {
  std::uint64_t magic;
  std::uint64_t capacity;
};

static_assert(sizeof(RingControl) == 256, "four cache lines per direction");
static_assert(kControlOffset + 2 * sizeof(RingControl) <= kHeaderBytes, "controls fit the page");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "atomics in shared memory must be lock-free (address-free)");

RingControl* controlAt(void* base, int ring) {
  return std::launder(
      reinterpret_cast<RingControl*>(static_cast<std::byte*>(base) + kControlOffset +
                                     static_cast<std::size_t>(ring) * sizeof(RingControl)));
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
      txHead_(tx_->head.load(std::memory_order_relaxed)) {}

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

}  // namespace dtrun::runtime::detail::shm
