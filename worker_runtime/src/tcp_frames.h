// What the Tcp transport's files share (tcp_transport.cpp: set-up, posting and failure;
// tcp_transport_wait.cpp: waiting and spinning; tcp_framing.cpp: frames over sockets;
// tcp_transport_shm.cpp: frames over shared-memory rings): the frame format, the control frames,
// and landing a message's bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>

#include "reduce.h"
#include "tcp_transport.h"

namespace dtrun::runtime::detail::tcp {

inline constexpr std::size_t kHeaderBytes = sizeof(FrameHeader);
static_assert(kHeaderBytes == 16, "the frame header is two 64-bit words on the wire");

// Control frames, never a collective's tag (collective sequence numbers use 30 bits).
inline constexpr std::uint64_t kByeTag = ~std::uint64_t{0};        // orderly exit: EOF follows
inline constexpr std::uint64_t kAbortTag = ~std::uint64_t{0} - 1;  // payload: why the sender failed

// Over shm, a frame whose length has this bit carries no payload but the 8-byte address of the
// sender's buffer: the receiver reads the length's bytes from there (shm_link.h, remote reads).
inline constexpr std::uint64_t kRemoteFrameBit = std::uint64_t{1} << 63;
inline constexpr std::size_t kRemoteAddressBytes = sizeof(std::uint64_t);

// Small messages are read many per syscall into the peer's stage and copied out; the tail of a
// large payload is read straight into its destination (no copy).
inline constexpr std::size_t kStageBytes = std::size_t{64} * 1024;

inline std::string errnoText(int err) { return std::system_category().message(err); }

// Lands n payload bytes of `op`'s message at op.moved: copied, or combined into what is there.
inline void deliver(Op& op, const std::byte* src, std::size_t n) {
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

}  // namespace dtrun::runtime::detail::tcp
