#include "report/run_report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dtrun/placement.h"

#include "iso_time.h"
#include "job/job.h"
#include "json_text.h"

namespace dtrun::agent::detail {
namespace {

using json = nlohmann::ordered_json;

}  // namespace

namespace {

double seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Seconds after `origin`, rounded to the millisecond; null when unknown.
json offset(Clock::time_point origin, const std::optional<Clock::time_point>& time) {
  if (!time) {
    return nullptr;
  }
  return std::round(seconds(origin, *time) * 1000.0) / 1000.0;
}

json between(const std::optional<Clock::time_point>& from,
             const std::optional<Clock::time_point>& to) {
  if (!from || !to) {
    return nullptr;
  }
  return std::round(seconds(*from, *to) * 1000.0) / 1000.0;
}

json exitJson(const std::optional<ExitStatus>& exit) {
  json out = {{"exit_code", nullptr}, {"signal", nullptr}};
  if (exit && exit->signaled) {
    out["signal"] = signalName(exit->code);
    out["exit_code"] = exit->shellCode();
  } else if (exit) {
    out["exit_code"] = exit->code;
  }
  return out;
}

json phasesOf(const AttemptRecord& a) {
  return {{"rendezvous_s", between(a.rendezvousJoined, a.roundClosed)},
          {"spawn_s", between(a.started, a.firstRunning)},
          {"run_s", between(a.firstRunning, a.stopBegan ? a.stopBegan : a.ended)},
          {"stop_s", between(a.stopBegan, a.ended)}};
}

json attemptJson(const JobRecord& job, const AttemptRecord& a) {
  json ranks = json::array();
  json timelineRanks = json::array();
  for (const RankRecord& r : a.ranks) {
    json rank = {{"rank", r.rank},
                 {"local_rank", r.localRank},
                 {"pid", r.pid > 0 ? json(r.pid) : json(nullptr)},
                 {"log_dir", r.logDir}};
    if (r.placement) {
      const LocalPlacement& p = *r.placement;
      rank["placement"] = {
          {"cpus", placement::formatCpuList(p.cpus)},
          {"numa_nodes", placement::formatCpuList(p.memNodes)},
          {"gpus", p.gpus},
          {"cuda_visible_devices", p.visibleDevices ? json(*p.visibleDevices) : json(nullptr)}};
    }
    rank.update(exitJson(r.exit));
    if (!r.logError.empty()) {
      rank["log_error"] = r.logError;
    }
    if (!r.stuck.empty()) {
      rank["stuck"] = r.stuck;
    }
    ranks.push_back(rank);
    timelineRanks.push_back({{"rank", r.rank},
                             {"store_connected", offset(job.agentStart, r.storeConnected)},
                             {"communicator_ready", offset(job.agentStart, r.communicatorReady)}});
  }
  return {
      {"attempt", a.attempt},
      {"round", a.round ? json(*a.round) : json(nullptr)},
      {"node_rank", a.nodeRank},
      {"node_count", a.nodeCount},
      {"world_size", a.worldSize},
      {"started_at", isoTime(a.started)},
      {"ended_at", a.ended ? json(isoTime(*a.ended)) : json(nullptr)},
      {"duration_s", between(a.started, a.ended)},
      {"cause", a.cause.empty() ? "running" : a.cause},
      {"message", a.message},
      {"ranks", ranks},
      {"timeline",
       {{"agent_start", 0.0},
        {"rendezvous_joined", offset(job.agentStart, a.rendezvousJoined)},
        {"round_closed", offset(job.agentStart, a.roundClosed)},
        {"workers_spawned", offset(job.agentStart, a.spawned)},
        {"first_worker_running", offset(job.agentStart, a.firstRunning)},
        {"ranks", timelineRanks}}},
      {"phases", phasesOf(a)},
  };
}

json failureJson(const WorkerFailure& f, const std::string& host) {
  json out = {{"rank", f.rank >= 0 ? json(f.rank) : json(nullptr)},
              {"local_rank", f.localRank >= 0 ? json(f.localRank) : json(nullptr)},
              {"host", f.host.empty() ? host : f.host},
              {"node_rank", f.nodeRank >= 0 ? json(f.nodeRank) : json(nullptr)},
              {"pid", f.pid},
              {"time", isoTime(f.time)},
              {"error_file", f.errorFile.empty() ? json(nullptr) : json(f.errorFile)},
              {"message", f.message}};
  out.update(exitJson(f.status));
  return out;
}

json hangJson(const HangRecord& h) {
  json ranks = json::array();
  std::vector<int> suspects;
  for (const HangRank& r : h.ranks) {
    if (r.suspect) {
      suspects.push_back(r.rank);
    }
    ranks.push_back({{"rank", r.rank},
                     {"host", r.host},
                     {"pid", r.pid},
                     {"suspect", r.suspect},
                     {"ops", r.ops},
                     {"op", r.op.empty() ? json(nullptr) : json(r.op)},
                     {"group", r.group.empty() ? json(nullptr) : json(r.group)},
                     {"bytes", r.bytes},
                     {"in_op_s", std::round(r.inOpSeconds * 1000.0) / 1000.0},
                     {"idle_s", std::round(r.idleSeconds * 1000.0) / 1000.0},
                     {"stack_file", r.stackFile},
                     {"stack", r.stack}});
  }
  return {{"detected_at", isoTime(h.detectedAt)},
          {"reason", h.reason},
          {"summary", h.summary},
          {"suspects", suspects},
          {"report_file", h.reportFile},
          {"ranks", ranks}};
}

}  // namespace

std::string reportJson(const JobRecord& job) {
  json attempts = json::array();
  json totals = {{"rendezvous_s", 0.0}, {"spawn_s", 0.0}, {"run_s", 0.0}, {"stop_s", 0.0}};
  for (const AttemptRecord& a : job.attempts) {
    attempts.push_back(attemptJson(job, a));
    const json phases = phasesOf(a);
    for (const char* name : {"rendezvous_s", "spawn_s", "run_s", "stop_s"}) {
      if (phases[name].is_number()) {
        totals[name] =
            std::round((totals[name].get<double>() + phases[name].get<double>()) * 1000.0) / 1000.0;
      }
    }
  }
  const AttemptRecord* last = job.attempts.empty() ? nullptr : &job.attempts.back();
  json doc = {
      {"schema", "dtrun-run-report/1"},
      {"run_id", job.runId},
      {"entrypoint", job.entrypoint},
      {"command", job.command},
      {"host", job.host},
      {"dtrun_version", job.dtrunVersion},
      {"nodes",
       {{"min", job.minNodes},
        {"max", job.maxNodes},
        {"count", last != nullptr ? last->nodeCount : 0},
        {"this_node_rank", last != nullptr ? json(last->nodeRank) : json(nullptr)}}},
      {"nproc_per_node", job.nprocPerNode},
      {"world_size", last != nullptr ? last->worldSize : 0},
      {"max_restarts", job.maxRestarts},
      {"started_at", isoTime(job.agentStart)},
      {"ended_at", job.ended ? json(isoTime(*job.ended)) : json(nullptr)},
      {"duration_s", between(job.agentStart, job.ended)},
      {"outcome", job.outcome},
      {"exit_code", job.exitCode},
      {"attempts", attempts},
      {"root_cause", job.rootCause ? failureJson(*job.rootCause, job.host) : json(nullptr)},
      {"hang", job.hang ? hangJson(*job.hang) : json(nullptr)},
      {"phases", totals},
  };
  if (!job.stragglers.empty()) {
    json list = json::array();
    for (const StragglerRecord& s : job.stragglers) {
      list.push_back({{"time", isoTime(s.time)},
                      {"attempt", s.attempt},
                      {"rank", s.rank},
                      {"node_rank", s.nodeRank},
                      {"host", s.host},
                      {"late_s", s.lateSeconds},
                      {"late_count", s.lateCount},
                      {"judged", s.judged}});
    }
    doc["stragglers"] = std::move(list);
  }
  if (!job.nodeReports.empty()) {
    json nodes = json::array();
    for (const std::string& text : job.nodeReports) {
      auto node = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (node.is_object()) {
        nodes.push_back(std::move(node));
      }
    }
    doc["node_reports"] = std::move(nodes);
  }
  return jsonText(doc, 2) + "\n";
}

std::string formatSummary(const JobRecord& job) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2);
  out << "dtrun: job '" << job.runId << "' " << job.outcome << " after " << job.attempts.size()
      << " attempt(s)";
  if (job.ended) {
    out << " in " << seconds(job.agentStart, *job.ended) << " s";
  }
  out << " (exit code " << job.exitCode << ")\n";
  for (const AttemptRecord& a : job.attempts) {
    out << "  attempt " << a.attempt << ": " << seconds(job.agentStart, a.started) << "-"
        << (a.ended ? seconds(job.agentStart, *a.ended) : 0.0) << " s, "
        << (a.cause.empty() ? "running" : a.cause);
    if (!a.message.empty()) {
      out << ": " << a.message;
    }
    out << "\n";
  }
  if (job.rootCause && job.hang && !job.rootCause->status.signaled &&
      job.rootCause->status.code == kExitHang) {
    // dtrun stopped the ranks itself: the hang is the cause, not the exit code it gave them.
    out << "  root cause: hang: " << job.hang->summary << "\n";
  } else if (job.rootCause) {
    const WorkerFailure& f = *job.rootCause;
    out << "  root cause: rank " << f.rank << " (local rank " << f.localRank << ", pid " << f.pid
        << ") on " << (f.host.empty() ? job.host : f.host) << ": " << f.status.describe() << "\n";
  }
  if (job.hang) {
    out << "  hang: " << job.hang->summary << " (stacks: " << job.hang->reportFile << ")\n";
  }
  for (const StragglerRecord& s : job.stragglers) {
    out << "  straggler: rank " << s.rank << " on " << s.host << " (node " << s.nodeRank
        << ", attempt " << s.attempt << "): " << s.lateSeconds << " s late in " << s.lateCount
        << " of " << s.judged << " collectives\n";
  }
  return out.str();
}

std::string formatTimeline(const JobRecord& job, const AttemptRecord& a) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3);
  out << "dtrun: startup timeline of attempt " << a.attempt
      << " (seconds after the agent started)\n";
  const auto row = [&](const std::string& what, const std::optional<Clock::time_point>& when) {
    out << "  " << std::left << std::setw(28) << what;
    if (when) {
      out << std::right << std::setw(9) << seconds(job.agentStart, *when) << "\n";
    } else {
      out << std::right << std::setw(9) << "-"
          << "\n";
    }
  };
  row("agent start", job.agentStart);
  row("rendezvous joined", a.rendezvousJoined);
  row("round closed", a.roundClosed);
  row("workers spawned", a.spawned);
  row("first worker running", a.firstRunning);
  for (const RankRecord& r : a.ranks) {
    row("rank " + std::to_string(r.rank) + " store connected", r.storeConnected);
    row("rank " + std::to_string(r.rank) + " communicator ready", r.communicatorReady);
  }
  return out.str();
}

bool writeFileAtomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << text;
    if (!file.flush()) {
      return false;
    }
  }
  return std::rename(temporary.c_str(), path.c_str()) == 0;
}

}  // namespace dtrun::agent::detail
