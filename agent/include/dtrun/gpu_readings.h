// GPU readings for a person or a monitor (`dtrun gpus`): every GPU the NVIDIA driver's NVML sees,
// how busy and how full it is, and the compute processes on it, each named by the dtrun rank it
// belongs to when a run directory is given. NVML is dlopen'ed, never linked. readGpus() blocks
// (NVML calls, /proc reads) and is thread-safe; NVML stays loaded once opened.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dtrun/common.h"

namespace dtrun::agent {

struct GpuReadOptions {
  // The library to open; DTRUN_NVML_LIBRARY names another (the caller reads it).
  std::string nvmlLibrary = "libnvidia-ml.so.1";
  // A run directory (<log_dir>/<run_id>, running or finished): its workers' pid records name
  // the rank of each process. Empty: no rank is named.
  std::filesystem::path runDir;
};

struct GpuProcessReading {
  unsigned pid = 0;
  std::string name;                        // /proc/<pid>/comm; "" when not visible here
  std::optional<std::uint64_t> usedBytes;  // nullopt when NVML may not tell (no permission)
  // The rank whose worker this process is, or descends from (a shell that started python), or
  // whose process group it is in (its parent exited); -1 when none of the run's.
  int rank = -1;
  int localRank = -1;
};

struct GpuReading {
  int index = 0;     // NVML's (PCI bus) order, as CUDA_VISIBLE_DEVICES with CUDA_DEVICE_ORDER
  std::string name;  // "NVIDIA H100 80GB HBM3"; "" when the driver does not say
  std::string uuid;  // "GPU-5f2a..."
  // nullopt where the driver does not tell (utilisation of a MIG instance).
  std::optional<unsigned> utilizationGpu;        // % of the last sample period a kernel ran
  std::optional<unsigned> utilizationMemory;     // % of it the memory was read or written
  std::optional<std::uint64_t> memoryUsedBytes;  // as nvidia-smi's memory.used
  std::optional<std::uint64_t> memoryTotalBytes;
  std::vector<GpuProcessReading> processes;  // NVML's compute processes
};

struct GpuReadings {
  std::chrono::system_clock::time_point time;  // CLOCK_REALTIME when NVML was read
  std::string host;                            // this host's name
  std::vector<GpuReading> gpus;
  // With a run directory: its absolute path, the host its run.json names ("" when none) and
  // how many workers it records a pid for (0: a run before the record, or nothing started yet).
  std::filesystem::path runDir;
  std::string runHost;
  std::size_t workersRecorded = 0;
};

// Reads every GPU once. Errors, each one line: kInvalidArgument when options.runDir is not a
// run directory (checked first); kNotFound when NVML cannot be opened or initialised (no driver,
// or the library named is not there); kSystem when NVML fails while read.
Result<GpuReadings> readGpus(const GpuReadOptions& options);

}  // namespace dtrun::agent
