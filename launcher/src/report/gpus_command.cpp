// `dtrun gpus [RUN_DIR] [--json]`: what NVML reads of every GPU on this host now (utilisation,
// memory, compute processes), each process named by its rank when RUN_DIR is a run's directory
// (dtrun/gpu_readings.h). One line per GPU and one per process under it, or one JSON object.
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dtrun/gpu_readings.h"
#include "dtrun/launcher.h"

#include "text.h"

namespace dtrun::launcher {
namespace {

using agent::GpuProcessReading;
using agent::GpuReading;
using agent::GpuReadings;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

struct GpusCommandOptions {
  std::string runDir;
  bool json = false;
};

// Whole MiB, as nvidia-smi shows memory.
std::optional<std::uint64_t> mib(const std::optional<std::uint64_t>& bytes) {
  return bytes ? std::optional<std::uint64_t>(*bytes / kMiB) : std::nullopt;
}

template <typename T>
nlohmann::ordered_json orNull(const std::optional<T>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json rankOrNull(int rank) {
  return rank >= 0 ? nlohmann::ordered_json(rank) : nlohmann::ordered_json(nullptr);
}

std::string readingsJson(const GpuReadings& readings) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(readings.time.time_since_epoch())
          .count();
  nlohmann::ordered_json out;
  out["time"] = static_cast<double>(ms) / 1000.0;  // seconds, to the millisecond
  out["host"] = readings.host;
  out["run_dir"] = readings.runDir.empty() ? nlohmann::ordered_json(nullptr)
                                           : nlohmann::ordered_json(readings.runDir.string());
  out["gpus"] = nlohmann::ordered_json::array();
  for (const GpuReading& gpu : readings.gpus) {
    nlohmann::ordered_json g;
    g["index"] = gpu.index;
    g["name"] = gpu.name;
    g["uuid"] = gpu.uuid;
    g["utilization_gpu_percent"] = orNull(gpu.utilizationGpu);
    g["utilization_memory_percent"] = orNull(gpu.utilizationMemory);
    g["memory_used_mib"] = orNull(mib(gpu.memoryUsedBytes));
    g["memory_total_mib"] = orNull(mib(gpu.memoryTotalBytes));
    g["processes"] = nlohmann::ordered_json::array();
    for (const GpuProcessReading& p : gpu.processes) {
      nlohmann::ordered_json process;
      process["pid"] = p.pid;
      process["name"] = p.name;
      process["used_memory_mib"] = orNull(mib(p.usedBytes));
      process["rank"] = rankOrNull(p.rank);
      process["local_rank"] = rankOrNull(p.localRank);
      g["processes"].push_back(std::move(process));
    }
    out["gpus"].push_back(std::move(g));
  }
  return out.dump() + "\n";
}

std::string mibText(const std::optional<std::uint64_t>& bytes) {
  return bytes ? std::to_string(*bytes / kMiB) + " MiB" : std::string("memory not reported");
}

// "GPU 0 NVIDIA H100 80GB HBM3: utilisation 37 %, memory 1836 of 81559 MiB", then a line per
// process: "  rank 0 (local 0) pid 1234 python3 812 MiB".
std::string readingsText(const GpuReadings& readings) {
  std::ostringstream out;
  for (const GpuReading& gpu : readings.gpus) {
    out << "GPU " << gpu.index << (gpu.name.empty() ? "" : " " + gpu.name) << ": utilisation "
        << (gpu.utilizationGpu ? std::to_string(*gpu.utilizationGpu) + " %" : "not reported")
        << ", memory ";
    if (gpu.memoryUsedBytes && gpu.memoryTotalBytes) {
      out << *gpu.memoryUsedBytes / kMiB << " of " << *gpu.memoryTotalBytes / kMiB << " MiB";
    } else {
      out << "not reported";
    }
    out << "\n";
    for (const GpuProcessReading& p : gpu.processes) {
      out << "  ";
      if (p.rank >= 0) {
        out << "rank " << p.rank << " (local " << p.localRank << ") ";
      } else if (!readings.runDir.empty()) {
        out << "not this run's: ";
      }
      out << "pid " << p.pid << " " << (p.name.empty() ? "(not visible here)" : p.name) << " "
          << mibText(p.usedBytes) << "\n";
    }
  }
  if (readings.gpus.empty()) {
    out << "dtrun gpus: NVML sees no GPU\n";
  }
  return out.str();
}

int runGpus(const GpusCommandOptions& options, const std::string& nvmlLibrary) {
  agent::GpuReadOptions read;
  read.runDir = options.runDir;
  if (!nvmlLibrary.empty()) {
    read.nvmlLibrary = nvmlLibrary;
  }
  auto readings = agent::readGpus(read);
  if (!readings.isOk()) {
    const Status& s = readings.status();
    if (s.code() == Errc::kNotFound) {
      std::cerr << "dtrun gpus: no NVML here: " << s.message()
                << ": install the NVIDIA driver, or set DTRUN_NVML_LIBRARY to its "
                   "libnvidia-ml.so.1\n";
      return 2;
    }
    std::cerr << "dtrun gpus: " << (s.code() == Errc::kInvalidArgument ? "" : "NVML: ")
              << s.message() << "\n";
    return s.code() == Errc::kInvalidArgument ? 2 : 1;
  }
  const GpuReadings& r = readings.value();
  if (!r.runDir.empty() && r.workersRecorded == 0) {
    std::cerr << "dtrun gpus: " << r.runDir.string()
              << " records no worker's pid (no worker started yet, or a dtrun before the "
                 "record): no process is named by rank\n";
  } else if (!r.runDir.empty() && !r.runHost.empty() && r.runHost != r.host) {
    std::cerr << "dtrun gpus: " << r.runDir.string() << " is a run on " << r.runHost << ", this is "
              << r.host << ": run dtrun gpus there to see its ranks\n";
  }
  std::cout << (options.json ? readingsJson(r) : readingsText(r)) << std::flush;
  return std::cout ? 0 : 1;
}

}  // namespace

std::function<int()> addGpusCommand(CLI::App& app) {
  auto options = std::make_shared<GpusCommandOptions>();
  CLI::App* gpus = app.add_subcommand(
      "gpus",
      "Every GPU on this host as NVML reads it now (utilisation, memory, compute processes); "
      "with a run directory, the rank of each of its processes");
  gpus->add_option("run_dir", options->runDir,
                   "A run's directory (<log_dir>/<run_id>, running or finished)");
  gpus->add_flag("--json", options->json,
                 "One JSON object: time (seconds since the epoch, to the ms), host, run_dir, gpus");
  return [gpus, options]() {
    return gpus->parsed() ? runGpus(*options, text::envText("DTRUN_NVML_LIBRARY")) : -1;
  };
}

}  // namespace dtrun::launcher
