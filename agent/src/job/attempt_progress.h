// Whether an attempt moved the job forward, and how long to wait before the next one: what the
// restart policy needs to stop a crash loop before it burns the whole --max_restarts budget.
// Pure, the file reads aside.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "progress_file.h"

namespace dtrun::agent::detail {

enum class Progress : std::uint8_t {
  kUnknown,  // nothing reports progress (no progress file has a writer, no --progress_file)
  kNone,     // the ranks report, and none got past its start
  kMade,
};

// A rank that started more operations than this got past its start: init_process_group (or
// libdtrt's communicator) and a first barrier or broadcast are the start of every script.
inline constexpr std::uint64_t kStartupOps = 2;

// The attempt's progress from its ranks' progress snapshots and, when the user names a
// checkpoint-iteration file (--progress_file), its number at the attempt's start and now: that
// file decides when it can be read at both points (a number that grew is progress).
Progress judgeProgress(const std::vector<progress::Snapshot>& ranks,
                       std::optional<long long> iterationAtStart,
                       std::optional<long long> iterationNow);

// The number in a checkpoint-iteration file (the first integer in it); nullopt when the file
// is missing or holds none.
std::optional<long long> readIteration(const std::string& path);

// The wait before restart `restartsUsed + 1`: base * 2^restartsUsed, at most `max` (0: no
// growth beyond base).
std::chrono::milliseconds restartDelay(int restartsUsed, std::chrono::milliseconds base,
                                       std::chrono::milliseconds max);

}  // namespace dtrun::agent::detail
