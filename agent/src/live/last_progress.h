// Each rank's last consistent progress read, for what the live view shows. A read torn on every
// try (a Python writer preempted in the middle of its update on a loaded machine holds the seqlock
// odd for a whole time slice, far longer than the reader's tries) shows the read before it, so
// a rank's operation counter never drops to 0 for one sample: Prometheus would take that for a
// counter reset, and a query for ranks with operations above 0 missed the rank.
#pragma once

#include <iterator>
#include <map>
#include <optional>
#include <utility>

#include <sys/types.h>

#include "progress_file.h"

namespace dtrun::agent::detail {

class LastProgress {
 public:
  // `reader`'s snapshot now, or the last one read for `pid` when this read is torn.
  std::optional<progress::Snapshot> read(pid_t pid, const progress::ProgressReader& reader) {
    Entry& entry = last_[pid];
    entry.seen = true;
    if (auto snapshot = reader.read()) {
      entry.snapshot = std::move(snapshot);
    }
    return entry.snapshot;
  }
  // Forgets processes not read since the previous call (exited workers).
  void forgetUnseen() {
    for (auto it = last_.begin(); it != last_.end();) {
      it = it->second.seen ? std::next(it) : last_.erase(it);
    }
    for (auto& [pid, entry] : last_) {
      entry.seen = false;
    }
  }

 private:
  struct Entry {
    std::optional<progress::Snapshot> snapshot;
    bool seen = true;
  };
  std::map<pid_t, Entry> last_;
};

}  // namespace dtrun::agent::detail
