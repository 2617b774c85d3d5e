// The live view's GPU columns: NVML's readings (readGpus, gpu_readings.h) taken off the agent's
// loop, each process on a GPU named by the local worker it is or descends from (workerOf), and
// folded into each rank's GPU, GPU memory and that GPU's utilisation. Used from the loop only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "health/health.h"
#include "live/node_status.h"
#include "workers/workers.h"

namespace dtrun::agent::detail {

// One rank's share of the GPUs in a reading.
struct RankGpu {
  unsigned gpu = 0;                          // where it holds the most memory
  std::optional<std::uint64_t> memoryBytes;  // over every GPU; nullopt: NVML may not tell
  std::optional<unsigned> utilization;       // `gpu`'s busy percentage
};

class GpuSampler {
 public:
  // `nvmlLibrary`: the library readGpus opens (AgentConfig's, DTRUN_NVML_LIBRARY's).
  explicit GpuSampler(std::string nvmlLibrary);
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;
  GpuSampler(GpuSampler&&) = delete;
  GpuSampler& operator=(GpuSampler&&) = delete;
  ~GpuSampler();

  // Starts one reading of the GPUs for `group`'s running workers on a thread of its own, unless
  // one is still under way (a GPU that hangs NVML costs one thread, never one per period), no
  // worker runs, or NVML was found absent (tried once: a node without a driver pays nothing).
  void request(const WorkerGroup& group);
  // Sets the GPU fields of `node`'s ranks from the last reading that is done: a rank whose
  // running process (by pid) was found on a GPU; the others' stay unset.
  void fill(NodeStatus& node) const;

 private:
  // What the reading thread and the loop share. The thread owns its copy, and touches neither the
  // sampler nor the io_context: a read blocked in NVML never holds up the agent's exit.
  struct Shared {
    std::mutex mutex;
    bool busy = false;    // guarded by mutex: a reading is under way
    bool absent = false;  // guarded by mutex: NVML could not be opened; never tried again
    bool failed = false;  // guarded by mutex: a read failed once (said once, at debug)
    std::map<unsigned, RankGpu> byWorkerPid;  // guarded by mutex: the last reading
  };
  // The reading thread's work: readGpus, then its result into `shared`.
  static void read(Shared& shared, const std::string& library,
                   const std::vector<WorkerPid>& workers);
  const std::string nvmlLibrary_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

// A reading folded per worker: each process that workerOf names (`workers`: the running workers,
// `read`: /proc) counts for its worker's pid. Pure over `read`.
std::map<unsigned, RankGpu> rankGpusOf(const GpuReadings& readings,
                                       const std::vector<WorkerPid>& workers,
                                       const ProcStatReader& read);

}  // namespace dtrun::agent::detail
