#include "report/event_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <iostream>
#include <system_error>

#include <fcntl.h>

#include <nlohmann/json.hpp>

#include "fd_io.h"
#include "iso_time.h"
#include "json_text.h"

namespace dtrun::agent::detail {
namespace {

using json = nlohmann::ordered_json;

json eventExitJson(const std::optional<ExitStatus>& exit) {
  json j = json::object();
  j["exit_code"] = exit && !exit->signaled ? json(exit->code) : json(nullptr);
  j["signal"] = exit && exit->signaled ? json(signalName(exit->code)) : json(nullptr);
  return j;
}

json ranksOf(const AttemptRecord& a) {
  json ranks = json::array();
  for (const RankRecord& r : a.ranks) {
    ranks.push_back(r.rank);
  }
  return ranks;
}

}  // namespace

EventLog::EventLog(const std::string& path, std::string runId, std::string host)
    : runId_(std::move(runId)), host_(std::move(host)) {
  if (path.empty()) {
    return;
  }
  file_ = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!file_.valid()) {
    std::cerr << "dtrun: cannot write the event log to " << path << ": "
              << std::error_code(errno, std::generic_category()).message()
              << " (the job goes on without it; give --event_log a writable path)\n";
  }
}

void EventLog::write(const std::string& event, Clock::time_point at, const std::string& body) {
  if (!file_.valid()) {
    return;
  }
  json head = json::object();
  head["time"] = isoTime(at);
  head["event"] = event;
  head["seq"] = seq_++;
  head["run_id"] = runId_;
  head["host"] = host_;
  std::string line = jsonText(head);
  if (body.size() > 2) {  // splice the event's members in after the common ones
    line.pop_back();
    line += ',';
    line.append(body, 1, body.size() - 1);
  }
  line += '\n';
  static_cast<void>(io::writeAll(file_.get(), line.data(), line.size()));  // a full disk: dropped
}

void EventLog::agentStarted(const JobRecord& job) {
  write("agent_started", job.agentStart,
        jsonText(json{{"entrypoint", job.entrypoint},
                      {"nproc_per_node", job.nprocPerNode},
                      {"min_nodes", job.minNodes},
                      {"max_nodes", job.maxNodes},
                      {"max_restarts", job.maxRestarts}}));
}

void EventLog::attemptBegun(const AttemptRecord& a, const AttemptRecord* previous) {
  if (previous != nullptr && a.attempt > previous->attempt) {
    write("restart", a.started,
          jsonText(json{{"restart", a.attempt},
                        {"after_attempt", previous->attempt},
                        {"after_cause", previous->cause}}));
  }
  if (!a.round) {
    return;
  }
  if (a.rendezvousJoined) {
    write("round_opened", *a.rendezvousJoined, jsonText(json{{"round", *a.round}}));
  }
  write("round_closed", a.roundClosed.value_or(a.started),
        jsonText(json{{"round", *a.round},
                      {"node_rank", a.nodeRank},
                      {"node_count", a.nodeCount},
                      {"world_size", a.worldSize},
                      {"ranks", ranksOf(a)}}));
}

void EventLog::attemptStarted(const AttemptRecord& a) {
  json pids = json::array();
  for (const RankRecord& r : a.ranks) {
    pids.push_back(r.pid);
  }
  write("attempt_started", a.spawned.value_or(a.started),
        jsonText(json{{"attempt", a.attempt},
                      {"round", a.round ? json(*a.round) : json(nullptr)},
                      {"world_size", a.worldSize},
                      {"ranks", ranksOf(a)},
                      {"pids", pids}}));
}

void EventLog::workerExited(const AttemptRecord& a, const RankRecord& r) {
  json body{{"attempt", a.attempt}, {"rank", r.rank}, {"local_rank", r.localRank}, {"pid", r.pid}};
  body.update(eventExitJson(r.exit));
  write("worker_exited", Clock::now(), jsonText(body));
}

void EventLog::attemptEnded(const AttemptRecord& a) {
  const auto ended = a.ended.value_or(Clock::now());
  write("attempt_ended", ended,
        jsonText(json{
            {"attempt", a.attempt},
            {"round", a.round ? json(*a.round) : json(nullptr)},
            {"cause", a.cause},
            {"message", a.message},
            {"duration_s",
             std::round(std::chrono::duration<double>(ended - a.started).count() * 1000) / 1000}}));
}

void EventLog::hang(const AttemptRecord& a, const HangRecord& h) {
  json suspects = json::array();
  for (const HangRank& r : h.ranks) {
    if (r.suspect) {
      suspects.push_back(r.rank);
    }
  }
  write("hang", h.detectedAt,
        jsonText(json{{"attempt", a.attempt},
                      {"reason", h.reason},
                      {"summary", h.summary},
                      {"suspects", suspects}}));
}

void EventLog::signal(int sig, bool stops) {
  write("signal", Clock::now(),
        jsonText(json{{"signal", signalName(sig)}, {"action", stops ? "stop" : "forward"}}));
}

void EventLog::jobEnded(const JobRecord& job) {
  write("job_ended", job.ended.value_or(Clock::now()),
        jsonText(json{{"outcome", job.outcome},
                      {"exit_code", job.exitCode},
                      {"attempts", job.attempts.size()}}));
}

void EventLog::other(const std::string& event, const std::string& fieldsJson) {
  write(event, Clock::now(), "{" + fieldsJson + "}");
}

}  // namespace dtrun::agent::detail
