// all_gather for small messages: Bruck's algorithm, the recursive doubling of the distance, in
// ceil(log2 n) steps where the pipelined ring (tcp_ring.cpp) takes n - 1. Picked by
// allGatherByDoubling (tcp_algorithm_choice.cpp: below kAllGatherDoublingBelow bytes of output,
// measured by bench/collectives' --algo-sweep), or forced with DTRUN_ALLGATHER_ALGO=doubling.
// Why: a small all_gather costs its steps' latency, not its bytes; both move the same (n - 1)
// blocks per rank, the ring only pipelines them in segments, which pays once messages are large.
//
// After step k, rank r holds the 2^k blocks r, r + 1, ... (mod n) in place in `out`; at step k it
// sends the first min(2^k, n - 2^k) of them to rank r - 2^k and receives as many, starting at
// block r + 2^k, from rank r + 2^k. One scheme for every n: for a power of two it is exactly
// recursive doubling's steps and volumes (2^k blocks at step k; the partners differ: r -/+ 2^k
// instead of r xor 2^k), and the other sizes need no fold-in steps (all_reduce's doubling) nor a
// ring fallback: ceil(log2 n) steps for any n (3 ranks: 2, as the ring; 4: 2 against 3; 6: 3
// against 5). A range that wraps past the last block goes as two messages, so nothing is copied
// but the rank's own block (allGather does that), and each block of `out` is written once.
#include <algorithm>
#include <array>

#include "tcp_call.h"
#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {

void TcpCommunicator::allGatherDoubling(Call& call, std::byte* out, std::size_t blockBytes) {
  const int n = size();
  const int r = rank();
  // Blocks [first, first + count) mod n as at most two contiguous ranges of `out`: calls
  // post(piece, pointer, bytes) for each (piece 0, then 1 for the wrapped part).
  auto ranges = [&](int first, int count, auto&& post) {
    const int head = std::min(count, n - first);
    post(0U, out + static_cast<std::size_t>(first) * blockBytes,
         static_cast<std::size_t>(head) * blockBytes);
    if (head < count) {
      post(1U, out, static_cast<std::size_t>(count - head) * blockBytes);
    }
  };
  std::uint32_t step = 0;
  for (int distance = 1; distance < n; distance *= 2, ++step) {
    const int count = std::min(distance, n - distance);
    const int to = (r - distance + n) % n;
    const int from = (r + distance) % n;
    std::array<Op*, 2> received{};
    ranges(from, count, [&](std::uint32_t piece, std::byte* data, std::size_t bytes) {
      received.at(piece) = &call.recv(from, step * 2 + piece, data, bytes);
    });
    // The blocks sent were all received by an earlier step (or are the rank's own), and nothing
    // writes them again: the sends need no waiting until the call finishes.
    ranges(r, count, [&](std::uint32_t piece, std::byte* data, std::size_t bytes) {
      call.send(to, step * 2 + piece, data, bytes);
    });
    for (Op* op : received) {
      if (op != nullptr) {
        call.wait(*op);
      }
    }
  }
}

}  // namespace dtrun::runtime::detail::tcp
