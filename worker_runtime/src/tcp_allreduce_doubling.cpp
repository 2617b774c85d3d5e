// all_reduce by recursive doubling (small messages): log2(n) exchanges of the whole buffer;
// non-powers of two fold the extra ranks in first and hand them the result at the end.
#include <bit>
#include <cstring>

#include "reduce.h"
#include "tcp_call.h"
#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {
namespace {

// Step ids of recursive doubling's fold-in and fold-out messages (doubling steps are 1..31).
constexpr std::uint32_t kFoldInStep = 0;
constexpr std::uint32_t kFoldOutStep = 32;

}  // namespace

void TcpCommunicator::allReduceDoubling(Call& call, const std::vector<int>& members, int me,
                                        const Buffer& buffer, ReduceOp op) {
  const int n = static_cast<int>(members.size());
  const int r = me;
  auto real = [&](int index) { return members[static_cast<std::size_t>(index)]; };
  std::byte* buf = bytePtr(buffer);
  const std::size_t bytes = buffer.bytes();
  std::byte* theirs = scratch_.get(bytes);
  // Both partners compute op(lower half, upper half), in that order, so every rank ends with
  // the same bits even where op(a, b) and op(b, a) differ (NaN payloads, -0 vs +0).
  auto combine = [&](bool mineIsLower) {
    if (mineIsLower) {
      reduceInto(buf, theirs, buffer.count, buffer.dtype, op);
    } else {
      reduceInto(theirs, buf, buffer.count, buffer.dtype, op);
      std::memcpy(buf, theirs, bytes);
    }
  };
  // With n = 2^k + rem, the first 2 * rem ranks pair up: the even one hands its data to the
  // odd one and sits out the doubling, then gets the result back.
  const int pof2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int rem = n - pof2;
  int newRank = r - rem;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      call.wait(call.send(real(r + 1), kFoldInStep, buf, bytes));
      newRank = -1;
    } else {
      call.wait(call.recv(real(r - 1), kFoldInStep, theirs, bytes));
      combine(false);
      newRank = r / 2;
    }
  }
  if (newRank >= 0) {
    std::uint32_t step = 1;
    for (int mask = 1; mask < pof2; mask <<= 1, ++step) {
      const int newPeer = newRank ^ mask;
      const int peer = real(newPeer < rem ? newPeer * 2 + 1 : newPeer + rem);
      Op& in = call.recv(peer, step, theirs, bytes);
      Op& out = call.send(peer, step, buf, bytes);
      call.wait(in);
      call.wait(out);  // buf is about to change: the send must have left it
      combine(newRank < newPeer);
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      call.send(real(r - 1), kFoldOutStep, buf, bytes);
    } else {
      call.wait(call.recv(real(r + 1), kFoldOutStep, buf, bytes));
    }
  }
}
}  // namespace dtrun::runtime::detail::tcp
