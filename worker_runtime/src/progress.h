// This process's progress slot (DTRUN_PROGRESS_SLOT of DTRUN_PROGRESS_FILE, created by the
// agent): every collective and point-to-point call of a ProcessGroup marks its begin and end
// there, so the agent can tell which operation each rank is in and since when. Without the
// variable nothing is recorded.
#pragma once

#include <cstdint>
#include <string>

namespace dtrun::runtime::detail {

// Maps the slot once per process (later calls do nothing) and records that the store is
// connected. Called by init().
void openProgress();
void markCommunicatorReady();

// Marks an operation as begun for its lifetime. Two relaxed stores and a clock read, no
// system call besides the vDSO clock.
class OpProgress {
 public:
  OpProgress(const char* op, const std::string& group, std::uint64_t bytes);
  ~OpProgress();
  OpProgress(const OpProgress&) = delete;
  OpProgress& operator=(const OpProgress&) = delete;
  OpProgress(OpProgress&&) = delete;
  OpProgress& operator=(OpProgress&&) = delete;
};

}  // namespace dtrun::runtime::detail
