// The Tcp backend: our own CPU backend. Connections and framing live in tcp_setup/tcp_transport
// (shared memory between ranks of one host, shm_setup); this file sets a group up and dispatches
// all_reduce. The algorithms have a file each (tcp_allreduce_*.cpp, tcp_ring.cpp,
// tcp_broadcast.cpp, tcp_reduce.cpp, ...), chosen by size and topology in tcp_algorithm_choice.cpp:
//   all_reduce      small: recursive doubling (non-powers of two fold the extra ranks in),
//                   large: pipelined ring reduce-scatter + all-gather; up to 4 ranks on one
//                   host: a star to rank 0 below 4 MiB (2 ranks) / 512 KiB; every rank on one
//                   host over shared memory, from 4 MiB (2 ranks) / 256 KiB: "direct" through
//                   one group-wide segment (shm_segment.h; allReduceDirect); the crossovers
//                   are measured (bench/collectives: --algo-sweep; see kRingFrom*,
//                   kDirectFrom*). Ranks on several hosts, some sharing one: hierarchical
//                   (reduce to each host's leader, all_reduce among leaders, broadcast back).
//                   DTRUN_ALLREDUCE_ALGO forces one.
//   broadcast       binomial tree; large messages on 3+ ranks: pipelined chain
//   reduce          binomial tree; large: ring reduce-scatter, then the blocks go to the root
//   all_gather      small: Bruck's (recursive doubling, any n; tcp_allgather_doubling.cpp),
//                   large: pipelined ring; DTRUN_ALLGATHER_ALGO forces one
//   reduce_scatter  pipelined ring
//   gather/scatter  direct to/from the root   all_to_all       pairwise exchange
//   barrier         dissemination (zero-byte messages)
// all_reduce is bitwise identical on every rank: recursive doubling combines the two halves in
// rank order on both sides, and the ring's all-gather and the direct one copy each finished block.
#include "tcp_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "log.h"
#include "reduce.h"
#include "shm_setup.h"
#include "store_handle.h"
#include "tcp_call.h"
#include "tcp_setup.h"

