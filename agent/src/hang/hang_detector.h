// Hang detection over the workers' progress files: which ranks stopped making progress, which
// of them are the suspects, and the stacks of every worker. The diagnosis is a pure function;
// the stack dumps run external tools (eu-stack, else gdb) with a deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "progress_file.h"
#include "report/report.h"

namespace dtrun::agent::detail {

// A running rank and what its progress file said.
struct RankProgress {
  int rank = 0;
  pid_t pid = 0;
  std::string host;
  progress::Snapshot snapshot;
};

struct HangDiagnosis {
  std::string reason;   // "no_progress" or "lagging_rank"
  std::string summary;  // "rank 1 on h is in all_reduce #7 (group sub0) since 9.1 s; ranks 0,2-3
                        // wait in ..."
  std::vector<HangRank> ranks;  // every judged rank, suspects marked
};

// Judges ranks that reported at least one operation: a hang when none of them began or ended an
// operation for `timeout`, or when one of them has been still for `timeout` longer than the most
// recent one. Suspects are, first, the ranks that report progress (a writer attached: pid set)
// but entered no operation while others wait in one, once none of them has changed (changedNs,
// which StartingRanks moves while such a rank keeps a CPU busy) for `timeout`; then the ranks
// behind the others in operation count; with equal counts, those in a different operation (or
// group) than the majority; else the one in its operation the longest. Ranks without a writer
// cannot be told from slow ones and are not judged. `nowNs` is CLOCK_MONOTONIC.
std::optional<HangDiagnosis> diagnoseHang(const std::vector<RankProgress>& ranks,
                                          std::int64_t nowNs, std::chrono::milliseconds timeout);

// How the report shows `rank` at `nowNs`: its operation (when in one), ages in seconds.
HangRank hangRankOf(const RankProgress& rank, std::int64_t nowNs, bool suspect);

// "0-4,6-7" for {0,1,2,3,4,6,7}.
std::string rankRanges(std::vector<int> ranks);

// The native stacks of every thread of `pid` from eu-stack (elfutils) or, when it is missing,
// gdb; killed after `timeout`, or as soon as `*cancelled` turns true. Says why when neither tool
// is on `pathVariable` or it failed. Blocks: the agent calls it from its dump thread only.
std::string nativeStack(pid_t pid, const std::string& pathVariable,
                        std::chrono::milliseconds timeout,
                        const std::atomic<bool>* cancelled = nullptr);

}  // namespace dtrun::agent::detail
