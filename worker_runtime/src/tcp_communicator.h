// The Tcp backend's communicator: the class, and what the files of its algorithms share
// (tcp_communicator.cpp has the overview; tcp_algorithm_choice.h picks the algorithm).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "communicator.h"
#include "shm_segment.h"
#include "tcp_algorithm_choice.h"
#include "tcp_transport.h"

namespace dtrun::runtime::detail::tcp {

// Ring and chain messages are cut into segments so a rank forwards (and reduces) the first part
// of a block while the rest is still arriving.
inline constexpr std::size_t kSegmentBytes = std::size_t{256} * 1024;

inline std::string millis(std::chrono::milliseconds timeout) {
  return std::to_string(timeout.count());
}

inline void copyBytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) {
    std::memmove(dst, src, bytes);
  }
}

inline std::byte* bytePtr(const Buffer& b) { return static_cast<std::byte*>(b.data); }

// Grow-only scratch memory, uninitialised (it is always written before it is read).
class Scratch {
 public:
  std::byte* get(std::size_t bytes) {
    if (bytes > capacity_) {
      data_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      capacity_ = bytes;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
};

class Call;

class TcpCommunicator final : public Communicator {
 public:
  explicit TcpCommunicator(const CommunicatorConfig& config);
  ~TcpCommunicator() override;
  TcpCommunicator(const TcpCommunicator&) = delete;
  TcpCommunicator& operator=(const TcpCommunicator&) = delete;
  TcpCommunicator(TcpCommunicator&&) = delete;
  TcpCommunicator& operator=(TcpCommunicator&&) = delete;

  [[nodiscard]] int rank() const override { return config_.rank; }
  [[nodiscard]] int size() const override { return config_.size; }
  [[nodiscard]] Backend backend() const override { return Backend::kTcp; }
  [[nodiscard]] std::chrono::milliseconds timeout() const override { return config_.timeout; }

  void barrier() override;
  void send(const Buffer& buffer, int dst, int tag) override;
  void recv(const Buffer& buffer, int src, int tag) override;
  std::shared_ptr<WorkState> isend(const Buffer& buffer, int dst, int tag) override;
  std::shared_ptr<WorkState> irecv(const Buffer& buffer, int src, int tag) override;
  void broadcast(const Buffer& buffer, int root) override;
  void reduce(const Buffer& buffer, int root, ReduceOp op) override;
  void allReduce(const Buffer& buffer, ReduceOp op) override;
  void allGather(const Buffer& in, const Buffer& out) override;
  void gather(const Buffer& in, const Buffer& out, int root) override;
  void scatter(const Buffer& in, const Buffer& out, int root) override;
  void reduceScatter(const Buffer& in, const Buffer& out, ReduceOp op) override;
  void allToAll(const Buffer& in, const Buffer& out) override;
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                      const std::string& groupName) override;

 private:
  friend class Call;

  void ensureUsable(const char* name) const override {
    if (!broken_.empty()) {
      throw CommError(std::string(name) + ": the group is unusable after an earlier failure (" +
                      broken_ + ")");
    }
  }
  // Records the first failure in the store, then closes every connection.
  void breakGroup(const std::string& reason);
  // `message` with the cause each peer that died without saying why recorded before it closed:
  // its abort frame may be lost.
  [[nodiscard]] std::string withRecordedCauses(std::string message) const;
  [[nodiscard]] std::string failureKey(int groupRank) const;
  [[nodiscard]] int globalRank(int r) const {
    return config_.globalRanks[static_cast<std::size_t>(r)];
  }

  // tcp_point_to_point.cpp
  void p2p(Op& op, int peer, int tag);
  std::shared_ptr<WorkState> p2pAsync(OpKind kind, const Buffer& buffer, int peer, int tag,
                                      const char* name);
  // all_reduce among `members` (group ranks; this rank is members[me]) within `call`
  // (tcp_allreduce_doubling.cpp, tcp_ring.cpp).
  void allReduceDoubling(Call& call, const std::vector<int>& members, int me, const Buffer& buffer,
                         ReduceOp op);
  void allReduceRing(Call& call, const std::vector<int>& members, int me, const Buffer& buffer,
                     ReduceOp op);
  void allReduceHierarchical(const Buffer& buffer, ReduceOp op);  // tcp_allreduce_hierarchical.cpp
  void allReduceDirect(const Buffer& buffer, ReduceOp op);        // tcp_allreduce_direct.cpp
  // Whether the direct all_reduce can run: sets its segment up at the first call (a collective
  // on every rank of a one-host group; nothing elsewhere, where it answers false at once).
  bool directReady();
  void setUpDirect();
  void warnDirect(const std::string& why);
  // DTRUN_SHM_SLOT_BYTES, or the direct all_reduce's default piece per rank.
  static std::size_t directSlotBytes();
  // tcp_ring.cpp: runs `rsSteps` reduce-scatter then `agSteps` all-gather steps of a ring over
  // `buf` among `members` (this rank is members[me]), whose block c holds elements [offsets[c],
  // offsets[c + 1]). Step s sends block (me - s + shift) to the right and receives block
  // (me - s - 1 + shift) from the left; after m - 1 reduce-scatter steps, members[i] holds the
  // full reduction of block (i + 1 + shift).
  void ring(Call& call, const std::vector<int>& members, int me, std::byte* buf,
            const std::vector<std::size_t>& offsets, int rsSteps, int agSteps, int shift,
            DataType type, ReduceOp op);
  void ring(Call& call, std::byte* buf, const std::vector<std::size_t>& offsets, int rsSteps,
            int agSteps, int shift, DataType type, ReduceOp op) {
    ring(call, world_, rank(), buf, offsets, rsSteps, agSteps, shift, type, op);
  }
  std::vector<std::size_t>& balancedOffsets(std::size_t count, int parts);
  // tcp_allgather_doubling.cpp: all_gather of `blockBytes` per rank into `out` (n blocks, this
  // rank's own already in place) by Bruck's algorithm, ceil(log2 n) steps.
  void allGatherDoubling(Call& call, std::byte* out, std::size_t blockBytes);
  std::vector<std::size_t>& balancedOffsets(std::size_t count) {
    return balancedOffsets(count, size());
  }

  const CommunicatorConfig config_;
  const AllReduceAlgo algo_;        // DTRUN_ALLREDUCE_ALGO; kAuto: by size and topology
  const AllGatherAlgo gatherAlgo_;  // DTRUN_ALLGATHER_ALGO; kAuto: by size (allGatherByDoubling)
  const std::size_t slotBytes_;     // the direct all_reduce's piece per rank (directSlotBytes())
  std::vector<int> hosts_;  // hosts_[r]: group rank r's host, numbered from 0 (set by connect())
  int linked_ = 0;          // peers over shared memory (set by connect())
  std::shared_ptr<tcp::Transport> transport_;
  std::vector<int> world_;      // 0 .. size - 1
  std::vector<int> hostRanks_;  // the group ranks on this rank's host, ascending
  std::vector<int> leaders_;    // each host's lowest group rank, by host number
  AllReduceChoice choice_;      // the all_reduce thresholds of this group's size and hosts
  enum class Direct : std::uint8_t { kUntried, kReady, kUnavailable };
  Direct direct_ = Direct::kUntried;
  std::unique_ptr<shm::Segment> segment_;  // kReady: kDirectSets x size() slots
  bool directWarned_ = false;
  std::uint64_t directEpoch_ = 0;  // steps of direct all_reduces so far: where the sets stand
  std::string broken_;             // why the group is unusable (a collective failed)
  std::uint32_t sequence_ = 0;
  // Per-call state, reused so that steady-state collectives do not allocate.
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<Op*> ringRecvs_;
  std::vector<std::size_t> offsets_;
  Scratch scratch_;      // received data waiting to be reduced
  Scratch work_;         // a copy of an input the caller's buffer must not see changed
  Scratch hostScratch_;  // the hierarchical all_reduce's in-host contributions
};

}  // namespace dtrun::runtime::detail::tcp
