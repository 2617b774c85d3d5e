// gather and scatter (direct to/from the root) and all_to_all (pairwise exchange).
#include <cstring>

#include "reduce.h"
#include "tcp_call.h"
#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {

void TcpCommunicator::gather(const Buffer& in, const Buffer& out, int root) {
  const int n = size();
  const int r = rank();
  const std::size_t bytes = in.bytes();
  if (r == root) {
    copyBytes(bytePtr(out) + static_cast<std::size_t>(r) * bytes, in.data, bytes);
  }
  Call call(*this, "gather");
  if (r == root) {
    for (int q = 0; q < n; ++q) {
      if (q != r) {
        call.recv(q, 0, bytePtr(out) + static_cast<std::size_t>(q) * bytes, bytes);
      }
    }
  } else {
    call.send(root, 0, bytePtr(in), bytes);
  }
  call.finish();
}

void TcpCommunicator::scatter(const Buffer& in, const Buffer& out, int root) {
  const int n = size();
  const int r = rank();
  const std::size_t bytes = out.bytes();
  {
    Call call(*this, "scatter");
    if (r == root) {
      for (int q = 0; q < n; ++q) {
        if (q != r) {
          call.send(q, 0, bytePtr(in) + static_cast<std::size_t>(q) * bytes, bytes);
        }
      }
    } else {
      call.recv(root, 0, bytePtr(out), bytes);
    }
    call.finish();
  }
  // After the sends: `out` may alias another rank's block of `in`.
  if (r == root) {
    copyBytes(out.data, bytePtr(in) + static_cast<std::size_t>(r) * bytes, bytes);
  }
}

void TcpCommunicator::allToAll(const Buffer& in, const Buffer& out) {
  const int n = size();
  const int r = rank();
  const std::size_t total = in.bytes();
  const std::size_t block = total / static_cast<std::size_t>(n);
  const std::byte* source = bytePtr(in);
  if (overlaps(in.data, total, out.data, total)) {
    std::byte* copy = work_.get(total);
    std::memcpy(copy, in.data, total);
    source = copy;
  }
  copyBytes(bytePtr(out) + static_cast<std::size_t>(r) * block,
            source + static_cast<std::size_t>(r) * block, block);
  Call call(*this, "all_to_all");
  // Pairwise exchange: in step i, send to r + i and receive from r - i. Every message is posted
  // at once; each peer's stream still carries them in step order.
  for (int i = 1; i < n; ++i) {
    const int to = (r + i) % n;
    const int from = (r - i + n) % n;
    call.recv(from, 0, bytePtr(out) + static_cast<std::size_t>(from) * block, block);
    call.send(to, 0, source + static_cast<std::size_t>(to) * block, block);
  }
  call.finish();
}
}  // namespace dtrun::runtime::detail::tcp
