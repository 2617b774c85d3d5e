#include "live/node_status.h"

#include <utility>

namespace dtrun::agent::detail {
namespace {

template <typename T>
void putIf(nlohmann::json& j, const char* key, const std::optional<T>& value) {
  if (value) {
    j[key] = *value;
  }
}

template <typename T>
std::optional<T> optionalOf(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return std::nullopt;
  }
  return it->get<T>();
}

}  // namespace

nlohmann::json toJson(const RankStatus& r) {
  nlohmann::json j = {{"rank", r.rank}, {"local_rank", r.localRank},
                      {"pid", r.pid},   {"state", r.state},
                      {"op", r.op},     {"ops", r.ops}};
  putIf(j, "exit_code", r.exitCode);
  putIf(j, "in_op_seconds", r.inOpSeconds);
  putIf(j, "since_progress_seconds", r.sinceProgressSeconds);
  putIf(j, "ops_per_second", r.opsPerSecond);
  putIf(j, "rss_bytes", r.rssBytes);
  putIf(j, "cpu_percent", r.cpuPercent);
  putIf(j, "gpu", r.gpu);
  putIf(j, "gpu_memory_bytes", r.gpuMemoryBytes);
  putIf(j, "gpu_utilization", r.gpuUtilization);
  if (!r.entryTimes.empty()) {
    j["entry_times"] = r.entryTimes;
  }
  if (r.straggler) {
    j["straggler"] = true;
  }
  putIf(j, "late_seconds", r.lateSeconds);
  return j;
}

nlohmann::json toJson(const NodeStatus& n) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankStatus& r : n.ranks) {
    ranks.push_back(toJson(r));
  }
  return {{"host", n.host},           {"run_id", n.runId},
          {"node_rank", n.nodeRank},  {"node_count", n.nodeCount},
          {"round", n.round},         {"attempt", n.attempt},
          {"restarts", n.restarts},   {"max_restarts", n.maxRestarts},
          {"state", n.state},         {"uptime_seconds", n.uptimeSeconds},
          {"ranks", std::move(ranks)}};
}

std::optional<NodeStatus> nodeStatusFromJson(const nlohmann::json& j) {
  try {
    NodeStatus n;
    n.host = j.at("host").get<std::string>();
    n.runId = j.at("run_id").get<std::string>();
    n.nodeRank = j.at("node_rank").get<int>();
    n.nodeCount = j.at("node_count").get<int>();
    n.round = j.at("round").get<std::int64_t>();
    n.attempt = j.at("attempt").get<int>();
    n.restarts = j.at("restarts").get<int>();
    n.maxRestarts = j.at("max_restarts").get<int>();
    n.state = j.at("state").get<std::string>();
    n.uptimeSeconds = j.at("uptime_seconds").get<double>();
    for (const auto& rj : j.at("ranks")) {
      RankStatus r;
      r.rank = rj.at("rank").get<int>();
      r.localRank = rj.at("local_rank").get<int>();
      r.pid = rj.at("pid").get<int>();
      r.state = rj.at("state").get<std::string>();
      r.op = rj.at("op").get<std::string>();
      r.ops = rj.at("ops").get<std::uint64_t>();
      r.exitCode = optionalOf<int>(rj, "exit_code");
      r.inOpSeconds = optionalOf<double>(rj, "in_op_seconds");
      r.sinceProgressSeconds = optionalOf<double>(rj, "since_progress_seconds");
      r.opsPerSecond = optionalOf<double>(rj, "ops_per_second");
      r.rssBytes = optionalOf<std::uint64_t>(rj, "rss_bytes");
      r.cpuPercent = optionalOf<double>(rj, "cpu_percent");
      r.gpu = optionalOf<unsigned>(rj, "gpu");
      r.gpuMemoryBytes = optionalOf<std::uint64_t>(rj, "gpu_memory_bytes");
      r.gpuUtilization = optionalOf<unsigned>(rj, "gpu_utilization");
      if (const auto it = rj.find("entry_times"); it != rj.end()) {
        r.entryTimes = it->get<std::vector<std::pair<std::uint64_t, std::int64_t>>>();
      }
      r.straggler = rj.value("straggler", false);
      r.lateSeconds = optionalOf<double>(rj, "late_seconds");
      n.ranks.push_back(std::move(r));
    }
    return n;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace dtrun::agent::detail
