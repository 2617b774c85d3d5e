// reduce: a binomial tree for small messages, ring reduce-scatter with the blocks sent to the root
// for large ones (tcp_algorithm_choice.h: reduceByTree).
#include <algorithm>
#include <array>
#include <cstring>

#include "reduce.h"
#include "tcp_call.h"
#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {

void TcpCommunicator::reduce(const Buffer& buffer, int root, ReduceOp op) {
  const int n = size();
  const int r = rank();
  const std::size_t bytes = buffer.bytes();
  // Only the root's buffer receives the result; the others' stay as they were.
  std::byte* acc = bytePtr(buffer);
  if (r != root) {
    acc = work_.get(bytes);
    std::memcpy(acc, buffer.data, bytes);
  }
  {
    Call call(*this, "reduce");
    if (reduceByTree(bytes)) {
      // Binomial tree towards the root; all the children's receives are posted at once.
      const int vr = (r - root + n) % n;
      auto real = [&](int v) { return (v + root) % n; };
      std::array<int, 32> children{};
      std::size_t childCount = 0;
      int parent = -1;
      for (int mask = 1; mask < n; mask <<= 1) {
        if ((vr & mask) != 0) {
          parent = real(vr - mask);
          break;
        }
        if (vr + mask < n) {
          children[childCount++] = real(vr + mask);
        }
      }
      std::byte* theirs = scratch_.get(std::max<std::size_t>(childCount, 1) * bytes);
      std::array<Op*, 32> fromChild{};
      for (std::size_t i = 0; i < childCount; ++i) {
        fromChild[i] = &call.recv(children[i], 0, theirs + i * bytes, bytes);
      }
      for (std::size_t i = 0; i < childCount; ++i) {
        call.wait(*fromChild[i]);
        reduceInto(acc, theirs + i * bytes, buffer.count, buffer.dtype, op);
      }
      if (parent >= 0) {
        call.send(parent, 0, acc, bytes);
      }
    } else {
      // Ring reduce-scatter leaves block r fully reduced on rank r; the blocks then go to the
      // root. Bandwidth-optimal: every rank sends about one buffer in all.
      const std::vector<std::size_t>& offsets = balancedOffsets(buffer.count);
      ring(call, acc, offsets, n - 1, 0, -1, buffer.dtype, op);
      const std::size_t esize = elementSize(buffer.dtype);
      auto blockOf = [&](int c) {
        const std::size_t first = offsets[static_cast<std::size_t>(c)];
        return std::pair{first * esize, (offsets[static_cast<std::size_t>(c) + 1] - first) * esize};
      };
      if (r == root) {
        for (int q = 0; q < n; ++q) {
          if (q != root) {
            const auto [offset, length] = blockOf(q);
            call.recv(q, 1U << 31, acc + offset, length);
          }
        }
      } else {
        const auto [offset, length] = blockOf(r);
        call.send(root, 1U << 31, acc + offset, length);
      }
    }
    call.finish();
  }
  if (r == root && op == ReduceOp::kAvg) {
    finishAverage(buffer.data, buffer.count, buffer.dtype, n);
  }
}
}  // namespace dtrun::runtime::detail::tcp
