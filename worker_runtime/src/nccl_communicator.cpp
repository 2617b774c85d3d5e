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
#include "store_handle.h"

namespace dtrun::runtime::detail {
namespace {

using Clock = std::chrono::steady_clock;

// How long the destructor lets ncclCommFinalize flush before it aborts instead.
constexpr std::chrono::milliseconds kFinalizeLimit{30000};
// Store value rank 0 publishes instead of the id when it cannot create one.
constexpr char kUidErrorMarker = '!';

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

// For calls made without a communicator (ncclGetUniqueId) or before one exists.
void checkNccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress) {
    throw CommError(what + ": " + ncclText(r, nullptr));
  }
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

std::string toHex(const char* data, std::size_t size) {
  static constexpr std::array<char, 16> kDigits = {'0', '1', '2', '3', '4', '5', '6', '7',
                                                   '8', '9', 'a', 'b', 'c', 'd', 'e', 'f'};
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    const auto byte = static_cast<unsigned char>(data[i]);
    out.push_back(kDigits[byte >> 4U]);
    out.push_back(kDigits[byte & 0xFU]);
  }
  return out;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  return -1;
}

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
  void connect(StoreHandle& store) {
    const auto deadline = Clock::now() + timeout_;
    const std::string key = groupName_ + "/nccl/uid";
    ncclUniqueId uid{};
    if (rank_ == 0) {
      try {
        selectDevice();
        checkNccl(ncclGetUniqueId(&uid), "nccl init: ncclGetUniqueId");
      } catch (const Error& e) {
        // Let the other ranks fail now with the reason instead of timing out on the key.
        try {
          store.set(key, kUidErrorMarker + std::string(e.what()));
        } catch (const Error&) {  // NOLINT(bugprone-empty-catch): report the first error
        }
        throw;
      }
      store.set(key, toHex(static_cast<const char*>(uid.internal), sizeof(uid.internal)));
    } else {
      selectDevice();
      const std::string value =
          store.get(key, "rank 0 (job rank " + std::to_string(globalRanks_.at(0)) +
                             ") to publish the NCCL unique id of group " + groupName_);
      if (!value.empty() && value.front() == kUidErrorMarker) {
        throw CommError("nccl init of group " + groupName_ + ": rank 0 failed: " + value.substr(1));
      }
      decodeUid(value, uid);
    }

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = groupName_.c_str();
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, size_, uid, rank_, &config);
    comm_ = comm;
    if (r != ncclSuccess && r != ncclInProgress) {
      fail("nccl init: ncclCommInitRankConfig", r);
    }
    waitIdle("nccl init", deadline);
    checkCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault),
              "nccl init: cudaStreamCreateWithFlags");
    void* scratch = nullptr;
    checkCuda(cudaMalloc(&scratch, sizeof(float)), "nccl init: cudaMalloc");
    scratch_ = scratch;
    checkCuda(cudaMemsetAsync(scratch_, 0, sizeof(float), stream_), "nccl init: cudaMemsetAsync");
  }

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
  void waitDone(const char* op, Clock::time_point deadline, cudaEvent_t event) {
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

  void ensureUsable(const char* op) const {
    if (comm_ == nullptr) {
      throw CommError(std::string(op) + ": the NCCL communicator of " + describeGroup() +
                      " was aborted after an earlier error; the group is unusable");
    }
  }

  // Checks that `b` is device memory on this group's GPU (a clear error instead of NCCL's
  // "invalid argument" or a crash).
  void checkBuffer(const Buffer& b, const char* op) const {
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
  void selectDevice() const {
    const std::string where = "nccl backend on CUDA device " + std::to_string(device_);
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      static_cast<void>(cudaGetLastError());
      throw ConfigError(where + ": " +
                        (e != cudaSuccess ? "cudaGetDeviceCount: " + cudaText(e)
                                          : std::string("no CUDA device is visible")) +
                        "; the NCCL backend needs a GPU (use Backend::kTcp or Backend::kGloo "
                        "for CPU buffers)");
    }
    if (device_ < 0 || device_ >= count) {
      throw ConfigError(where + ": this process sees " + std::to_string(count) +
                        " CUDA device(s); set GroupOptions::cudaDevice or run at most " +
                        std::to_string(count) + " workers per node");
    }
    const cudaError_t set = cudaSetDevice(device_);
    if (set != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      throw ConfigError(where + ": cudaSetDevice(" + std::to_string(device_) +
                        "): " + cudaText(set));
    }
  }

  void decodeUid(const std::string& hex, ncclUniqueId& uid) const {
    if (hex.size() != 2 * sizeof(uid.internal)) {
      throw CommError("nccl init of group " + groupName_ + ": malformed unique id in the store (" +
                      std::to_string(hex.size()) + " hex digits)");
    }
    for (std::size_t i = 0; i < sizeof(uid.internal); ++i) {
      const int hi = hexValue(hex[2 * i]);
      const int lo = hexValue(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) {
        throw CommError("nccl init of group " + groupName_ + ": malformed unique id in the store");
      }
      uid.internal[i] = static_cast<char>((hi << 4) | lo);
    }
  }

  // Polls until NCCL has no call in progress on this communicator.
  void waitIdle(const char* op, Clock::time_point deadline) {
    for (PollPause pause;; pause()) {
      if (!inProgress(op)) {
        return;
      }
      if (Clock::now() >= deadline) {
        timedOut(op);
      }
    }
  }

  // True while a call is still in progress; throws CommError on an NCCL error.
  bool inProgress(const char* op) {
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

  [[noreturn]] void fail(const std::string& op, ncclResult_t r) {
    const std::string text = ncclText(r, comm_);
    abort();
    throw CommError(op + ": " + text + " (" + describeGroup() + "); the communicator was aborted");
  }

  [[noreturn]] void timedOut(const std::string& op) {
    abort();
    throw TimeoutError(op + ": NCCL did not complete within " + std::to_string(timeout_.count()) +
                       " ms (" + describeGroup() +
                       "; a rank may have died, hung or not called it); the communicator was "
                       "aborted");
  }

  [[nodiscard]] std::string describeGroup() const {
    std::string ranks;
    for (std::size_t i = 0; i < globalRanks_.size(); ++i) {
      ranks += (i == 0 ? "" : ",") + std::to_string(globalRanks_[i]);
    }
    return "group " + groupName_ + " of " + std::to_string(size_) + " ranks: job ranks " + ranks +
           "; this is rank " + std::to_string(rank_);
  }

  // Aborts the communicator (safe to call twice); later calls throw "unusable".
  void abort() noexcept {
    if (comm_ != nullptr) {
      static_cast<void>(ncclCommAbort(comm_));
      comm_ = nullptr;
    }
  }

  void release() noexcept {
    int previous = -1;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                          cudaSetDevice(device_) == cudaSuccess;
    if (comm_ != nullptr) {
      // Flush what was issued, bounded: a dead peer must not stall the exit.
      bool finalized = false;
      const ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) {
        const auto deadline = Clock::now() + std::min(timeout_, kFinalizeLimit);
        for (PollPause pause;; pause()) {
          ncclResult_t state = ncclSuccess;
          if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess ||
              (state != ncclSuccess && state != ncclInProgress)) {
            break;
          }
          if (state == ncclSuccess) {
            finalized = true;
            break;
          }
          if (Clock::now() >= deadline) {
            break;
          }
        }
      }
      if (finalized) {
        static_cast<void>(ncclCommDestroy(comm_));
        comm_ = nullptr;
      } else {
        abort();
      }
    }
    if (scratch_ != nullptr) {
      static_cast<void>(cudaFree(scratch_));
      scratch_ = nullptr;
    }
    if (stream_ != nullptr) {
      static_cast<void>(cudaStreamDestroy(stream_));
      stream_ = nullptr;
    }
    static_cast<void>(cudaGetLastError());
    if (switched) {
      static_cast<void>(cudaSetDevice(previous));
    }
  }

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
