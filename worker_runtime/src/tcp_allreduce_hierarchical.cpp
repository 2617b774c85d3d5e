// all_reduce across hosts, some shared (and the star on one host: the same with one host): each
// host's ranks send to its leader, which reduces in rank order; the leaders all_reduce among
// themselves (doubling or ring); each leader sends the result back to its host's ranks.
#include <algorithm>

#include "reduce.h"
#include "tcp_call.h"
#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {
namespace {

// Step ids of the hierarchical all_reduce's in-host legs (doubling and ring use low ids).
constexpr std::uint32_t kHostUpStep = 1U << 30U;
constexpr std::uint32_t kHostDownStep = (1U << 30U) + 1;

}  // namespace

void TcpCommunicator::allReduceHierarchical(const Buffer& buffer, ReduceOp op) {
  Call call(*this, "all_reduce");
  std::byte* buf = bytePtr(buffer);
  const std::size_t bytes = buffer.bytes();
  const int leader = hostRanks_.front();
  if (rank() != leader) {
    // The result comes back into buf only after the leader has all of it: the send is done.
    call.send(leader, kHostUpStep, buf, bytes);
    call.recv(leader, kHostDownStep, buf, bytes);
    call.finish();
    return;
  }
  // Reduced in rank order on the host, so every host's partial is the same on every run.
  const std::size_t others = hostRanks_.size() - 1;
  std::byte* theirs = hostScratch_.get(std::max<std::size_t>(others, 1) * bytes);
  std::vector<Op*>& fromHost = ringRecvs_;
  fromHost.assign(others, nullptr);
  for (std::size_t i = 0; i < others; ++i) {
    fromHost[i] = &call.recv(hostRanks_[i + 1], kHostUpStep, theirs + i * bytes, bytes);
  }
  for (std::size_t i = 0; i < others; ++i) {
    call.wait(*fromHost[i]);  // the next ones keep arriving while this one is reduced
    reduceInto(buf, theirs + i * bytes, buffer.count, buffer.dtype, op);
  }
  if (leaders_.size() > 1) {
    const int me =
        static_cast<int>(std::find(leaders_.begin(), leaders_.end(), rank()) - leaders_.begin());
    if (!leadersUseRing(bytes)) {
      allReduceDoubling(call, leaders_, me, buffer, op);
    } else {
      allReduceRing(call, leaders_, me, buffer, op);
    }
    call.waitAll();
  }
  for (std::size_t i = 0; i < others; ++i) {
    call.send(hostRanks_[i + 1], kHostDownStep, buf, bytes);
  }
  call.finish();
}
}  // namespace dtrun::runtime::detail::tcp
