// The pipelined ring: reduce-scatter and all-gather steps over blocks cut into segments. all_reduce
// (large), reduce (large), all_gather (large; small ones: tcp_allgather_doubling.cpp) and
// reduce_scatter run on it; allGather dispatches between the two.
#include <algorithm>
#include <cstring>

#include "reduce.h"
#include "tcp_call.h"
#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {
namespace {

// Ring steps whose receives are posted ahead, so data lands in place (reduce-scatter steps
// combine it into the buffer as it arrives) instead of being buffered as unexpected.
constexpr int kRingWindow = 2;

}  // namespace

void TcpCommunicator::ring(Call& call, const std::vector<int>& members, int me, std::byte* buf,
                           const std::vector<std::size_t>& offsets, int rsSteps, int agSteps,
                           int shift, DataType type, ReduceOp op) {
  const int n = static_cast<int>(members.size());
  const int r = me;
  const int steps = rsSteps + agSteps;
  if (steps == 0) {
    return;
  }
  const std::size_t esize = elementSize(type);
  const int right = members[static_cast<std::size_t>((r + 1) % n)];
  const int left = members[static_cast<std::size_t>((r - 1 + n) % n)];
  auto blockOf = [&](int s) { return (((r - s + shift) % n) + n) % n; };
  std::size_t maxBlock = 0;
  for (int c = 0; c < n; ++c) {
    maxBlock = std::max(
        maxBlock, offsets[static_cast<std::size_t>(c) + 1] - offsets[static_cast<std::size_t>(c)]);
  }
  const std::size_t segmentElements = std::max<std::size_t>(1, kSegmentBytes / esize);
  const std::size_t segments =
      std::max<std::size_t>(1, (maxBlock + segmentElements - 1) / segmentElements);
  // Segment j of block c: elements [first, last).
  auto segment = [&](int c, std::size_t j) {
    const std::size_t begin = offsets[static_cast<std::size_t>(c)];
    const std::size_t length = offsets[static_cast<std::size_t>(c) + 1] - begin;
    return std::pair{begin + length * j / segments, begin + length * (j + 1) / segments};
  };
  const int window = std::min(steps, kRingWindow);
  auto tagOf = [&](int s, std::size_t j) {
    return static_cast<std::uint32_t>(static_cast<std::size_t>(s) * segments + j);
  };
  ringRecvs_.assign(static_cast<std::size_t>(steps) * segments, nullptr);
  auto postReceives = [&](int s) {
    const int c = blockOf(s + 1);
    for (std::size_t j = 0; j < segments; ++j) {
      const auto [first, last] = segment(c, j);
      // Reduce-scatter steps combine the block into buf as it arrives (no scratch: the block is
      // not being sent meanwhile), all-gather steps copy it.
      std::byte* dst = buf + first * esize;
      const std::size_t bytes = (last - first) * esize;
      ringRecvs_[tagOf(s, j)] = s < rsSteps
                                    ? &call.recvReduce(left, tagOf(s, j), dst, bytes, type, op)
                                    : &call.recv(left, tagOf(s, j), dst, bytes);
    }
  };
  auto postSend = [&](int s, std::size_t j) {
    const auto [first, last] = segment(blockOf(s), j);
    call.send(right, tagOf(s, j), buf + first * esize, (last - first) * esize);
  };

  for (std::size_t j = 0; j < segments; ++j) {
    postSend(0, j);
  }
  for (int s = 0; s < window; ++s) {
    postReceives(s);
  }
  for (int s = 0; s < steps; ++s) {
    for (std::size_t j = 0; j < segments; ++j) {
      call.wait(*ringRecvs_[tagOf(s, j)]);
      if (s + 1 < steps) {
        postSend(s + 1, j);  // forward what just arrived while the next segment comes in
      }
    }
    if (s + window < steps) {
      postReceives(s + window);
    }
  }
  call.waitAll();
}

std::vector<std::size_t>& TcpCommunicator::balancedOffsets(std::size_t count, int parts) {
  const auto n = static_cast<std::size_t>(parts);
  offsets_.resize(n + 1);
  for (std::size_t c = 0; c <= n; ++c) {
    offsets_[c] = count * c / n;
  }
  return offsets_;
}

void TcpCommunicator::allReduceRing(Call& call, const std::vector<int>& members, int me,
                                    const Buffer& buffer, ReduceOp op) {
  const int n = static_cast<int>(members.size());
  ring(call, members, me, bytePtr(buffer), balancedOffsets(buffer.count, n), n - 1, n - 1, 0,
       buffer.dtype, op);
}

void TcpCommunicator::allGather(const Buffer& in, const Buffer& out) {
  const int n = size();
  const std::size_t bytes = in.bytes();
  // Own block first: afterwards `in` is never read, so it may alias any part of `out`.
  copyBytes(bytePtr(out) + static_cast<std::size_t>(rank()) * bytes, in.data, bytes);
  Call call(*this, "all_gather");
  if (allGatherByDoubling(gatherAlgo_, static_cast<std::size_t>(n) * bytes, n)) {
    allGatherDoubling(call, bytePtr(out), bytes);  // tcp_allgather_doubling.cpp
  } else {
    offsets_.resize(static_cast<std::size_t>(n) + 1);
    for (std::size_t c = 0; c <= static_cast<std::size_t>(n); ++c) {
      offsets_[c] = c * in.count;
    }
    ring(call, bytePtr(out), offsets_, 0, n - 1, 0, in.dtype, ReduceOp::kSum);
  }
  call.finish();
}

void TcpCommunicator::reduceScatter(const Buffer& in, const Buffer& out, ReduceOp op) {
  const int n = size();
  const std::size_t bytes = out.bytes();
  // The ring reduces in place, and the caller's input must stay as it was.
  std::byte* work = work_.get(in.bytes());
  std::memcpy(work, in.data, in.bytes());
  {
    Call call(*this, "reduce_scatter");
    offsets_.resize(static_cast<std::size_t>(n) + 1);
    for (std::size_t c = 0; c <= static_cast<std::size_t>(n); ++c) {
      offsets_[c] = c * out.count;
    }
    ring(call, work, offsets_, n - 1, 0, -1, in.dtype, op);
    call.finish();
  }
  std::memcpy(out.data, work + static_cast<std::size_t>(rank()) * bytes, bytes);
  if (op == ReduceOp::kAvg) {
    finishAverage(out.data, out.count, out.dtype, n);
  }
}
}  // namespace dtrun::runtime::detail::tcp
