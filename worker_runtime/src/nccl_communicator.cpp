// The Nccl backend: collectives and point-to-point on CUDA buffers through NCCL (>= 2.14).
//
// Hangs become errors (STYLE.md §3.10): the communicator is non-blocking (config.blocking = 0),
// every call that NCCL answers with ncclInProgress is polled with ncclCommGetAsyncError until a
// deadline, and completion is awaited by polling cudaStreamQuery/cudaEventQuery, never with
// cudaStreamSynchronize. On a timeout or an NCCL error the communicator is aborted
// (ncclCommAbort) and the group is unusable afterwards, as with the other backends.
//
// Threading: one thread at a time per communicator (see ProcessGroup). The CUDA device is made
// current for every call and restored afterwards.
//
// nccl_core.h: the communicator and its stream (nccl_setup.cpp, nccl_core.cpp); this file: the
// collectives and point-to-point on it.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "dtrun/runtime.h"

#include "communicator.h"
#include "nccl_core.h"
#include "store_handle.h"

namespace dtrun::runtime::detail {
namespace {

using nccl::checkCuda;
using nccl::Clock;
using nccl::DeviceGuard;
using nccl::NcclCore;
using nccl::toNccl;

// An isend/irecv: an event recorded on the communicator's stream after the operation.
class NcclWork final : public WorkState {
 public:
  NcclWork(std::shared_ptr<NcclCore> core, const char* op) : core_(std::move(core)), op_(op) {
    const DeviceGuard guard(core_->device(), op);
    checkCuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming),
              std::string(op) + ": cudaEventCreateWithFlags");
  }
  ~NcclWork() override {
    if (event_ != nullptr) {
      static_cast<void>(cudaEventDestroy(event_));
    }
  }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;
  NcclWork(NcclWork&&) = delete;
  NcclWork& operator=(NcclWork&&) = delete;

  [[nodiscard]] cudaEvent_t event() const { return event_; }

  void wait(std::chrono::milliseconds timeout) override {
    if (done_) {
      return;
    }
    const auto limit = timeout.count() > 0 ? timeout : core_->timeout();
    core_->waitDone(op_, Clock::now() + limit, event_);
    done_ = true;
  }

  [[nodiscard]] bool isCompleted() const override {
    if (done_ || core_->comm() == nullptr) {
      return true;  // finished, or failed: wait() reports which
    }
    return cudaEventQuery(event_) != cudaErrorNotReady;
  }

 private:
  std::shared_ptr<NcclCore> core_;
  const char* op_;  // a string literal
  cudaEvent_t event_ = nullptr;
  bool done_ = false;
};

// Runs ncclSend/ncclRecv calls as one group; returns the first error (ncclGroupEnd is always
// called so NCCL's group state stays balanced).
template <typename Body>
ncclResult_t grouped(Body&& body) {
  ncclResult_t first = ncclGroupStart();
  if (first != ncclSuccess) {
    return first;
  }
  first = std::forward<Body>(body)();
  const ncclResult_t end = ncclGroupEnd();
  return first != ncclSuccess && first != ncclInProgress ? first : end;
}

