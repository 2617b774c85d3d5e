// Which algorithm a Tcp collective takes, by size and topology: the one place that chooses. The
// thresholds are in tcp_algorithm_choice.cpp, measured by bench/collectives/run.sh's algorithm
// sweep (bench/README.md); the algorithms themselves are in files of their own
// (tcp_allreduce_*.cpp, tcp_allgather_doubling.cpp, tcp_ring.cpp, tcp_broadcast.cpp,
// tcp_reduce.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtrun::runtime::detail::tcp {

enum class AllReduceAlgo : std::uint8_t { kAuto, kDoubling, kRing, kHierarchical, kDirect };

// DTRUN_ALLREDUCE_ALGO: the algorithm the user forces, kAuto (by size and topology) when unset or
// "auto". Throws ConfigError for an unknown name.
AllReduceAlgo allReduceAlgo();

// The all_reduce rule of one group of `ranks` ranks on `hosts` hosts.
class AllReduceChoice {
 public:
  AllReduceChoice() = default;
  AllReduceChoice(int ranks, std::size_t hosts);

  // Whether the direct all_reduce is wanted for `bytes` (forced, or by size); whether it can run
  // is the communicator's to find out (TcpCommunicator::directReady).
  [[nodiscard]] bool wantsDirect(AllReduceAlgo forced, std::size_t bytes) const;
  // The algorithm for `bytes`: kDirect where `direct` (wanted and ready), else the forced one, or
  // by size and topology (a forced kDirect that cannot run falls back to the latter).
  [[nodiscard]] AllReduceAlgo choose(AllReduceAlgo forced, std::size_t bytes, bool direct) const;

 private:
  int ranks_ = 0;
  std::size_t hosts_ = 0;
  std::size_t ringFrom_ = 0;    // all_reduce: ring from this many bytes, doubling below
  std::size_t starBelow_ = 0;   // one host, few ranks: the star below this many bytes
  std::size_t directFrom_ = 0;  // one host, all over shared memory: direct from this many bytes
};

enum class AllGatherAlgo : std::uint8_t { kAuto, kDoubling, kRing };

// DTRUN_ALLGATHER_ALGO: the all_gather algorithm the user forces, kAuto (allGatherByDoubling) when
// unset or "auto". Throws ConfigError for an unknown name.
AllGatherAlgo allGatherAlgo();
// all_gather of `bytes` in all (every rank's block: the output's size) among `ranks` ranks:
// Bruck's doubling (tcp_allgather_doubling.cpp) where `forced` says so or, under kAuto, below
// kAllGatherDoublingBelow; else the pipelined ring.
[[nodiscard]] bool allGatherByDoubling(AllGatherAlgo forced, std::size_t bytes, int ranks);

// The hierarchical all_reduce among the hosts' leaders (over sockets): the ring, else doubling.
[[nodiscard]] bool leadersUseRing(std::size_t bytes);
// broadcast: the binomial tree, else the pipelined chain.
[[nodiscard]] bool broadcastByTree(std::size_t bytes, int ranks);
// reduce: the binomial tree, else ring reduce-scatter with the blocks sent to the root.
[[nodiscard]] bool reduceByTree(std::size_t bytes);

}  // namespace dtrun::runtime::detail::tcp
