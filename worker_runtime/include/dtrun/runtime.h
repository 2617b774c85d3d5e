// libdtrt: what a C++ training program launched by dtrun (or torchrun) links. One call joins the
// job; a ProcessGroup then offers barrier, point-to-point and collectives over a backend (Tcp,
// our own, for CPU buffers; Gloo as a second CPU backend; Nccl for CUDA buffers where built).
//
// Threading: a ProcessGroup is used by one thread at a time (collectives run on the caller's
// thread); use one group per thread. Every blocking call has a timeout and throws instead of
// hanging: TimeoutError or CommError, whose message names the operation and the peer ranks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace dtrun::runtime {

// ---- errors ---------------------------------------------------------------------------------

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The environment is not a dtrun/torchrun worker's, or an option is invalid.
class ConfigError : public Error {
 public:
  using Error::Error;
};
// A peer did not arrive or answer in time: "all_reduce: timed out after 30000 ms waiting for
// rank 2".
class TimeoutError : public Error {
 public:
  using Error::Error;
};
// A peer's connection broke (it died) or sent garbage: "recv from rank 1: connection closed".
// The group is unusable afterwards; the program should exit so the agent restarts the job.
class CommError : public Error {
 public:
  using Error::Error;
};

// ---- buffers --------------------------------------------------------------------------------

enum class DataType : std::uint8_t {
  kFloat32,
  kFloat64,
  kInt32,
  kInt64,
  kUInt8,
  kFloat16,
  kBFloat16
};
enum class ReduceOp : std::uint8_t { kSum, kProd, kMin, kMax, kAvg };
enum class Device : std::uint8_t { kCpu, kCuda };

std::size_t elementSize(DataType type);
const char* dataTypeName(DataType type);  // "f32", "bf16", ...
const char* reduceOpName(ReduceOp op);    // "sum", ...

// A view of memory the caller owns: count elements of dtype at data (on device).
struct Buffer {
  void* data = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::kFloat32;
  Device device = Device::kCpu;
  int deviceIndex = 0;

  [[nodiscard]] std::size_t bytes() const { return count * elementSize(dtype); }
};

template <typename T>
constexpr DataType dataTypeOf();
template <>
constexpr DataType dataTypeOf<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType dataTypeOf<double>() {
  return DataType::kFloat64;
}
template <>
constexpr DataType dataTypeOf<std::int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType dataTypeOf<std::int64_t>() {
  return DataType::kInt64;
}
template <>
constexpr DataType dataTypeOf<std::uint8_t>() {
  return DataType::kUInt8;
}

template <typename T>
Buffer view(std::span<T> s) {
  return {static_cast<void*>(const_cast<std::remove_const_t<T>*>(s.data())), s.size(),
          dataTypeOf<std::remove_const_t<T>>()};
}

// ---- joining the job ------------------------------------------------------------------------

struct InitOptions {
  // Default for every blocking call; 0 = DTRUN_TIMEOUT (seconds) from the environment, else 300 s.
  std::chrono::milliseconds timeout{0};
  // Write TORCHELASTIC_ERROR_FILE (torchrun's JSON) on an uncaught exception or a fatal signal.
  bool installErrorHandlers = true;
};

class StoreHandle;  // the connection to the agent's store (opaque)

// Who this process is in the job, read from the environment dtrun (or torchrun) sets.
struct Context {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int localWorldSize = 1;
  int restartCount = 0;         // TORCHELASTIC_RESTART_COUNT
  std::string runId;            // TORCHELASTIC_RUN_ID
  std::string storeHost;        // MASTER_ADDR
  std::uint16_t storePort = 0;  // MASTER_PORT
  std::string
      storePrefix;  // "/worker/attempt_<restartCount>": keys of earlier attempts are never read
  std::chrono::milliseconds timeout{300000};
  std::shared_ptr<StoreHandle> store;  // connected, with storePrefix applied
  // World groups created from this context (and its copies) so far: each gets its own store
  // keys, so a program may hold several groups of one backend (e.g. one per DDP bucket stream).
  std::shared_ptr<std::atomic<int>> worldGroupsCreated = std::make_shared<std::atomic<int>>(0);
};

// Who this process is in the job and where its store is. init() reads it from the environment
// dtrun (or torchrun) sets; a program or test that knows it already passes it explicitly, e.g.
// several ranks as threads of one process against an in-process store, as gloo's tests do.
struct Membership {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int localWorldSize = 1;
  int restartCount = 0;
  std::string runId = "none";
  std::string storeHost = "127.0.0.1";
  std::uint16_t storePort = 0;
  std::string storePrefix;  // "" = "/worker/attempt_<restartCount>"
  std::string storeToken;   // "" = none
};

