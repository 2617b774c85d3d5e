#include "health/gpu_nvml.h"

#include <array>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>

#include <dlfcn.h>

namespace dtrun::agent::detail {

namespace {

// The few NVML declarations dtrun needs, as nvml.h (CUDA 12/13, driver API v2/v3) has them:
// declared here so that building dtrun needs no NVML header and linking needs no library.
using NvmlReturn = int;  // nvmlReturn_t
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlNotSupported = 3;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
constexpr int kNvmlFeatureEnabled = 1;  // nvmlEnableState_t

// nvmlProcessInfo_t of the _v2 and _v3 calls.
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // NOLINT(google-runtime-int): NVML's type
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// nvmlUtilization_t; nvmlMemory_t (_v1); nvmlMemory_v2_t, whose version field says which.
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;  // NOLINT(google-runtime-int): NVML's types
  unsigned long long free;   // NOLINT(google-runtime-int)
  unsigned long long used;   // NOLINT(google-runtime-int)
};
struct NvmlMemoryV2 {
  unsigned int version;
  unsigned long long total;     // NOLINT(google-runtime-int)
  unsigned long long reserved;  // NOLINT(google-runtime-int)
  unsigned long long free;      // NOLINT(google-runtime-int)
  unsigned long long used;      // NOLINT(google-runtime-int)
};
// NVML_STRUCT_VERSION(Memory, 2): the struct's size, the version in the top byte.
constexpr unsigned kNvmlMemoryV2 = static_cast<unsigned>(sizeof(NvmlMemoryV2)) | (2U << 24U);
// NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE.
constexpr unsigned kNvmlTextSize = 96;

using InitFn = NvmlReturn (*)();
using ErrorStringFn = const char* (*)(NvmlReturn);
using CountFn = NvmlReturn (*)(unsigned int*);
using HandleFn = NvmlReturn (*)(unsigned int, NvmlDevice*);
using ProcessesFn = NvmlReturn (*)(NvmlDevice, unsigned int*, NvmlProcessInfo*);
using RemappedRowsFn = NvmlReturn (*)(NvmlDevice, unsigned int*, unsigned int*, unsigned int*,
                                      unsigned int*);
using PendingPagesFn = NvmlReturn (*)(NvmlDevice, int*);
using UtilizationFn = NvmlReturn (*)(NvmlDevice, NvmlUtilization*);
using MemoryFn = NvmlReturn (*)(NvmlDevice, NvmlMemory*);
using MemoryV2Fn = NvmlReturn (*)(NvmlDevice, NvmlMemoryV2*);
using TextFn = NvmlReturn (*)(NvmlDevice, char*, unsigned int);

std::string processName(unsigned pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

class LoadedNvml final : public Nvml {
 public:
  explicit LoadedNvml(void* handle) : handle_(handle) {}

  // Resolves every function; the name of the first one missing, "" when all are there.
  std::string resolve() {
    const auto need = [this](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle_, name));
      return fn != nullptr;
    };
    if (!need(init_, "nvmlInit_v2")) {
      return "nvmlInit_v2";
    }
    if (!need(errorString_, "nvmlErrorString")) {
      return "nvmlErrorString";
    }
    if (!need(count_, "nvmlDeviceGetCount_v2")) {
      return "nvmlDeviceGetCount_v2";
    }
    if (!need(handleByIndex_, "nvmlDeviceGetHandleByIndex_v2")) {
      return "nvmlDeviceGetHandleByIndex_v2";
    }
    // Drivers before 510 have only _v2 of the process list (the same record).
    if (!need(processes_, "nvmlDeviceGetComputeRunningProcesses_v3") &&
        !need(processes_, "nvmlDeviceGetComputeRunningProcesses_v2")) {
      return "nvmlDeviceGetComputeRunningProcesses_v3";
    }
    // Optional: a driver without them has nothing of the kind to report.
    need(remappedRows_, "nvmlDeviceGetRemappedRows");
    need(pendingPages_, "nvmlDeviceGetRetiredPagesPendingStatus");
    need(utilization_, "nvmlDeviceGetUtilizationRates");
    need(memoryV2_, "nvmlDeviceGetMemoryInfo_v2");
    need(memory_, "nvmlDeviceGetMemoryInfo");
    need(name_, "nvmlDeviceGetName");
    need(uuid_, "nvmlDeviceGetUUID");
    return {};
  }

  Status initialise() {
    if (const NvmlReturn rc = init_(); rc != kNvmlSuccess) {
      return Status::error(Errc::kSystem, "nvmlInit: " + errorText(rc));
    }
    return Status::ok();
  }

  Result<int> deviceCount() override {
    unsigned int count = 0;
    if (const NvmlReturn rc = count_(&count); rc != kNvmlSuccess) {
      return Status::error(Errc::kSystem, "nvmlDeviceGetCount: " + errorText(rc));
    }
    return static_cast<int>(count);
  }

  Result<std::vector<GpuState>> query(const std::vector<int>& indices) override {
    DTRUN_ASSIGN_OR_RETURN(const int count, deviceCount());
    std::vector<GpuState> out;
    for (const int index : indices) {
      GpuState state;
      state.index = index;
      NvmlDevice device = nullptr;
      if (index < 0 || index >= count ||
          handleByIndex_(static_cast<unsigned>(index), &device) != kNvmlSuccess) {
        out.push_back(std::move(state));
        continue;
      }
      state.present = true;
      state.fault = faultOf(device);
      readUsage(device, state);
      DTRUN_ASSIGN_OR_RETURN(state.processes, processesOf(index, device));
      out.push_back(std::move(state));
    }
    return out;
  }

