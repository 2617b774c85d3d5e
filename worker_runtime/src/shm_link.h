// A shared-memory link between two ranks on one host: one file in a tmpfs directory
// ($DTRUN_SHM_DIR, default /dev/shm) mapped by both, holding two single-producer,
// single-consumer byte rings, one per direction. The Tcp backend's transport writes its framed
// stream (the same frames as on a socket) into the ring instead of a socket, so matching, control
// frames and errors stay one code path; only the bytes move differently.
//
// The rings carry no wake-ups of their own: a side about to sleep sets a flag in the ring (the
// consumer's "I sleep", the producer's "I wait for space"), and the other side, having published
// data or freed space, sees the flag and rings a doorbell (one byte on the pair's TCP socket,
// which the sleeper polls anyway: the same poll() then watches TCP peers, shm peers and the
// peer's death). A Dekker-style pair of seq_cst fences makes a lost wake-up impossible.
//
// One copy for large messages ("remote reads"): each side publishes its pid and the address of a
// canary word in the header page; a side that can read its peer's memory with
// process_vm_readv (same user, no Yama restriction: checked once, on the canary) says so there.
// A producer whose peer said so may then send, for a large message, only its address: the
// consumer copies the bytes straight from the producer's buffer into its own and counts the read
// done in the header, which completes the producer's send. Moving each byte once instead of
// twice (into the ring, out of it) is what lets a send/recv go faster than half the copy rate.
//
// Thread-safety: none beyond the atomics. The transport calls the producer methods and the
// consumer methods under its mutex; the lock-free readiness checks (hasData, hasSpace) may run
// concurrently with them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "shm_segment.h"

namespace dtrun::runtime::detail::shm {

// The control words of one direction, each on its own cache line so the producer's and the
// consumer's stores do not bounce one line between cores.
struct RingControl {
  alignas(64) std::atomic<std::uint64_t> head;  // bytes ever published (producer)
  alignas(64) std::atomic<std::uint64_t> tail;  // bytes ever consumed (consumer)
  alignas(64) std::atomic<std::uint32_t> consumerSleeping;
  alignas(64) std::atomic<std::uint32_t> producerWaiting;
};

// One side's part of the header page (the creator's is side 0).
struct SideInfo {
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint32_t> readsPeer;  // 1: this side read its peer's canary (remote reads work)
  std::atomic<std::uint64_t> canary;     // the address of this side's canary word
  alignas(64) std::atomic<std::uint64_t> readsDone;  // remote reads this side finished
  // This side's current shared read (see Link::readShared): what goes where, then who copies
  // which chunk: (transfer number << 32) | the next chunk to take; the peer adds to `helped` for
  // each chunk it copied, and sets `helpFailed` when one of its copies failed.
  alignas(64) std::atomic<std::uint64_t> claim;
  std::atomic<std::uint64_t> helped;
  std::atomic<std::uint64_t> helpFailed;
  std::atomic<std::uint64_t> from;
  std::atomic<std::uint64_t> to;
  std::atomic<std::uint64_t> bytes;
};

class Link {
 public:
  // Creates, sizes (fallocate: a full tmpfs fails here, not with SIGBUS later) and maps a new
  // segment at `path` with two rings of `capacity` bytes (a power of two). nullptr with `error`
  // set when any step fails. The creator's tx ring is ring 0.
  static std::unique_ptr<Link> create(const std::string& path, std::size_t capacity,
                                      std::string& error);
  // Maps the segment another rank created at `path` (its rings reversed).
  static std::unique_ptr<Link> open(const std::string& path, std::string& error);

  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  Link(Link&&) = delete;
  Link& operator=(Link&&) = delete;

  // ---- producer (our tx ring) ----
  [[nodiscard]] std::size_t freeBytes() const;
  // Copies up to n bytes into the ring (not yet visible); returns how many fit.
  std::size_t put(const std::byte* src, std::size_t n);
  // Makes what put() copied visible. True when the consumer sleeps and must be woken (the flag
  // is taken: one doorbell per sleep).
  bool publish();

