#include "live/metrics_text.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>

namespace dtrun::agent::detail {
namespace {

struct Family {
  const char* name;
  const char* type;  // "gauge" or "counter"
  const char* help;
};

std::string nodeLabels(const NodeStatus& n) {
  return "run_id=\"" + escapeLabelValue(n.runId) + "\",node=\"" + std::to_string(n.nodeRank) +
         "\",host=\"" + escapeLabelValue(n.host) + "\"";
}

std::string rankLabels(const NodeStatus& n, const RankStatus& r) {
  return nodeLabels(n) + ",rank=\"" + std::to_string(r.rank) + "\",local_rank=\"" +
         std::to_string(r.localRank) + "\"";
}

// The shortest text that keeps the value (Prometheus parses Go's float syntax).
std::string number(double value) {
  if (std::isnan(value)) {
    return "NaN";
  }
  std::array<char, 32> text{};
  static_cast<void>(std::snprintf(text.data(), text.size(), "%.15g", value));
  return text.data();
}

// A reading times `factor` (percent to a ratio), or nothing when there is no reading.
template <typename T>
std::optional<double> scaled(const std::optional<T>& value, double factor) {
  if (!value) {
    return std::nullopt;
  }
  return static_cast<double>(*value) * factor;
}

void header(std::string& out, const Family& f) {
  out +=
      std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type + "\n";
}

std::string sample(const Family& f, const std::string& labels, double value) {
  return std::string(f.name) + "{" + labels + "} " + number(value) + "\n";
}

// One family with a sample per rank that has a value.
void rankFamily(std::string& out, const std::vector<NodeStatus>& nodes, const Family& f,
                const std::function<std::optional<double>(const RankStatus&)>& value) {
  std::string samples;
  for (const NodeStatus& n : nodes) {
    for (const RankStatus& r : n.ranks) {
      if (const auto v = value(r)) {
        samples += sample(f, rankLabels(n, r), *v);
      }
    }
  }
  if (!samples.empty()) {
    header(out, f);
    out += samples;
  }
}

void nodeFamily(std::string& out, const std::vector<NodeStatus>& nodes, const Family& f,
                const std::function<double(const NodeStatus&)>& value) {
  header(out, f);
  for (const NodeStatus& n : nodes) {
    out += sample(f, nodeLabels(n), value(n));
  }
}

}  // namespace

std::string escapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string metricsText(const std::vector<NodeStatus>& nodes) {
  std::string out;
  std::uint64_t mostOps = 0;  // the job's furthest rank: lag is counted from it
  for (const NodeStatus& n : nodes) {
    for (const RankStatus& r : n.ranks) {
      mostOps = std::max(mostOps, r.ops);
    }
  }
  nodeFamily(out, nodes, {"dtrun_workers_up", "gauge", "Worker processes running on the node."},
             [](const NodeStatus& n) {
               return static_cast<double>(
                   std::count_if(n.ranks.begin(), n.ranks.end(),
                                 [](const RankStatus& r) { return r.state == "running"; }));
             });
  nodeFamily(out, nodes,
             {"dtrun_restarts_total", "counter", "Restarts of the worker group so far."},
             [](const NodeStatus& n) { return static_cast<double>(n.restarts); });
  nodeFamily(out, nodes,
             {"dtrun_round", "gauge", "The rendezvous round the node's workers belong to."},
             [](const NodeStatus& n) { return static_cast<double>(n.round); });
  nodeFamily(out, nodes,
             {"dtrun_agent_uptime_seconds", "gauge", "Seconds since the node's agent started."},
             [](const NodeStatus& n) { return n.uptimeSeconds; });
  rankFamily(
      out, nodes, {"dtrun_worker_up", "gauge", "Whether the rank's worker runs (1) or not (0)."},
      [](const RankStatus& r) -> std::optional<double> { return r.state == "running" ? 1 : 0; });
  rankFamily(
      out, nodes,
      {"dtrun_rank_operations_total", "counter",
       "Collectives or steps the rank began (its progress counter)."},
      [](const RankStatus& r) -> std::optional<double> { return static_cast<double>(r.ops); });
  rankFamily(out, nodes,
             {"dtrun_rank_seconds_since_progress", "gauge",
              "Seconds since the rank last began or ended an operation."},
             [](const RankStatus& r) { return r.sinceProgressSeconds; });
  rankFamily(out, nodes,
             {"dtrun_rank_lag_operations", "gauge",
              "Operations the rank is behind the job's furthest rank."},
             [mostOps](const RankStatus& r) -> std::optional<double> {
               return static_cast<double>(mostOps - r.ops);
             });
  rankFamily(
      out, nodes,
      {"dtrun_rank_resident_memory_bytes", "gauge", "Resident memory of the rank's process."},
      [](const RankStatus& r) { return scaled(r.rssBytes, 1.0); });
  rankFamily(out, nodes,
             {"dtrun_rank_cpu_ratio", "gauge",
              "CPU time per second of the rank's process over the last second (1 = one CPU)."},
             [](const RankStatus& r) { return scaled(r.cpuPercent, 0.01); });
  rankFamily(out, nodes,
             {"dtrun_rank_gpu_utilization_ratio", "gauge",
              "How busy the GPU the rank computes on was (NVML, 0 to 1)."},
             [](const RankStatus& r) { return scaled(r.gpuUtilization, 0.01); });
  rankFamily(
      out, nodes,
      {"dtrun_rank_gpu_memory_bytes", "gauge", "GPU memory the rank's process holds (NVML)."},
      [](const RankStatus& r) { return scaled(r.gpuMemoryBytes, 1.0); });
  // Only where stragglers are judged (the gathering agent, with --straggler_threshold).
  rankFamily(out, nodes,
             {"dtrun_rank_straggler", "gauge",
              "Whether the rank is named a straggler (1): it reaches collectives late."},
             [](const RankStatus& r) -> std::optional<double> {
               if (!r.lateSeconds) {
                 return std::nullopt;
               }
               return r.straggler ? 1 : 0;
             });
  rankFamily(out, nodes,
             {"dtrun_rank_late_seconds", "gauge",
              "How late the rank reaches the collectives it is late for: the median over the "
              "straggler window (0 when it is late for none)."},
             [](const RankStatus& r) { return r.lateSeconds; });
  return out;
}

}  // namespace dtrun::agent::detail