 private:
  std::string errorText(NvmlReturn rc) const {
    const char* text = errorString_(rc);
    return text != nullptr ? text : "NVML error " + std::to_string(rc);
  }

  // Memory faults that need a GPU reset; a query the GPU does not support says nothing.
  std::string faultOf(NvmlDevice device) const {
    if (remappedRows_ != nullptr) {
      unsigned corrected = 0;
      unsigned uncorrected = 0;
      unsigned pending = 0;
      unsigned failed = 0;
      if (remappedRows_(device, &corrected, &uncorrected, &pending, &failed) == kNvmlSuccess) {
        if (failed != 0) {
          return "row remapping failed (" + std::to_string(uncorrected) +
                 " uncorrectable rows): the GPU needs service";
        }
        if (pending != 0) {
          return "row remapping pending: the GPU needs a reset";
        }
      }
    }
    if (pendingPages_ != nullptr) {
      int pending = 0;
      if (pendingPages_(device, &pending) == kNvmlSuccess && pending == kNvmlFeatureEnabled) {
        return "retired pages pending: the GPU needs a reset";
      }
    }
    return {};
  }

  // Name, utilisation and memory: each left unknown when the driver does not answer.
  void readUsage(NvmlDevice device, GpuState& state) const {
    std::array<char, kNvmlTextSize> text{};
    if (name_ != nullptr && name_(device, text.data(), kNvmlTextSize) == kNvmlSuccess) {
      state.name.assign(text.data(), ::strnlen(text.data(), text.size()));
    }
    text.fill('\0');
    if (uuid_ != nullptr && uuid_(device, text.data(), kNvmlTextSize) == kNvmlSuccess) {
      state.uuid.assign(text.data(), ::strnlen(text.data(), text.size()));
    }
    NvmlUtilization busy{};
    if (utilization_ != nullptr && utilization_(device, &busy) == kNvmlSuccess) {
      state.utilizationGpu = busy.gpu;
      state.utilizationMemory = busy.memory;
    }
    NvmlMemoryV2 v2{};
    v2.version = kNvmlMemoryV2;
    NvmlMemory v1{};
    if (memoryV2_ != nullptr && memoryV2_(device, &v2) == kNvmlSuccess) {
      state.memoryUsedBytes = v2.used;
      state.memoryTotalBytes = v2.total;
    } else if (memory_ != nullptr && memory_(device, &v1) == kNvmlSuccess) {
      state.memoryUsedBytes = v1.used;
      state.memoryTotalBytes = v1.total;
    }
  }

  Result<std::vector<GpuProcess>> processesOf(int index, NvmlDevice device) const {
    std::vector<NvmlProcessInfo> infos(8);
    for (int tries = 0; tries < 4; ++tries) {
      auto n = static_cast<unsigned>(infos.size());
      const NvmlReturn rc = processes_(device, &n, infos.data());
      if (rc == kNvmlInsufficientSize) {
        infos.resize(static_cast<std::size_t>(n) + 8);  // processes come and go meanwhile
        continue;
      }
      if (rc == kNvmlNotSupported) {
        return std::vector<GpuProcess>{};
      }
      if (rc != kNvmlSuccess) {
        return Status::error(Errc::kSystem,
                             "GPU " + std::to_string(index) +
                                 ": nvmlDeviceGetComputeRunningProcesses: " + errorText(rc));
      }
      std::vector<GpuProcess> out;
      for (unsigned i = 0; i < n && i < infos.size(); ++i) {
        GpuProcess p;
        p.pid = infos[i].pid;
        p.usedBytes = infos[i].usedGpuMemory;
        p.name = processName(p.pid);
        out.push_back(std::move(p));
      }
      return out;
    }
    return Status::error(Errc::kSystem, "GPU " + std::to_string(index) +
                                            ": its process list kept growing while read");
  }

  void* handle_;  // never closed: NVML stays loaded for the process's life
  InitFn init_ = nullptr;
  ErrorStringFn errorString_ = nullptr;
  CountFn count_ = nullptr;
  HandleFn handleByIndex_ = nullptr;
  ProcessesFn processes_ = nullptr;
  RemappedRowsFn remappedRows_ = nullptr;
  PendingPagesFn pendingPages_ = nullptr;
  UtilizationFn utilization_ = nullptr;
  MemoryFn memory_ = nullptr;
  MemoryV2Fn memoryV2_ = nullptr;
  TextFn name_ = nullptr;
  TextFn uuid_ = nullptr;
};

}  // namespace

Result<std::shared_ptr<Nvml>> loadNvml(const std::string& library) {
  static std::mutex mutex;
  static std::map<std::string, Result<std::shared_ptr<Nvml>>> loaded;  // guarded by mutex
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = loaded.find(library); it != loaded.end()) {
    return it->second;
  }
  const auto remember = [&](Result<std::shared_ptr<Nvml>> r) {
    loaded.emplace(library, r);
    return r;
  };
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();  // NOLINT(concurrency-mt-unsafe): under the mutex
    return remember(
        Status::error(Errc::kNotFound, "cannot open " + library + ": " + (why ? why : "?")));
  }
  auto nvml = std::make_shared<LoadedNvml>(handle);
  if (const std::string missing = nvml->resolve(); !missing.empty()) {
    return remember(Status::error(Errc::kNotFound, library + " has no " + missing));
  }
  if (auto s = nvml->initialise(); !s.isOk()) {
    return remember(s);
  }
  return remember(std::shared_ptr<Nvml>(std::move(nvml)));
}

}  // namespace dtrun::agent::detail
