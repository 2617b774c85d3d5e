#include "live/gpu_sampler.h"

#include <system_error>
#include <thread>
#include <utility>

#include "log.h"

namespace dtrun::agent::detail {

std::map<unsigned, RankGpu> rankGpusOf(const GpuReadings& readings,
                                       const std::vector<WorkerPid>& workers,
                                       const ProcStatReader& read) {
  struct Tally {
    RankGpu rank;
    std::optional<std::uint64_t> most;  // the memory it holds on rank.gpu
    bool any = false;
  };
  std::map<unsigned, Tally> tallies;
  for (const GpuReading& gpu : readings.gpus) {
    for (const GpuProcessReading& p : gpu.processes) {
      const WorkerPid* w = workerOf(p.pid, workers, read);
      if (w == nullptr) {
        continue;
      }
      Tally& t = tallies[w->pid];
      if (p.usedBytes) {
        t.rank.memoryBytes = t.rank.memoryBytes.value_or(0) + *p.usedBytes;
      }
      // The GPU it computes on: where it holds the most (a rank that also touches a second GPU,
      // for a peer's buffer, holds less there); the first one seen when NVML tells no sizes.
      if (!t.any || (p.usedBytes && (!t.most || *p.usedBytes > *t.most))) {
        t.rank.gpu = static_cast<unsigned>(gpu.index);
        t.rank.utilization = gpu.utilizationGpu;
        t.most = p.usedBytes;
        t.any = true;
      }
    }
  }
  std::map<unsigned, RankGpu> out;
  for (const auto& [pid, t] : tallies) {
    out.emplace(pid, t.rank);
  }
  return out;
}

GpuSampler::GpuSampler(std::string nvmlLibrary) : nvmlLibrary_(std::move(nvmlLibrary)) {}

GpuSampler::~GpuSampler() = default;

void GpuSampler::request(const WorkerGroup& group) {
  {
    const std::lock_guard lock(shared_->mutex);
    if (shared_->busy || shared_->absent) {
      return;
    }
  }
  std::vector<WorkerPid> workers;
  for (const Worker& w : group.workers()) {
    if (!w.child || w.status) {
      continue;
    }
    // Our own unreaped child: its pid is no one else's yet, so the start time read now is the
    // worker's.
    const auto pid = static_cast<unsigned>(w.child->pid());
    if (const auto stat = readProcStat(pid)) {
      workers.push_back(WorkerPid{pid, stat->startTicks, w.rank, w.localRank, ""});
    }
  }
  const std::lock_guard lock(shared_->mutex);  // only this thread sets busy
  if (workers.empty()) {
    shared_->byWorkerPid.clear();
    return;
  }
  shared_->busy = true;
  try {
    std::thread([shared = shared_, library = nvmlLibrary_, workers = std::move(workers)] {
      read(*shared, library, workers);
    }).detach();
  } catch (const std::system_error& e) {  // no thread to be had now: the next period tries
    shared_->busy = false;
    log::agent().debug("the live view's GPU reading has no thread: {}", e.what());
  }
}

void GpuSampler::read(Shared& shared, const std::string& library,
                      const std::vector<WorkerPid>& workers) {
  GpuReadOptions options;
  options.nvmlLibrary = library;
  const auto readings = readGpus(options);
  std::map<unsigned, RankGpu> byPid;
  if (readings.isOk()) {
    byPid = rankGpusOf(readings.value(), workers, readProcStat);
  }
  const std::lock_guard lock(shared.mutex);
  shared.busy = false;
  shared.byWorkerPid = std::move(byPid);
  if (readings.isOk()) {
    return;
  }
  if (readings.status().code() == Errc::kNotFound) {  // no driver: the one line, at debug
    shared.absent = true;
    log::agent().debug("the live view shows no GPU: {}", readings.status().message());
  } else if (!shared.failed) {
    shared.failed = true;
    log::agent().debug("the live view's GPU reading failed (tried again each second): {}",
                       readings.status().message());
  }
}

void GpuSampler::fill(NodeStatus& node) const {
  const std::lock_guard lock(shared_->mutex);
  if (shared_->byWorkerPid.empty()) {
    return;
  }
  for (RankStatus& r : node.ranks) {
    const auto it = r.pid > 0 ? shared_->byWorkerPid.find(static_cast<unsigned>(r.pid))
                              : shared_->byWorkerPid.end();
    if (r.state != "running" || it == shared_->byWorkerPid.end()) {
      continue;
    }
    r.gpu = it->second.gpu;
    r.gpuMemoryBytes = it->second.memoryBytes;
    r.gpuUtilization = it->second.utilization;
  }
}

}  // namespace dtrun::agent::detail