  // ---- consumer (our rx ring) ----
  // The contiguous run of published bytes at the tail (empty when none).
  [[nodiscard]] std::span<const std::byte> readable() const;
  // Frees n bytes at the tail. True when the producer waits for space and must be woken (once
  // at least half the ring is free).
  bool release(std::size_t n);

  // ---- sleeping (the driver, before and after a blocking poll) ----
  // Announces that this side will sleep; returns true when there is work after all (data to
  // read, or space for `wantSpace` pending sends) and the caller must not sleep.
  bool prepareSleep(bool wantSpace);
  void endSleep();
  // Lock-free readiness checks for the driver's spin (hasSpace: at least half the ring free).
  [[nodiscard]] bool hasData() const;
  [[nodiscard]] bool hasSpace() const;

  [[nodiscard]] std::size_t capacity() const { return capacity_; }

  // ---- remote reads (one copy) ----
  // Messages of at least `bytes` may go as remote reads once the peer can read us (0: never).
  void setOneCopyBytes(std::size_t bytes) { oneCopyBytes_ = bytes; }
  // Tries a remote read of the peer's canary; on success tells the peer it may send addresses.
  // Call once the peer's side is published (it maps the segment before it answers).
  void probePeer();
  // Whether a message of n bytes goes as a remote read.
  [[nodiscard]] bool readsRemotely(std::size_t n) const {
    return oneCopyBytes_ != 0 && n >= oneCopyBytes_ &&
           peer_->readsPeer.load(std::memory_order_acquire) != 0;
  }
  // Consumer: copies n bytes at the peer's address `from` into `to`; false with `error` set.
  bool readPeer(std::uint64_t from, std::byte* to, std::size_t n, std::string& error) const;
  // Consumer, for a read big enough to share (sharesRead): the peer, which waits for it, may copy
  // some of the chunks itself (helpPeer) while this side copies the others, so two cores move
  // the message. openShared() publishes it (then wake the peer), finishShared() copies chunks
  // until none is left and waits for those the peer took. False with `error` set when a copy
  // failed, or the peer died holding a chunk.
  [[nodiscard]] bool sharesRead(std::size_t n) const;
  void openShared(std::uint64_t from, std::byte* to, std::size_t n);
  bool finishShared(std::string& error);
  // Producer: copies chunks of the peer's open shared read (of our own buffer) while any is
  // left; false with `error` set when a copy failed (the peer is told too).
  bool helpPeer(std::string& error);
  // Whether the peer has a shared read open with chunks nobody took yet (lock-free).
  [[nodiscard]] bool peerNeedsHelp() const;
  // Consumer: one remote read is done (the peer's send completes).
  void noteReadDone() { self_->readsDone.fetch_add(1, std::memory_order_release); }
  // Producer: remote reads of our messages the peer finished so far.
  [[nodiscard]] std::uint64_t peerReadsDone() const {
    return peer_->readsDone.load(std::memory_order_acquire);
  }

 private:
  Link(std::unique_ptr<Segment> segment, std::size_t capacity, bool creator);

  std::unique_ptr<Segment> segment_;  // the mapping: header page, then the two rings
  std::size_t capacity_;              // per ring, a power of two
  RingControl* tx_;
  RingControl* rx_;
  std::byte* txData_;
  std::byte* rxData_;
  std::uint64_t txHead_ = 0;  // our copy of tx_->head, ahead of it by what put() copied
  SideInfo* self_;
  SideInfo* peer_;
  std::size_t oneCopyBytes_ = 0;
  std::uint64_t canary_;         // what the peer's probe must read at our published address
  std::uint64_t transfers_ = 0;  // shared reads opened (the claim word's high half)
};

}  // namespace dtrun::runtime::detail::shm
