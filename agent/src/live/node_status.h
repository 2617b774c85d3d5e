// What the live view knows of one node at one moment: the job's round and attempt, and each
// local rank's process, operation and use of the machine. Plain data with its JSON form (the
// status endpoint's body, and what a node publishes for the whole-job view); thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrun::agent::detail {

struct RankStatus {
  int rank = 0;
  int localRank = 0;
  int pid = 0;
  std::string state;  // "running", "succeeded", "failed", "starting"
  std::optional<int> exitCode;
  // From the rank's progress file (the Python hook, libdtrt): the operation it is in or was last
  // in, how many it began, how long since it last began or ended one.
  std::string op;
  std::uint64_t ops = 0;
  std::optional<double> inOpSeconds;            // set while inside an operation
  std::optional<double> sinceProgressSeconds;   // nullopt: the rank never reported
  std::optional<double> opsPerSecond;           // over the last sampling period
  std::optional<std::uint64_t> rssBytes;        // /proc/<pid>/statm
  std::optional<double> cpuPercent;             // of one CPU, over the last sampling period
  std::optional<unsigned> gpu;                  // NVML's index of the GPU it computes on
  std::optional<std::uint64_t> gpuMemoryBytes;  // what it holds there
  std::optional<unsigned> gpuUtilization;       // that GPU's busy percentage
  // With straggler detection: the last operations' numbers and CLOCK_REALTIME entry times (from
  // the progress file, for the gathering agent), and the judgement of the job's ranks.
  std::vector<std::pair<std::uint64_t, std::int64_t>> entryTimes;
  bool straggler = false;
  std::optional<double> lateSeconds;  // median lateness over the window's collectives
};

struct NodeStatus {
  std::string host;
  std::string runId;
  int nodeRank = 0;
  int nodeCount = 1;
  std::int64_t round = 0;
  int attempt = 0;
  int restarts = 0;
  int maxRestarts = 0;
  std::string state;  // "rendezvous", "running", "restarting", "stopping", "finished"
  double uptimeSeconds = 0;
  std::vector<RankStatus> ranks;
};

nlohmann::json toJson(const RankStatus& rank);
nlohmann::json toJson(const NodeStatus& node);
// Back from toJson's form (another node's, through the store); nullopt when it is not one.
std::optional<NodeStatus> nodeStatusFromJson(const nlohmann::json& json);

}  // namespace dtrun::agent::detail