namespace dtrun::runtime::detail::tcp {
namespace {

// How long a waiting caller busy-polls before sleeping: DTRUN_TCP_SPIN_US if set, else 20 us
// when every rank on this node can have a core of its own, else 0 (spinning ranks would then
// steal the cores their peers need to answer).
std::chrono::microseconds spinFor() {
  constexpr long kDefaultSpinUs = 20;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only use of the environment at group creation
  if (const char* text = std::getenv("DTRUN_TCP_SPIN_US"); text != nullptr && *text != '\0') {
    return std::chrono::microseconds(std::clamp(std::strtol(text, nullptr, 10), 0L, 1000000L));
  }
  // NOLINTNEXTLINE(concurrency-mt-unsafe): as above
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const long localRanks = local != nullptr ? std::max(1L, std::strtol(local, nullptr, 10)) : 1;
  const auto cores = static_cast<long>(std::thread::hardware_concurrency());
  return std::chrono::microseconds(cores > 0 && localRanks <= cores ? kDefaultSpinUs : 0);
}

// The group's connections: a socket to every peer, and a shared-memory link to every peer on
// this host (see shm_setup.h). hosts[r] numbers group rank r's host; `linked` counts the peers
// over shared memory.
std::shared_ptr<Transport> connect(const CommunicatorConfig& config, std::vector<int>& hosts,
                                   int& linked) {
  std::vector<UniqueFd> fds = connectMesh(config);
  shm::Topology topology = shm::connectLinks(config, fds);
  hosts = std::move(topology.host);
  linked = 0;
  for (const auto& link : topology.links) {
    linked += link ? 1 : 0;
  }
  log::runtime().debug("tcp: group '{}' rank {}: {} of {} peers over shared memory",
                       config.groupName, config.rank, linked, config.size - 1);
  return std::make_shared<Transport>(std::move(fds), std::move(topology.links), config.globalRanks,
                                     spinFor());
}

}  // namespace

TcpCommunicator::TcpCommunicator(const CommunicatorConfig& config)
    : config_(config),
      algo_(allReduceAlgo()),
      gatherAlgo_(allGatherAlgo()),
      slotBytes_(directSlotBytes()),
      transport_(connect(config, hosts_, linked_)) {
  for (int r = 0; r < config_.size; ++r) {
    world_.push_back(r);
    const int host = hosts_[static_cast<std::size_t>(r)];
    if (host == hosts_[static_cast<std::size_t>(config_.rank)]) {
      hostRanks_.push_back(r);
    }
    if (static_cast<std::size_t>(host) == leaders_.size()) {
      leaders_.push_back(r);  // hosts are numbered by first appearance: r is its first rank
    }
  }
  choice_ = AllReduceChoice(config_.size, leaders_.size());
  transport_->start();
  log::runtime().debug("tcp: group '{}' ready: rank {} of {}", config_.groupName, config_.rank,
                       config_.size);
}

TcpCommunicator::~TcpCommunicator() {
  try {
    transport_->stop();
  } catch (const std::exception& e) {
    log::runtime().warn("tcp: closing group '{}': {}", config_.groupName, e.what());
  }
}

void TcpCommunicator::allReduce(const Buffer& buffer, ReduceOp op) {
  // A forced direct one that cannot run falls back to the choice by size (directReady said why,
  // once).
  const bool direct = choice_.wantsDirect(algo_, buffer.bytes()) && directReady();
  const AllReduceAlgo algo = choice_.choose(algo_, buffer.bytes(), direct);
  if (algo == AllReduceAlgo::kDirect) {
    allReduceDirect(buffer, op);
  } else if (algo == AllReduceAlgo::kHierarchical) {
    allReduceHierarchical(buffer, op);
  } else {
    Call call(*this, "all_reduce");
    if (algo == AllReduceAlgo::kDoubling) {
      allReduceDoubling(call, world_, rank(), buffer, op);
    } else {
      allReduceRing(call, world_, rank(), buffer, op);
    }
    call.finish();
  }
  if (op == ReduceOp::kAvg) {
    finishAverage(buffer.data, buffer.count, buffer.dtype, size());
  }
}

// ---- failure --------------------------------------------------------------------------------

std::string TcpCommunicator::failureKey(int groupRank) const {
  return config_.groupName + "/tcp/failed/" + std::to_string(groupRank);
}

void TcpCommunicator::breakGroup(const std::string& reason) {
  if (broken_.empty()) {
    broken_ = reason;
    // First the record, then the closes: a peer that sees only a closed connection finds it.
    // Best effort: never queued behind another store call of this rank.
    static_cast<void>(config_.store->trySet(failureKey(rank()), reason));
  }
  transport_->abort(reason);
}

std::string TcpCommunicator::withRecordedCauses(std::string message) const {
  for (const int peer : transport_->crashedWithoutReason()) {
    const auto cause = config_.store->tryGetNow(failureKey(peer));
    if (cause && !cause->empty()) {
      message +=
          "; rank " + std::to_string(globalRank(peer)) + " had failed first (" + *cause + ")";
    }
  }
  return message;
}

// ---- groups ---------------------------------------------------------------------------------

std::unique_ptr<Communicator> TcpCommunicator::split(const std::vector<int>& ranks,
                                                     const std::string& groupName) {
  ensureUsable("new_group");
  return std::make_unique<TcpCommunicator>(subGroupConfig(config_, ranks, rank(), groupName));
}

}  // namespace dtrun::runtime::detail::tcp

namespace dtrun::runtime::detail {

std::unique_ptr<Communicator> makeTcpCommunicator(const CommunicatorConfig& config) {
  return std::make_unique<tcp::TcpCommunicator>(config);
}

}  // namespace dtrun::runtime::detail
