// NVML, for the gpus health check and `dtrun gpus` (gpu_readings.h): what the driver says of each
// GPU (is it there, does it need a reset, how busy and full it is, whose processes hold its
// memory). The library is dlopen'ed, never linked: dtrun runs on nodes without a GPU or a driver,
// and must not fail to start there.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrun/common.h"

namespace dtrun::agent::detail {

// The library dtrun opens when DTRUN_NVML_LIBRARY does not name another one (a test's fake, or
// a driver installed out of the loader's path).
inline constexpr std::string_view kNvmlLibrary = "libnvidia-ml.so.1";

struct GpuProcess {
  unsigned pid = 0;
  std::uint64_t usedBytes = 0;  // kUnknownBytes when NVML may not tell (no permission)
  std::string name;             // /proc/<pid>/comm, "" when the process is not visible here
  static constexpr std::uint64_t kUnknownBytes = ~std::uint64_t{0};
};

struct GpuState {
  int index = 0;         // as NVML (and CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID) numbers it
  bool present = false;  // NVML has a device at this index
  // Why the GPU needs a reset before it can be trusted ("" = none found): a row remapping that
  // failed or is pending, or retired pages pending. A check the GPU does not support is skipped.
  std::string fault;
  std::vector<GpuProcess> processes;  // compute processes holding memory on it
  // What nvidia-smi shows of it; nullopt (or "") where the driver does not tell (a MIG
  // instance's utilisation, a driver without the call).
  std::string name;                           // "NVIDIA H100 80GB HBM3"
  std::string uuid;                           // "GPU-5f2a..."
  std::optional<unsigned> utilizationGpu;     // % of the last sample period a kernel ran
  std::optional<unsigned> utilizationMemory;  // % of it the memory was read or written
  // The device's memory (nvmlDeviceGetMemoryInfo_v2, as nvidia-smi: used leaves out what the
  // driver reserves; before driver 510, _v1's used, which counts it).
  std::optional<std::uint64_t> memoryUsedBytes;
  std::optional<std::uint64_t> memoryTotalBytes;
};

// One loaded, initialised NVML. Thread-safe (NVML is); calls may block on a broken GPU, so
// callers bound them (the health checks' threads).
class Nvml {
 public:
  Nvml() = default;
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  Nvml(Nvml&&) = delete;
  Nvml& operator=(Nvml&&) = delete;
  virtual ~Nvml() = default;
  // How many GPUs NVML sees (indices 0 to count - 1).
  virtual Result<int> deviceCount() = 0;
  // Each index's state; an index NVML does not have comes back with present = false.
  virtual Result<std::vector<GpuState>> query(const std::vector<int>& indices) = 0;
};

// `library` loaded and initialised, once per process (later calls return the same one): kNotFound
// when it cannot be opened or lacks a function dtrun needs (no driver: the caller falls back to
// the device nodes), kSystem when nvmlInit fails (a driver that is there but broken).
Result<std::shared_ptr<Nvml>> loadNvml(const std::string& library);

}  // namespace dtrun::agent::detail
