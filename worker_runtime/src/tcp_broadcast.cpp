// broadcast: a binomial tree for small messages (or 2 ranks), a pipelined chain for large ones
// (tcp_algorithm_choice.h: broadcastByTree).
#include "tcp_call.h"
#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {

void TcpCommunicator::broadcast(const Buffer& buffer, int root) {
  const int n = size();
  Call call(*this, "broadcast");
  const int vr = (rank() - root + n) % n;  // rank relative to the root
  auto real = [&](int v) { return (v + root) % n; };
  std::byte* buf = bytePtr(buffer);
  const std::size_t bytes = buffer.bytes();
  if (broadcastByTree(bytes, n)) {
    // Binomial tree: receive from the parent, then send to the children, farthest first.
    int mask = 1;
    while (mask < n) {
      if ((vr & mask) != 0) {
        call.wait(call.recv(real(vr - mask), 0, buf, bytes));
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (vr + mask < n) {
        call.send(real(vr + mask), 0, buf, bytes);
      }
    }
  } else {
    // Pipelined chain: each rank forwards a segment as soon as it has it, so the time is about
    // one transfer of the buffer, not log2(n) of them.
    const std::size_t segments = (bytes + kSegmentBytes - 1) / kSegmentBytes;
    auto range = [&](std::size_t j) {
      return std::pair{bytes * j / segments, bytes * (j + 1) / segments};
    };
    ringRecvs_.assign(segments, nullptr);
    if (vr > 0) {
      for (std::size_t j = 0; j < segments; ++j) {
        const auto [first, last] = range(j);
        ringRecvs_[j] =
            &call.recv(real(vr - 1), static_cast<std::uint32_t>(j), buf + first, last - first);
      }
    }
    for (std::size_t j = 0; j < segments; ++j) {
      if (vr > 0) {
        call.wait(*ringRecvs_[j]);
      }
      if (vr + 1 < n) {
        const auto [first, last] = range(j);
        call.send(real(vr + 1), static_cast<std::uint32_t>(j), buf + first, last - first);
      }
    }
  }
  call.finish();
}
}  // namespace dtrun::runtime::detail::tcp
