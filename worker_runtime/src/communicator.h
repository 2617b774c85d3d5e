// The interface every backend implements, behind ProcessGroup. ProcessGroup has already checked
// the arguments (ranks in range, buffer sizes consistent, CPU vs CUDA) before calling in, and has
// answered the CPU collectives that move no data itself (a group of one, an empty buffer): the
// CPU backends (tcp, gloo) see size() > 1 and a non-empty buffer in every collective and barrier.
// NCCL sees every call (a group of one still copies on the device, in stream order).
// Implementations throw TimeoutError / CommError naming the operation and peer ranks.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "dtrun/runtime.h"

#include "store_handle.h"

namespace dtrun::runtime::detail {

// Completion of an isend/irecv.
class WorkState {
 public:
  WorkState() = default;
  WorkState(const WorkState&) = delete;
  WorkState& operator=(const WorkState&) = delete;
  WorkState(WorkState&&) = delete;
  WorkState& operator=(WorkState&&) = delete;
  virtual ~WorkState() = default;
  // Blocks until done or `timeout` passed (TimeoutError); rethrows the operation's error.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  [[nodiscard]] virtual bool isCompleted() const = 0;
};

struct CommunicatorConfig {
  std::shared_ptr<StoreHandle> store;  // already prefixed with the attempt's prefix
  std::string groupName;               // unique per group within the attempt: store key prefix
  int rank = 0;                        // in this group
  int size = 1;
  std::vector<int> globalRanks;  // globalRanks[r] = job rank of group rank r (for messages)
  std::chrono::milliseconds timeout{300000};
  int cudaDevice = 0;  // Nccl only
};

class Communicator {
 public:
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  Communicator(Communicator&&) = delete;
  Communicator& operator=(Communicator&&) = delete;
  virtual ~Communicator() = default;

  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int size() const = 0;
  [[nodiscard]] virtual Backend backend() const = 0;
  [[nodiscard]] virtual std::chrono::milliseconds timeout() const = 0;
  // Throws CommError naming `op` when an earlier failure made the group unusable.
  virtual void ensureUsable(const char* op) const = 0;

  virtual void barrier() = 0;
  virtual void send(const Buffer& buffer, int dst, int tag) = 0;
  virtual void recv(const Buffer& buffer, int src, int tag) = 0;
  virtual std::shared_ptr<WorkState> isend(const Buffer& buffer, int dst, int tag) = 0;
  virtual std::shared_ptr<WorkState> irecv(const Buffer& buffer, int src, int tag) = 0;
  virtual void broadcast(const Buffer& buffer, int root) = 0;
  virtual void reduce(const Buffer& buffer, int root, ReduceOp op) = 0;
  virtual void allReduce(const Buffer& buffer, ReduceOp op) = 0;
  virtual void allGather(const Buffer& in, const Buffer& out) = 0;
  virtual void gather(const Buffer& in, const Buffer& out, int root) = 0;
  virtual void scatter(const Buffer& in, const Buffer& out, int root) = 0;
  virtual void reduceScatter(const Buffer& in, const Buffer& out, ReduceOp op) = 0;
  virtual void allToAll(const Buffer& in, const Buffer& out) = 0;
  // Called by the members of `ranks` only (group ranks, sorted by new rank), all with the same
  // list and name; returns the new group's communicator of the same backend.
  virtual std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                              const std::string& groupName) = 0;
};

// The configuration of the sub-group of `ranks` (ranks of `parent`, the new group's order) named
// `name` within `parent`, as seen by the parent's rank `self` (a member): one place for every
// backend's split().
CommunicatorConfig subGroupConfig(const CommunicatorConfig& parent, const std::vector<int>& ranks,
                                  int self, const std::string& name);

// Whether two byte ranges share a byte (an empty range overlaps nothing).
bool overlaps(const void* a, std::size_t aBytes, const void* b, std::size_t bBytes);

// "rank 3" or "ranks 0, 2, 5", for messages.
std::string rankList(const std::vector<int>& ranks);

std::unique_ptr<Communicator> makeTcpCommunicator(const CommunicatorConfig& config);
std::unique_ptr<Communicator> makeGlooCommunicator(const CommunicatorConfig& config);
// Defined only where the NCCL backend is built (DTRUN_HAVE_NCCL).
std::unique_ptr<Communicator> makeNcclCommunicator(const CommunicatorConfig& config);

}  // namespace dtrun::runtime::detail
