// The Tcp backend's barrier: dissemination (zero-byte messages), ceil(log2(n)) rounds.
#include "tcp_call.h"
#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {

void TcpCommunicator::barrier() {
  const int n = size();
  Call call(*this, "barrier");
  const int r = rank();
  std::uint32_t round = 0;
  for (int distance = 1; distance < n; distance <<= 1, ++round) {
    Op& in = call.recv((r - distance + n) % n, round, nullptr, 0);
    call.send((r + distance) % n, round, nullptr, 0);
    call.wait(in);
  }
  call.finish();
}
}  // namespace dtrun::runtime::detail::tcp
