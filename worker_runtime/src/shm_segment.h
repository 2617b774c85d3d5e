// A shared-memory segment for a whole Tcp-backend group on one host: the "direct" all_reduce's
// slots (tcp_allreduce_direct.cpp). Group rank 0 creates it in $DTRUN_SHM_DIR (default /dev/shm)
// and sends its path over the group's own messages; the others map it and answer; rank 0 then
// unlinks it, so a crash later leaves nothing behind (as for the pairs' rings, shm_setup.h).
// Plain memory, no control words: who may read or write which slot is ordered by the group's
// messages (a message's arrival happens after everything its sender wrote before sending it).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace dtrun::runtime::detail::shm {

class Segment {
 public:
  // Creates, sizes (fallocate: a full tmpfs fails here, not with SIGBUS later) and maps a new
  // segment of `bytes` at `path`. nullptr with `error` set when any step fails (nothing is left
  // at `path` then).
  static std::unique_ptr<Segment> create(const std::string& path, std::size_t bytes,
                                         std::string& error);
  // Maps the segment another rank created at `path`; it must hold exactly `bytes` (0: whatever
  // it holds, at least `minBytes`; bytes() says how much).
  static std::unique_ptr<Segment> open(const std::string& path, std::size_t bytes,
                                       std::string& error, std::size_t minBytes = 1);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  Segment(Segment&&) = delete;
  Segment& operator=(Segment&&) = delete;

  [[nodiscard]] std::byte* data() const { return base_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  Segment(std::byte* base, std::size_t bytes) : base_(base), bytes_(bytes) {}

  std::byte* base_;
  std::size_t bytes_;
};

// A shared-memory size from environment variable `name`: a power of two from 64 KiB to 1 GiB
// (ConfigError naming the variable otherwise), or `fallback` when it is unset or empty.
std::size_t bytesFromEnv(const char* name, std::size_t fallback);

// The bytes of one rank's slot: DTRUN_SHM_SLOT_BYTES if set, else `fallback`.
inline std::size_t slotBytes(std::size_t fallback) {
  return bytesFromEnv("DTRUN_SHM_SLOT_BYTES", fallback);
}

}  // namespace dtrun::runtime::detail::shm
