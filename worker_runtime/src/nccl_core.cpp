#include "nccl_core.h"

namespace dtrun::runtime::detail::nccl {

std::string cudaText(cudaError_t e) { return cudaGetErrorString(e); }

// Throws CommError for a failed CUDA call (clearing CUDA's last-error slot first).
void checkCuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    throw CommError(what + ": " + cudaText(e));
  }
}

// ncclGetErrorString plus ncclGetLastError's detail, when it says more.
std::string ncclText(ncclResult_t r, ncclComm_t comm) {
  std::string text = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') {
    text += " (";
    text += last;
    text += ")";
  }
  return text;
}

ncclDataType_t toNccl(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
  }
  throw ConfigError("nccl: unsupported data type");
}

ncclRedOp_t toNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;  // NCCL >= 2.10
  }
  throw ConfigError("nccl: unsupported reduce op");
}

void NcclCore::waitDone(const char* op, Clock::time_point deadline, cudaEvent_t event) {
  ensureUsable(op);
  const DeviceGuard guard(device_, op);
  for (PollPause pause;; pause()) {
    const cudaError_t e = event != nullptr ? cudaEventQuery(event) : cudaStreamQuery(stream_);
    if (e == cudaSuccess) {
      return;
    }
    if (e != cudaErrorNotReady) {
      static_cast<void>(cudaGetLastError());
      abort();
      throw CommError(std::string(op) + ": CUDA error while waiting for NCCL: " + cudaText(e) +
                      " (" + describeGroup() + "); the communicator was aborted");
    }
    static_cast<void>(inProgress(op));
    if (Clock::now() >= deadline) {
      timedOut(op);
    }
  }
}

void NcclCore::ensureUsable(const char* op) const {
  if (comm_ == nullptr) {
    throw CommError(std::string(op) + ": the NCCL communicator of " + describeGroup() +
                    " was aborted after an earlier error; the group is unusable");
  }
}

void NcclCore::checkBuffer(const Buffer& b, const char* op) const {
  if (b.count == 0) {
    return;
  }
  cudaPointerAttributes attributes{};
  const cudaError_t e = cudaPointerGetAttributes(&attributes, b.data);
  if (e != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    throw ConfigError(std::string(op) + ": the buffer is not CUDA memory (" + cudaText(e) + ")");
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    throw ConfigError(std::string(op) +
                      ": the buffer is host memory; the nccl backend takes CUDA device "
                      "buffers");
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != device_) {
    throw ConfigError(std::string(op) + ": the buffer is on CUDA device " +
                      std::to_string(attributes.device) + " but this group uses device " +
                      std::to_string(device_));
  }
}

void NcclCore::waitIdle(const char* op, Clock::time_point deadline) {
  for (PollPause pause;; pause()) {
    if (!inProgress(op)) {
      return;
    }
    if (Clock::now() >= deadline) {
      timedOut(op);
    }
  }
}

bool NcclCore::inProgress(const char* op) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) {
    fail(op, r);
  }
  if (state == ncclSuccess) {
    return false;
  }
  if (state == ncclInProgress) {
    return true;
  }
  fail(op, state);
}

void NcclCore::fail(const std::string& op, ncclResult_t r) {
  const std::string text = ncclText(r, comm_);
  abort();
  throw CommError(op + ": " + text + " (" + describeGroup() + "); the communicator was aborted");
}

void NcclCore::timedOut(const std::string& op) {
  abort();
  throw TimeoutError(op + ": NCCL did not complete within " + std::to_string(timeout_.count()) +
                     " ms (" + describeGroup() +
                     "; a rank may have died, hung or not called it); the communicator was "
                     "aborted");
}

std::string NcclCore::describeGroup() const {
  std::string ranks;
  for (std::size_t i = 0; i < globalRanks_.size(); ++i) {
    ranks += (i == 0 ? "" : ",") + std::to_string(globalRanks_[i]);
  }
  return "group " + groupName_ + " of " + std::to_string(size_) + " ranks: job ranks " + ranks +
         "; this is rank " + std::to_string(rank_);
}

void NcclCore::abort() noexcept {
  if (comm_ != nullptr) {
    static_cast<void>(ncclCommAbort(comm_));
    comm_ = nullptr;
  }
}

}  // namespace dtrun::runtime::detail::nccl