// Joins the job as `who` says, reading nothing from the environment: the ranges are checked
// (ConfigError), the store connected (TimeoutError when unreachable in time, ConfigError for a
// refused token). options.timeout 0 means 300 s. Thread-safe: ranks may join from threads.
Context init(const Membership& who, const InitOptions& options = {});

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RESTART_COUNT (and DTRUN_STORE_PREFIX) and connects to the store, proving
// DTRUN_STORE_TOKEN when set (dtrun sets it for a store with a token). Throws ConfigError naming
// the missing or malformed variable ("RANK is not set: run this program under dtrun or
// torchrun") or a refused token, TimeoutError if the store cannot be reached in time.
Context init(const InitOptions& options = {});

// Writes TORCHELASTIC_ERROR_FILE in torchrun's JSON shape with `message` (no-op if unset).
void recordError(const std::string& message);

// ---- process groups -------------------------------------------------------------------------

enum class Backend : std::uint8_t { kTcp, kGloo, kNccl };
const char* backendName(Backend backend);
bool backendAvailable(Backend backend);  // kNccl only where built with CUDA

struct GroupOptions {
  std::chrono::milliseconds timeout{0};  // 0 = the context's
  int cudaDevice = -1;                   // Nccl: -1 = LOCAL_RANK
};

namespace detail {
class Communicator;
class WorkState;
}  // namespace detail

// A pending point-to-point operation. wait() returns when it completed and throws what the
// operation failed with (TimeoutError after `timeout`; 0 = the group's timeout).
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  [[nodiscard]] bool isCompleted() const;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

class ProcessGroup {
 public:
  // Collective over every rank of `context`: every rank must call it with the same backend.
  // kGloo sets SIGPIPE to SIG_IGN when it is SIG_DFL (as Python does): Gloo's writes to a dead
  // peer must become a CommError, not kill the process.
  static std::unique_ptr<ProcessGroup> create(const Context& context,
                                              Backend backend = Backend::kTcp,
                                              const GroupOptions& options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  ProcessGroup(ProcessGroup&&) = delete;
  ProcessGroup& operator=(ProcessGroup&&) = delete;

  [[nodiscard]] int rank() const;
  [[nodiscard]] int size() const;
  [[nodiscard]] Backend backend() const;

  void barrier();
  void send(const Buffer& buffer, int dst, int tag = 0);
  void recv(const Buffer& buffer, int src, int tag = 0);
  Work isend(const Buffer& buffer, int dst, int tag = 0);
  Work irecv(const Buffer& buffer, int src, int tag = 0);

  void broadcast(const Buffer& buffer, int root);
  void reduce(const Buffer& buffer, int root, ReduceOp op = ReduceOp::kSum);
  void allReduce(const Buffer& buffer, ReduceOp op = ReduceOp::kSum);
  // out holds size() * in.count elements, rank r's contribution at r * in.count.
  void allGather(const Buffer& in, const Buffer& out);
  void gather(const Buffer& in, const Buffer& out, int root);   // out used on root only
  void scatter(const Buffer& in, const Buffer& out, int root);  // in used on root only
  // in holds size() * out.count elements; rank r receives the reduction of block r.
  void reduceScatter(const Buffer& in, const Buffer& out, ReduceOp op = ReduceOp::kSum);
  // in and out hold size() * k elements; block j of `in` goes to rank j.
  void allToAll(const Buffer& in, const Buffer& out);

  // A group of `ranks` (ranks of this group, any order; its rank i is ranks[i]). Every rank of
  // this group must call it with the same list; non-members get nullptr.
  std::unique_ptr<ProcessGroup> newGroup(const std::vector<int>& ranks);

 private:
  ProcessGroup(std::unique_ptr<detail::Communicator> communicator, std::string name);
  std::unique_ptr<detail::Communicator> communicator_;
  std::string name_;  // "world" or "sub<N>", as the agent's hang report names the group
  int groupsCreated_ = 0;
};

// ---- logging --------------------------------------------------------------------------------

// Rank-aware log lines for worker programs and libdtrt itself: "[rank 3] [warn] message" on
// stderr (R from RANK). The level comes from DTRT_LOG_LEVEL (debug, info, warn, error, off;
// default warn) unless setLogLevel() was called. With DTRT_LOG_FILE=path (a "{rank}" in it
// becomes the rank) lines are also appended, timestamped, to that per-rank file. The
// environment is read on first use. Thread-safe: each line is written whole under one mutex.
enum class LogLevel : std::uint8_t { kDebug, kInfo, kWarn, kError, kOff };

void setLogLevel(LogLevel level);
[[nodiscard]] LogLevel logLevel();
[[nodiscard]] bool logEnabled(LogLevel level);  // to skip building an expensive message
void logMessage(LogLevel level, std::string_view message);
inline void logDebug(std::string_view message) { logMessage(LogLevel::kDebug, message); }
inline void logInfo(std::string_view message) { logMessage(LogLevel::kInfo, message); }
inline void logWarn(std::string_view message) { logMessage(LogLevel::kWarn, message); }
inline void logError(std::string_view message) { logMessage(LogLevel::kError, message); }

}  // namespace dtrun::runtime
