// init(), the small public helpers, and Work.
#include "dtrun/runtime.h"

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>

#include <nlohmann/json.hpp>

#include "communicator.h"
#include "error_handlers.h"
#include "progress.h"
#include "store_handle.h"

namespace dtrun::runtime {
namespace {

constexpr std::chrono::milliseconds kDefaultTimeout{300000};

std::string envOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read during init()
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::string requireEnv(const char* name) {
  std::string value = envOr(name, "");
  if (value.empty()) {
    throw ConfigError(std::string(name) +
                      " is not set: run this program under dtrun (or torchrun), e.g. "
                      "`dtrun --nproc_per_node=2 --no_python ./program`");
  }
  return value;
}

long parseInt(const char* name, const std::string& text, long min, long max) {
  std::size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < min || value > max) {
    throw ConfigError(std::string(name) + "='" + text + "' is not an integer in [" +
                      std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return value;
}

}  // namespace

std::size_t elementSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kUInt8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
  }
  return 1;
}

const char* dataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "f32";
    case DataType::kFloat64:
      return "f64";
    case DataType::kInt32:
      return "i32";
    case DataType::kInt64:
      return "i64";
    case DataType::kUInt8:
      return "u8";
    case DataType::kFloat16:
      return "f16";
    case DataType::kBFloat16:
      return "bf16";
  }
  return "?";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "?";
}

const char* backendName(Backend backend) {
  switch (backend) {
    case Backend::kTcp:
      return "tcp";
    case Backend::kGloo:
      return "gloo";
    case Backend::kNccl:
      return "nccl";
  }
  return "?";
}

bool backendAvailable(Backend backend) {
#ifdef DTRUN_HAVE_NCCL
  constexpr bool kHaveNccl = true;
#else
  constexpr bool kHaveNccl = false;
#endif
  return backend != Backend::kNccl || kHaveNccl;
}

Context init(const InitOptions& options) {
  Membership who;
  who.rank = static_cast<int>(parseInt("RANK", requireEnv("RANK"), 0, 1 << 24));
  who.worldSize = static_cast<int>(parseInt("WORLD_SIZE", requireEnv("WORLD_SIZE"), 1, 1 << 24));
  if (who.rank >= who.worldSize) {
    throw ConfigError("RANK=" + std::to_string(who.rank) +
                      " is not below WORLD_SIZE=" + std::to_string(who.worldSize));
  }
  who.localRank = static_cast<int>(parseInt("LOCAL_RANK", envOr("LOCAL_RANK", "0"), 0, 1 << 24));
  who.localWorldSize =
      static_cast<int>(parseInt("LOCAL_WORLD_SIZE", envOr("LOCAL_WORLD_SIZE", "1"), 1, 1 << 24));
  who.restartCount = static_cast<int>(
      parseInt("TORCHELASTIC_RESTART_COUNT", envOr("TORCHELASTIC_RESTART_COUNT", "0"), 0, 1 << 30));
  who.runId = envOr("TORCHELASTIC_RUN_ID", "none");
  who.storeHost = requireEnv("MASTER_ADDR");
  who.storePort =
      static_cast<std::uint16_t>(parseInt("MASTER_PORT", requireEnv("MASTER_PORT"), 1, 65535));
  who.storePrefix = envOr("DTRUN_STORE_PREFIX", "");
  who.storeToken = envOr("DTRUN_STORE_TOKEN", "");
  InitOptions resolved = options;
  if (resolved.timeout.count() <= 0) {
    resolved.timeout = std::chrono::milliseconds(
        1000 * parseInt("DTRUN_TIMEOUT", envOr("DTRUN_TIMEOUT", "300"), 1, 1 << 24));
  }
  Context c = init(who, resolved);
  detail::openProgress();  // DTRUN_PROGRESS_FILE: the agent's view of this rank
  return c;
}

Context init(const Membership& who, const InitOptions& options) {
  if (who.worldSize < 1 || who.rank < 0 || who.rank >= who.worldSize) {
    throw ConfigError("rank " + std::to_string(who.rank) + " is not in [0, world size " +
                      std::to_string(who.worldSize) + ")");
  }
  if (who.storePort == 0) {
    throw ConfigError("init: no store port given");
  }
  Context c;
  c.rank = who.rank;
  c.worldSize = who.worldSize;
  c.localRank = who.localRank;
  c.localWorldSize = who.localWorldSize;
  c.restartCount = who.restartCount;
  c.runId = who.runId;
  c.storeHost = who.storeHost;
  c.storePort = who.storePort;
  c.storePrefix = who.storePrefix.empty() ? "/worker/attempt_" + std::to_string(who.restartCount)
                                          : who.storePrefix;
  c.timeout = options.timeout.count() > 0 ? options.timeout : kDefaultTimeout;
  if (options.installErrorHandlers) {
    detail::installErrorHandlers();
  }
  rdzv::ClientOptions client;
  client.host = c.storeHost;
  client.port = c.storePort;
  client.timeout = c.timeout;
  client.token = who.storeToken;
  auto store = rdzv::connectStore(client);
  if (!store.isOk()) {
    const std::string message = "init: cannot reach the store at " + c.storeHost + ":" +
                                std::to_string(c.storePort) + ": " + store.status().message();
    if (store.status().code() == Errc::kTimeout || store.status().code() == Errc::kConnection) {
      throw TimeoutError(message);
    }
    if (store.status().code() == Errc::kDenied) {
      throw ConfigError(message);
    }
    throw CommError(message);
  }
  c.store = std::make_shared<StoreHandle>(std::move(store).value(), c.storePrefix, c.timeout);
  return c;
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (state_) {
    state_->wait(timeout);
  }
}

bool Work::isCompleted() const { return !state_ || state_->isCompleted(); }

}  // namespace dtrun::runtime
