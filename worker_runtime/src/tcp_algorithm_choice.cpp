#include "tcp_algorithm_choice.h"

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "dtrun/runtime.h"

namespace dtrun::runtime::detail::tcp {
namespace {

// The thresholds that pick an algorithm, in one table: measured with bench/collectives/run.sh's
// algorithm sweep (bench/README.md), re-measure there before moving one.
constexpr std::size_t kSmallBytes =
    std::size_t{64} * 1024;  // binomial trees (broadcast, reduce) up to this
// all_reduce thresholds, from bench/collectives/run.sh's algorithm sweep (bench/README.md; 2 and
// 4 ranks on this 2-core machine). One host, at most 4 ranks: the star (every rank sends to
// rank 0, which reduces in rank order and sends the result back: the hierarchical algorithm with
// one host) beat doubling and ring at every size up to 2 MiB at 2 ranks and up to 256 KiB at 4
// (medians of 3 sweeps; single sweeps put the crossovers between 256 KiB and 8 MiB): two steps,
// and one rank reduces instead of all of them, which is what counts when ranks share few cores.
// The ring wins above (from 4 MiB at 2 ranks, 512 KiB at 4).
constexpr std::size_t kRingFromOneHostPair = std::size_t{4} << 20U;
constexpr std::size_t kRingFromOneHost = std::size_t{512} << 10U;
constexpr int kStarMaxRanks = 4;
// More ranks on one host (not measured here: flat doubling/ring), and between hosts: the ring
// beat doubling from 64 KiB (shm, 4 ranks) to 512 KiB (shm, 2 ranks), from 128-256 KiB over
// sockets. A star across hosts would funnel n - 1 buffers through one NIC: never used there.
constexpr std::size_t kRingFromShm = std::size_t{64} * 1024;
constexpr std::size_t kRingFromTcp = std::size_t{128} * 1024;
// The direct all_reduce (every rank on one host, all over shared memory), from the same sweep
// (medians of 3): it beat every other algorithm at every size from 4 MiB at 2 ranks (below, the
// star and doubling are as fast: one exchange) and from 256 KiB at 4 ranks (below, the star's
// two steps win). 3 ranks, and more than 4 (not measured here), take the 4-rank threshold.
constexpr std::size_t kDirectFromPair = std::size_t{4} << 20U;
constexpr std::size_t kDirectFrom = std::size_t{256} << 10U;
// all_gather, by the output's size (every rank's block): Bruck's doubling below, the ring from
// here. The algorithm sweep's all_gather part (shm, medians of 3 interleaved repeats, load
// average about 12 on 2 cores: noisy, single figures moved by 20-40%): at 4 ranks doubling won
// 4-16 KiB (215 vs 238, 185 vs 230, 228 vs 259 us: 2 steps against 3), the ring every size from
// 32 KiB to 2 MiB (181 vs 226 us at 32 KiB; 0.77-0.89x of doubling's time: its receives are
// posted ahead and it forwards in segments); at 2 ranks both are one exchange, within noise
// below 32 KiB (ring ahead 32-512 KiB, doubling from 1 MiB: not taken, 4-rank rule kept).
// Sockets and other rank counts are not measured here: they take the same threshold.
constexpr std::size_t kAllGatherDoublingBelow = std::size_t{32} << 10U;

}  // namespace

namespace {

// An algorithm forced by the environment variable `variable`: "" or "auto" is kAuto, a name in
// `names` its algorithm; anything else is refused with `accepted`.
template <typename Algo>
Algo forcedAlgo(const char* variable,
                std::initializer_list<std::pair<std::string_view, Algo>> names,
                const char* accepted) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only use of the environment at group creation
  const char* text = std::getenv(variable);
  const std::string name = text != nullptr ? text : "";
  if (name.empty() || name == "auto") {
    return Algo::kAuto;
  }
  for (const auto& [known, algo] : names) {
    if (name == known) {
      return algo;
    }
  }
  throw ConfigError(std::string(variable) + "='" + name + "': expected " + accepted);
}

}  // namespace

AllReduceAlgo allReduceAlgo() {
  return forcedAlgo<AllReduceAlgo>("DTRUN_ALLREDUCE_ALGO",
                                   {{"doubling", AllReduceAlgo::kDoubling},
                                    {"ring", AllReduceAlgo::kRing},
                                    {"hier", AllReduceAlgo::kHierarchical},
                                    {"direct", AllReduceAlgo::kDirect}},
                                   "auto (by size and topology), doubling, ring, hier or direct");
}

AllGatherAlgo allGatherAlgo() {
  return forcedAlgo<AllGatherAlgo>(
      "DTRUN_ALLGATHER_ALGO",
      {{"doubling", AllGatherAlgo::kDoubling}, {"ring", AllGatherAlgo::kRing}},
      "auto (by size), doubling or ring");
}

bool allGatherByDoubling(AllGatherAlgo forced, std::size_t bytes, int ranks) {
  if (forced != AllGatherAlgo::kAuto) {
    return forced == AllGatherAlgo::kDoubling;
  }
  return ranks > 1 && bytes < kAllGatherDoublingBelow;
}

AllReduceChoice::AllReduceChoice(int ranks, std::size_t hosts)
    : ranks_(ranks),
      hosts_(hosts),
      // Single-host groups use shared memory throughout (unless it is unavailable or off, which
      // the socket threshold then covers too: the two are measured within a few KiB).
      ringFrom_(hosts == 1 ? kRingFromShm : kRingFromTcp),
      starBelow_(hosts > 1 || ranks > kStarMaxRanks ? 0
                 : ranks == 2                       ? kRingFromOneHostPair
                                                    : kRingFromOneHost),
      directFrom_(ranks == 2 ? kDirectFromPair : kDirectFrom) {}

bool AllReduceChoice::wantsDirect(AllReduceAlgo forced, std::size_t bytes) const {
  return forced == AllReduceAlgo::kDirect ||
         (forced == AllReduceAlgo::kAuto && bytes >= directFrom_);
}

AllReduceAlgo AllReduceChoice::choose(AllReduceAlgo forced, std::size_t bytes, bool direct) const {
  if (direct) {
    return AllReduceAlgo::kDirect;
  }
  if (forced != AllReduceAlgo::kAuto && forced != AllReduceAlgo::kDirect) {
    return forced;
  }
  // Across hosts with some sharing one: the in-host legs go through shared memory, and only
  // one rank per host crosses the network.
  const bool hierarchical =
      (hosts_ > 1 && hosts_ < static_cast<std::size_t>(ranks_)) || bytes < starBelow_;
  return hierarchical        ? AllReduceAlgo::kHierarchical
         : bytes < ringFrom_ ? AllReduceAlgo::kDoubling
                             : AllReduceAlgo::kRing;
}

bool leadersUseRing(std::size_t bytes) { return bytes >= kRingFromTcp; }

bool broadcastByTree(std::size_t bytes, int ranks) { return bytes <= kSmallBytes || ranks <= 2; }

bool reduceByTree(std::size_t bytes) { return bytes <= kSmallBytes; }

}  // namespace dtrun::runtime::detail::tcp