char* elementAt(const Buffer& b, std::size_t elementOffset) {
  return static_cast<char*>(b.data) + elementOffset * elementSize(b.dtype);
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclCore> core, std::shared_ptr<StoreHandle> store)
      : core_(std::move(core)), store_(std::move(store)) {}

  [[nodiscard]] int rank() const override { return core_->rank(); }
  [[nodiscard]] int size() const override { return core_->size(); }
  [[nodiscard]] Backend backend() const override { return Backend::kNccl; }
  [[nodiscard]] std::chrono::milliseconds timeout() const override { return core_->timeout(); }
  void ensureUsable(const char* op) const override { core_->ensureUsable(op); }

  void barrier() override {
    core_->run("barrier", [&] {
      return ncclAllReduce(core_->scratch(), core_->scratch(), 1, ncclFloat32, ncclSum,
                           core_->comm(), core_->stream());
    });
  }

  // NCCL has no tags: messages between two ranks match in the order they were posted.
  void send(const Buffer& buffer, int dst, int /*tag*/) override {
    core_->checkBuffer(buffer, "send");
    core_->run("send", [&] {
      return ncclSend(buffer.data, buffer.count, toNccl(buffer.dtype), dst, core_->comm(),
                      core_->stream());
    });
  }

  void recv(const Buffer& buffer, int src, int /*tag*/) override {
    core_->checkBuffer(buffer, "recv");
    core_->run("recv", [&] {
      return ncclRecv(buffer.data, buffer.count, toNccl(buffer.dtype), src, core_->comm(),
                      core_->stream());
    });
  }

  std::shared_ptr<WorkState> isend(const Buffer& buffer, int dst, int /*tag*/) override {
    core_->checkBuffer(buffer, "isend");
    auto work = std::make_shared<NcclWork>(core_, "isend");
    core_->run(
        "isend",
        [&] {
          return ncclSend(buffer.data, buffer.count, toNccl(buffer.dtype), dst, core_->comm(),
                          core_->stream());
        },
        work->event());
    return work;
  }

  std::shared_ptr<WorkState> irecv(const Buffer& buffer, int src, int /*tag*/) override {
    core_->checkBuffer(buffer, "irecv");
    auto work = std::make_shared<NcclWork>(core_, "irecv");
    core_->run(
        "irecv",
        [&] {
          return ncclRecv(buffer.data, buffer.count, toNccl(buffer.dtype), src, core_->comm(),
                          core_->stream());
        },
        work->event());
    return work;
  }

  void broadcast(const Buffer& buffer, int root) override {
    core_->checkBuffer(buffer, "broadcast");
    core_->run("broadcast", [&] {
      return ncclBroadcast(buffer.data, buffer.data, buffer.count, toNccl(buffer.dtype), root,
                           core_->comm(), core_->stream());
    });
  }

  void reduce(const Buffer& buffer, int root, ReduceOp op) override {
    core_->checkBuffer(buffer, "reduce");
    core_->run("reduce", [&] {
      return ncclReduce(buffer.data, buffer.data, buffer.count, toNccl(buffer.dtype), toNccl(op),
                        root, core_->comm(), core_->stream());
    });
  }

  void allReduce(const Buffer& buffer, ReduceOp op) override {
    core_->checkBuffer(buffer, "all_reduce");
    core_->run("all_reduce", [&] {
      return ncclAllReduce(buffer.data, buffer.data, buffer.count, toNccl(buffer.dtype), toNccl(op),
                           core_->comm(), core_->stream());
    });
  }

  void allGather(const Buffer& in, const Buffer& out) override {
    core_->checkBuffer(in, "all_gather");
    core_->checkBuffer(out, "all_gather");
    core_->run("all_gather", [&] {
      return ncclAllGather(in.data, out.data, in.count, toNccl(in.dtype), core_->comm(),
                           core_->stream());
    });
  }

  void gather(const Buffer& in, const Buffer& out, int root) override {
    core_->checkBuffer(in, "gather");
    const bool isRoot = rank() == root;
    if (isRoot) {
      core_->checkBuffer(out, "gather");
    }
    const ncclDataType_t type = toNccl(in.dtype);
    core_->run("gather", [&] {
      if (isRoot) {
        copyOnStream(elementAt(out, static_cast<std::size_t>(root) * in.count), in.data, in.bytes(),
                     "gather");
      }
      return grouped([&] {
        if (!isRoot) {
          return ncclSend(in.data, in.count, type, root, core_->comm(), core_->stream());
        }
        for (int r = 0; r < size(); ++r) {
          if (r == root) {
            continue;
          }
          const ncclResult_t res = ncclRecv(elementAt(out, static_cast<std::size_t>(r) * in.count),
                                            in.count, type, r, core_->comm(), core_->stream());
          if (res != ncclSuccess && res != ncclInProgress) {
            return res;
          }
        }
        return ncclSuccess;
      });
    });
  }

  void scatter(const Buffer& in, const Buffer& out, int root) override {
    core_->checkBuffer(out, "scatter");
    const bool isRoot = rank() == root;
    if (isRoot) {
      core_->checkBuffer(in, "scatter");
    }
    const ncclDataType_t type = toNccl(out.dtype);
    core_->run("scatter", [&] {
      if (isRoot) {
        copyOnStream(out.data, elementAt(in, static_cast<std::size_t>(root) * out.count),
                     out.bytes(), "scatter");
      }
      return grouped([&] {
        if (!isRoot) {
          return ncclRecv(out.data, out.count, type, root, core_->comm(), core_->stream());
        }
        for (int r = 0; r < size(); ++r) {
          if (r == root) {
            continue;
          }
          const ncclResult_t res = ncclSend(elementAt(in, static_cast<std::size_t>(r) * out.count),
                                            out.count, type, r, core_->comm(), core_->stream());
          if (res != ncclSuccess && res != ncclInProgress) {
            return res;
          }
        }
        return ncclSuccess;
      });
    });
  }

  void reduceScatter(const Buffer& in, const Buffer& out, ReduceOp op) override {
    core_->checkBuffer(in, "reduce_scatter");
    core_->checkBuffer(out, "reduce_scatter");
    if (size() == 1) {
      // One rank: the input is the result. A copy, not NCCL: NCCL 2.28.9's ncclAvg over one
      // rank left the last count % 4 floats unwritten (seen on an H200, scripts/gpu-check.sh).
      core_->run("reduce_scatter", [&] {
        copyOnStream(out.data, in.data, out.bytes(), "reduce_scatter");
        return ncclSuccess;
      });
      return;
    }
    core_->run("reduce_scatter", [&] {
      return ncclReduceScatter(in.data, out.data, out.count, toNccl(in.dtype), toNccl(op),
                               core_->comm(), core_->stream());
    });
  }

  void allToAll(const Buffer& in, const Buffer& out) override {
    core_->checkBuffer(in, "all_to_all");
    core_->checkBuffer(out, "all_to_all");
    const std::size_t block = in.count / static_cast<std::size_t>(size());
    const std::size_t blockBytes = block * elementSize(in.dtype);
    const ncclDataType_t type = toNccl(in.dtype);
    const auto self = static_cast<std::size_t>(rank());
    core_->run("all_to_all", [&] {
      copyOnStream(elementAt(out, self * block), elementAt(in, self * block), blockBytes,
                   "all_to_all");
      return grouped([&] {
        for (int r = 0; r < size(); ++r) {
          if (r == rank()) {
            continue;
          }
          const auto offset = static_cast<std::size_t>(r) * block;
          ncclResult_t res =
              ncclSend(elementAt(in, offset), block, type, r, core_->comm(), core_->stream());
          if (res == ncclSuccess || res == ncclInProgress) {
            res = ncclRecv(elementAt(out, offset), block, type, r, core_->comm(), core_->stream());
          }
          if (res != ncclSuccess && res != ncclInProgress) {
            return res;
          }
        }
        return ncclSuccess;
      });
    });
  }

  // Only the members call this, so ncclCommSplit (collective over the whole parent) does not
  // fit; the members bootstrap a fresh communicator with a unique id under the subgroup's name.
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                      const std::string& groupName) override {
    CommunicatorConfig parent;
    parent.store = store_;
    parent.groupName = core_->groupName();
    parent.rank = rank();
    parent.size = size();
    parent.globalRanks = core_->globalRanks();
    parent.timeout = core_->timeout();
    parent.cudaDevice = core_->device();
    return makeNcclCommunicator(subGroupConfig(parent, ranks, rank(), groupName));
  }

 private:
  void copyOnStream(void* dst, const void* src, std::size_t bytes, const char* op) {
    if (bytes == 0 || dst == src) {
      return;
    }
    checkCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, core_->stream()),
              std::string(op) + ": cudaMemcpyAsync");
  }

  std::shared_ptr<NcclCore> core_;
  std::shared_ptr<StoreHandle> store_;  // for split()
};

}  // namespace

std::unique_ptr<Communicator> makeNcclCommunicator(const CommunicatorConfig& config) {
  if (!config.store) {
    throw ConfigError("nccl backend: no store to exchange the NCCL unique id");
  }
  auto core = std::make_shared<NcclCore>(config);
  core->connect(*config.store);
  return std::make_unique<NcclCommunicator>(std::move(core), config.store);
}

}  // namespace dtrun::runtime::detail
