#include "health/gpu_readings.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <system_error>

#include <nlohmann/json.hpp>

#include "health/gpu_nvml.h"
#include "job/job.h"

namespace dtrun::agent {
namespace detail {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxAncestors = 64;

// The record of `pid` started at `startTicks`, or nullptr.
const WorkerPid* recorded(const std::vector<WorkerPid>& workers, unsigned pid,
                          std::uint64_t startTicks) {
  const auto it = std::find_if(workers.begin(), workers.end(), [&](const WorkerPid& w) {
    return w.pid == pid && w.startTicks == startTicks;
  });
  return it == workers.end() ? nullptr : &*it;
}

// `dir` as an absolute path when it holds a dtrun run (run.json, or an attempt_N/ directory).
Result<fs::path> runDirectory(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::invalidArgument(dir.string() +
                                   " is not a directory: give a run's <log_dir>/<run_id>, the "
                                   "directory dtrun's banner names");
  }
  fs::path path = fs::absolute(dir, ec).lexically_normal();
  if (path.filename().empty()) {  // "run/"
    path = path.parent_path();
  }
  bool isRun = fs::exists(path / "run.json", ec);
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    isRun = isRun ||
            (entry.path().filename().string().starts_with("attempt_") && entry.is_directory(ec));
  }
  if (!isRun) {
    return Status::invalidArgument(dir.string() +
                                   " holds no dtrun run (no run.json, no attempt_N/): give "
                                   "<log_dir>/<run_id>, the directory dtrun's banner names");
  }
  return path;
}

// The host run.json names; "" when there is none.
std::string hostOfRun(const fs::path& runDir) {
  std::ifstream in(runDir / "run.json");
  const auto facts = nlohmann::json::parse(in, nullptr, false);
  if (!facts.is_object()) {
    return {};
  }
  const auto host = facts.find("host");
  return host != facts.end() && host->is_string() ? host->get<std::string>() : std::string();
}

GpuReading readingOf(const GpuState& state, const std::vector<WorkerPid>& workers) {
  GpuReading gpu;
  gpu.index = state.index;
  gpu.name = state.name;
  gpu.uuid = state.uuid;
  gpu.utilizationGpu = state.utilizationGpu;
  gpu.utilizationMemory = state.utilizationMemory;
  gpu.memoryUsedBytes = state.memoryUsedBytes;
  gpu.memoryTotalBytes = state.memoryTotalBytes;
  for (const GpuProcess& p : state.processes) {
    GpuProcessReading process;
    process.pid = p.pid;
    process.name = p.name;
    if (p.usedBytes != GpuProcess::kUnknownBytes) {
      process.usedBytes = p.usedBytes;
    }
    if (const WorkerPid* w = workers.empty() ? nullptr : workerOf(p.pid, workers, readProcStat)) {
      process.rank = w->rank;
      process.localRank = w->localRank;
    }
    gpu.processes.push_back(std::move(process));
  }
  return gpu;
}

}  // namespace

const WorkerPid* workerOf(unsigned pid, const std::vector<WorkerPid>& workers,
                          const ProcStatReader& read) {
  const std::optional<ProcStat> self = read(pid);
  if (!self || self->state == 'Z') {
    return nullptr;  // gone (or exited, not yet reaped), or in another pid namespace
  }
  std::optional<ProcStat> at = self;
  for (int depth = 0; at && depth < kMaxAncestors; ++depth) {
    if (const WorkerPid* w = recorded(workers, at->pid, at->startTicks)) {
      return w;
    }
    if (at->ppid <= 1) {
      break;  // init (or the namespace's first process) is nobody's worker
    }
    at = read(at->ppid);
  }
  // Adopted after its parent exited: the worker's process group still holds it.
  const WorkerPid* leader = nullptr;
  for (const WorkerPid& w : workers) {
    if (w.pid == self->pgrp && (leader == nullptr || w.startTicks > leader->startTicks)) {
      leader = &w;  // the latest spawn of that pid
    }
  }
  if (leader == nullptr) {
    return nullptr;
  }
  const std::optional<ProcStat> alive = read(leader->pid);
  if (alive && alive->startTicks != leader->startTicks) {
    return nullptr;  // the pid now leads another group
  }
  return leader;
}

}  // namespace detail

Result<GpuReadings> readGpus(const GpuReadOptions& options) {
  GpuReadings out;
  std::vector<detail::WorkerPid> workers;
  if (!options.runDir.empty()) {
    DTRUN_ASSIGN_OR_RETURN(out.runDir, detail::runDirectory(options.runDir));
    workers = detail::readWorkerPids(out.runDir);
    out.workersRecorded = workers.size();
    out.runHost = detail::hostOfRun(out.runDir);
  }
  out.host = detail::hostName();
  auto nvml = detail::loadNvml(options.nvmlLibrary);
  if (!nvml.isOk()) {  // no driver, or one that does not start: NVML is not there to read
    return Status::error(Errc::kNotFound, nvml.status().message());
  }
  DTRUN_ASSIGN_OR_RETURN(const int count, nvml.value()->deviceCount());
  std::vector<int> indices(static_cast<std::size_t>(std::max(count, 0)));
  std::iota(indices.begin(), indices.end(), 0);
  out.time = std::chrono::system_clock::now();
  DTRUN_ASSIGN_OR_RETURN(const auto states, nvml.value()->query(indices));
  for (const detail::GpuState& state : states) {
    if (state.present) {  // else gone since it was counted
      out.gpus.push_back(detail::readingOf(state, workers));
    }
  }
  return out;
}

}  // namespace dtrun::agent
