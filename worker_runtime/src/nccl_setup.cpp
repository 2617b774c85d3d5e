// The Nccl backend's set-up and tear-down: the GPU, the unique id agreed through the store, the
// communicator and its stream; a bounded finalize at the end.
#include <array>
#include <cstddef>
#include <string>

#include "nccl_core.h"

namespace dtrun::runtime::detail::nccl {
namespace {

// How long the destructor lets ncclCommFinalize flush before it aborts instead.
constexpr std::chrono::milliseconds kFinalizeLimit{30000};
// Store value rank 0 publishes instead of the id when it cannot create one.
constexpr char kUidErrorMarker = '!';

// For calls made without a communicator (ncclGetUniqueId) or before one exists.
void checkNccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress) {
    throw CommError(what + ": " + ncclText(r, nullptr));
  }
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

}  // namespace

void NcclCore::connect(StoreHandle& store) {
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

void NcclCore::selectDevice() const {
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
    throw ConfigError(where + ": cudaSetDevice(" + std::to_string(device_) + "): " + cudaText(set));
  }
}

void NcclCore::decodeUid(const std::string& hex, ncclUniqueId& uid) const {
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

void NcclCore::release() noexcept {
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

}  // namespace dtrun::runtime::detail::nccl
