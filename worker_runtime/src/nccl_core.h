// The Nccl backend's core (nccl_communicator.cpp has the overview): the NCCL communicator with
// its stream, set up in nccl_setup.cpp, running and awaiting operations in nccl_core.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "dtrun/runtime.h"

#include "communicator.h"
#include "store_handle.h"

namespace dtrun::runtime::detail::nccl {

using Clock = std::chrono::steady_clock;

std::string cudaText(cudaError_t e);

// Throws CommError for a failed CUDA call (clearing CUDA's last-error slot first).
void checkCuda(cudaError_t e, const std::string& what);

// ncclGetErrorString plus ncclGetLastError's detail, when it says more.
std::string ncclText(ncclResult_t r, ncclComm_t comm);

ncclDataType_t toNccl(DataType type);
ncclRedOp_t toNccl(ReduceOp op);

// Spin briefly (collectives usually finish in microseconds), then sleep up to 1 ms per poll.
class PollPause {
 public:
  void operator()() {
    if (spins_ < kSpins) {
      ++spins_;
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(1000));
  }

 private:
  static constexpr int kSpins = 2000;
  int spins_ = 0;
  std::chrono::microseconds sleep_{20};
};

// Makes `device` current for a scope and restores the caller's device afterwards.
class DeviceGuard {
 public:
  DeviceGuard(int device, const char* op) {
    checkCuda(cudaGetDevice(&previous_), std::string(op) + ": cudaGetDevice");
    if (previous_ != device) {
      checkCuda(cudaSetDevice(device),
                std::string(op) + ": cudaSetDevice(" + std::to_string(device) + ")");
    }
  }
  ~DeviceGuard() { static_cast<void>(cudaSetDevice(previous_)); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  DeviceGuard(DeviceGuard&&) = delete;
  DeviceGuard& operator=(DeviceGuard&&) = delete;

 private:
  int previous_ = 0;
};

// The NCCL communicator with its stream and scratch memory. Shared by NcclCommunicator and the
// Work of its isend/irecv, so a pending Work keeps the communicator alive.
class NcclCore {
 public:
  explicit NcclCore(const CommunicatorConfig& config)
      : groupName_(config.groupName),
        rank_(config.rank),
        size_(config.size),
        globalRanks_(config.globalRanks),
        timeout_(config.timeout),
        device_(config.cudaDevice) {}

  ~NcclCore() { release(); }
  NcclCore(const NcclCore&) = delete;
  NcclCore& operator=(const NcclCore&) = delete;
  NcclCore(NcclCore&&) = delete;
  NcclCore& operator=(NcclCore&&) = delete;

  // Collective over the group: checks the GPU, agrees on the unique id through the store and
  // creates the communicator, all within the timeout. Throws ConfigError (no usable GPU),
  // TimeoutError (a rank did not arrive) or CommError.
  void connect(StoreHandle& store);

  // Enqueues one operation (a call returning ncclResult_t, possibly a group), waits until NCCL
  // has enqueued it and, unless `event` is given, until the stream has finished it. With
  // `event`, records it after the operation and returns at once.
  template <typename Enqueue>
  void run(const char* op, Enqueue&& enqueue, cudaEvent_t event = nullptr) {
    ensureUsable(op);
    const DeviceGuard guard(device_, op);
    const auto deadline = Clock::now() + timeout_;
    const ncclResult_t r = std::forward<Enqueue>(enqueue)();
    if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
      // Rejected before anything was enqueued: the communicator is still fine.
      throw ConfigError(std::string(op) + ": " + ncclText(r, comm_));
    }
    if (r != ncclSuccess && r != ncclInProgress) {
      fail(op, r);
    }
    waitIdle(op, deadline);
    if (event != nullptr) {
      checkCuda(cudaEventRecord(event, stream_), std::string(op) + ": cudaEventRecord");
      return;
    }
    waitDone(op, deadline, nullptr);
  }

  // Waits for `event` (or the whole stream) while watching for NCCL errors; aborts the
  // communicator and throws TimeoutError at the deadline.
  void waitDone(const char* op, Clock::time_point deadline, cudaEvent_t event);

  void ensureUsable(const char* op) const;

  // Checks that `b` is device memory on this group's GPU (a clear error instead of NCCL's
  // "invalid argument" or a crash).
  void checkBuffer(const Buffer& b, const char* op) const;

  [[nodiscard]] ncclComm_t comm() const { return comm_; }
  [[nodiscard]] cudaStream_t stream() const { return stream_; }
  [[nodiscard]] void* scratch() const { return scratch_; }
  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] std::chrono::milliseconds timeout() const { return timeout_; }
  [[nodiscard]] const std::string& groupName() const { return groupName_; }
  [[nodiscard]] const std::vector<int>& globalRanks() const { return globalRanks_; }

 private:
  void selectDevice() const;

  void decodeUid(const std::string& hex, ncclUniqueId& uid) const;

  // Polls until NCCL has no call in progress on this communicator.
  void waitIdle(const char* op, Clock::time_point deadline);

  // True while a call is still in progress; throws CommError on an NCCL error.
  bool inProgress(const char* op);

  [[noreturn]] void fail(const std::string& op, ncclResult_t r);

  [[noreturn]] void timedOut(const std::string& op);

  [[nodiscard]] std::string describeGroup() const;

  // Aborts the communicator (safe to call twice); later calls throw "unusable".
  void abort() noexcept;

  void release() noexcept;

  const std::string groupName_;
  const int rank_;
  const int size_;
  const std::vector<int> globalRanks_;
  const std::chrono::milliseconds timeout_;
  const int device_;
  ncclComm_t comm_ = nullptr;  // null before init and after an abort
  // Blocking with respect to the legacy default stream (not cudaStreamNonBlocking), so an
  // operation sees what the caller wrote with kernels on the default stream.
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;  // one float on the device, for barrier()
};

}  // namespace dtrun::runtime::detail::nccl
