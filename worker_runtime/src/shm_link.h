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

 private:
  Link(std::unique_ptr<Segment> segment, std::size_t capacity, bool creator);

  std::unique_ptr<Segment> segment_;  // the mapping: header page, then the two rings
  std::size_t capacity_;              // per ring, a power of two
  RingControl* tx_;
  RingControl* rx_;
  std::byte* txData_;
  std::byte* rxData_;
  std::uint64_t txHead_ = 0;  // our copy of tx_->head, ahead of it by what put() copied
};

}  // namespace dtrun::runtime::detail::shm
