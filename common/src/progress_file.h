// A worker's progress, in a small file the worker writes and its agent reads: how many
// operations it started, the one it is in (name, group, bytes, since when) and its startup
// milestones. libdtrt writes it on every collective without a thread or a system call (two
// stores into shared memory); Python workers write it through python/dtrun_progress.py; the
// agent maps it and reads a consistent snapshot on its own timer. Internal to dtrun.
//
// One file per attempt and node (<attempt dir>/progress), a slot of kProgressFileSize bytes per
// local rank, the worker's at LOCAL_RANK * kProgressFileSize (DTRUN_PROGRESS_SLOT): one file
// instead of one per rank, because a file's creation is what a launch pays most for on a busy
// file system (bench/README: the floor). Slots divide a page, so each worker maps one page and no
// slot straddles two.
//
// A slot's layout (kProgressFileSize bytes, little-endian, every field naturally aligned):
//   0   u64 magic kProgressMagic ("DTRTPRG1")
//   8   u64 seq        seqlock: odd while the writer is in the middle of an update
//   16  u64 ops        operations started so far, the current one included
//   24  i64 opStartNs  CLOCK_MONOTONIC ns at which the current operation began; 0 = in none
//   32  i64 changedNs  CLOCK_MONOTONIC ns of the last begin or end
//   40  u64 bytes      payload of the current operation
//   48  i64 storeConnectedNs  CLOCK_REALTIME ns (0 = not yet)
//   56  i64 commReadyNs       CLOCK_REALTIME ns of the first communicator ready (0 = not yet)
//   64  i32 stackSignal       a signal that makes the worker print its Python stacks (0 = none)
//   68  i32 pid
//   72  char op[40]     NUL-padded, e.g. "all_reduce"
//   112 char group[48]  NUL-padded, e.g. "dtrt/tcp/world"
//   160 i32 entryTimes  set by the agent when it compares ranks' entry times (straggler
//                       detection): only then do writers fill the ring below
//   256 i64 entryNs[32] CLOCK_REALTIME ns at which operation n began, at index n % 32: the last
//                       32 operations' entry times. Realtime, because the agent compares them
//                       across hosts (NTP keeps hosts' clocks within milliseconds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dtrun::progress {

inline constexpr std::uint64_t kProgressMagic = 0x3147525054525444ULL;  // "DTRTPRG1" read as LE
inline constexpr std::size_t kProgressFileSize = 512;
inline constexpr std::size_t kEntryRingSize = 32;
inline constexpr std::size_t kOpNameSize = 40;
inline constexpr std::size_t kGroupNameSize = 48;

struct Snapshot {
  std::uint64_t ops = 0;
  std::int64_t opStartNs = 0;  // 0 = not in an operation
  std::int64_t changedNs = 0;
  std::uint64_t bytes = 0;
  std::int64_t storeConnectedNs = 0;
  std::int64_t commReadyNs = 0;
  int stackSignal = 0;
  int pid = 0;
  std::string op;
  std::string group;
  // Operation number -> CLOCK_REALTIME ns it began, the newest last: what the ring holds of the
  // last kEntryRingSize operations (empty unless the file was created with entry times on).
  std::vector<std::pair<std::uint64_t, std::int64_t>> entries;
};

std::int64_t monotonicNs();
std::int64_t realtimeNs();

// Creates (or truncates) `path` as a progress file of `slots` empty slots: each slot's magic set,
// everything else zero but the entry-times switch. False on any error (the caller names the path).
bool createProgressFile(const std::string& path, std::size_t slots, bool entryTimes = false);

// The worker's side. Thread-safe (a mutex serialises writers; the reader never blocks them).
class ProgressWriter {
 public:
  // Maps slot `slot` of `path` (created by the agent); nullopt when it cannot be opened or the
  // file holds no such slot.
  static std::optional<ProgressWriter> open(const std::string& path, std::size_t slot);
  ProgressWriter(ProgressWriter&& other) noexcept;
  ProgressWriter& operator=(ProgressWriter&&) = delete;
  ProgressWriter(const ProgressWriter&) = delete;
  ProgressWriter& operator=(const ProgressWriter&) = delete;
  ~ProgressWriter();

  void begin(const char* op, const std::string& group, std::uint64_t bytes);
  void end();
  void markStoreConnected();
  void markCommunicatorReady();  // the first call counts

 private:
  explicit ProgressWriter(unsigned char* base) : base_(base) {}
  unsigned char* base_;  // the slot, in a mapping owned (see unmapSlot)
  std::mutex mutex_;
};

// The agent's side: a read-only mapping. Not thread-safe; never blocks the writer.
class ProgressReader {
 public:
  static std::optional<ProgressReader> open(const std::string& path, std::size_t slot);
  ProgressReader(ProgressReader&& other) noexcept
      : base_(other.base_), last_(std::move(other.last_)) {
    other.base_ = nullptr;
  }
  ProgressReader& operator=(ProgressReader&&) = delete;
  ProgressReader(const ProgressReader&) = delete;
  ProgressReader& operator=(const ProgressReader&) = delete;
  ~ProgressReader();

  // A consistent snapshot. When the writer keeps the slot torn for every try, the last
  // consistent one read before (nullopt before the first): a Python writer preempted in the
  // middle of its update on a loaded machine holds the seqlock odd for a whole time slice, far
  // longer than the tries, and a rank's operation counter must not read 0 meanwhile (the live
  // view's Prometheus counter would reset). A writer that died there shows its last state.
  [[nodiscard]] std::optional<Snapshot> read() const;

 private:
  explicit ProgressReader(const unsigned char* base) : base_(base) {}
  const unsigned char* base_;             // the slot, in a mapping owned (see unmapSlot)
  mutable std::optional<Snapshot> last_;  // the last consistent read
};

}  // namespace dtrun::progress
