// The live view's parts: the Prometheus text of a job, its JSON and back, and the status endpoint
// against real sockets: bodies, the token, bad requests (junk, a huge header, a slow client) each
// answered with a clear HTTP error while other clients are still served at once.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "live/gpu_sampler.h"
#include "live/live.h"
#include "live/status_server.h"

namespace {

using dtrun::agent::GpuProcessReading;
using dtrun::agent::GpuReading;
using dtrun::agent::GpuReadings;
using dtrun::agent::detail::NodeStatus;
using dtrun::agent::detail::ProcStat;
using dtrun::agent::detail::RankStatus;
using dtrun::agent::detail::StatusServer;
using dtrun::agent::detail::StatusServerOptions;
using dtrun::agent::detail::WorkerPid;

NodeStatus liveNode(int nodeRank, std::vector<std::uint64_t> ops) {
  NodeStatus n;
  n.host = "h\"" + std::to_string(nodeRank);
  n.runId = "job1";
  n.nodeRank = nodeRank;
  n.nodeCount = 2;
  n.round = 3;
  n.restarts = 1;
  n.maxRestarts = 2;
  n.state = "running";
  for (std::size_t i = 0; i < ops.size(); ++i) {
    RankStatus r;
    r.localRank = static_cast<int>(i);
    r.rank = nodeRank * static_cast<int>(ops.size()) + r.localRank;
    r.pid = 100 + r.rank;
    r.state = "running";
    r.op = "all_reduce";
    r.ops = ops[i];
    r.sinceProgressSeconds = 0.5;
    r.rssBytes = 1 << 20;
    r.cpuPercent = 50;
    n.ranks.push_back(r);
  }
  return n;
}

bool hasLine(const std::string& text, const std::string& line) {
  INFO(text);
  return text.find("\n" + line + "\n") != std::string::npos || text.starts_with(line + "\n");
}

// One raw HTTP exchange with 127.0.0.1:port: sends `request`, waits `pause`, then reads (at most
// 5 s) the answer whole; "" when nothing came, "socket error" when the exchange could not be
// made. No Catch2 macro here: a test's own thread calls it too, and Catch2 is not thread-safe.
std::string exchangeRaw(std::uint16_t port, const std::string& request,
                        std::chrono::milliseconds pause = std::chrono::milliseconds(0)) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    return "socket error";
  }
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      (!request.empty() && ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
                               static_cast<ssize_t>(request.size()))) {
    ::close(fd);
    return "socket error";
  }
  std::this_thread::sleep_for(pause);
  std::string answer;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
    answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return answer;
}

std::string get(std::uint16_t port, const std::string& target, const std::string& extra = "") {
  return exchangeRaw(port, "GET " + target + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n");
}

}  // namespace

TEST_CASE("the job's metrics in Prometheus's text format", "[unit][agent][live]") {
  const std::string text =
      dtrun::agent::detail::metricsText({liveNode(0, {10, 12}), liveNode(1, {12, 7})});
  const std::string node0 = R"(run_id="job1",node="0",host="h\"0")";
  CHECK(hasLine(text, "# TYPE dtrun_restarts_total counter"));
  CHECK(hasLine(text, "dtrun_restarts_total{" + node0 + "} 1"));
  CHECK(hasLine(text, "dtrun_workers_up{" + node0 + "} 2"));
  CHECK(hasLine(text, "# TYPE dtrun_rank_operations_total counter"));
  CHECK(hasLine(text, "dtrun_rank_operations_total{" + node0 + R"(,rank="1",local_rank="1"} 12)"));
  // Lag: behind the furthest rank of the whole job (12 operations).
  CHECK(hasLine(
      text,
      R"(dtrun_rank_lag_operations{run_id="job1",node="1",host="h\"1",rank="3",local_rank="1"} 5)"));
  CHECK(hasLine(text, "dtrun_rank_cpu_ratio{" + node0 + R"(,rank="0",local_rank="0"} 0.5)"));
  CHECK(hasLine(
      text, "dtrun_rank_resident_memory_bytes{" + node0 + R"(,rank="0",local_rank="0"} 1048576)"));
  // No GPU reading: no GPU family at all (an empty family would be noise).
  CHECK(text.find("gpu") == std::string::npos);
  CHECK(dtrun::agent::detail::escapeLabelValue("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
}

TEST_CASE("a rank's GPU figures: where it holds the most, its memory on every GPU",
          "[unit][agent][live]") {
  // Worker 100 (rank 4) is a shell whose child 101 computes on GPU 1 and holds a little of GPU 0;
  // worker 200 (rank 5) holds GPU 0 where NVML may not tell sizes; 300 is nobody's.
  const std::map<unsigned, ProcStat> table = {{100, ProcStat{100, 'S', 1, 100, 7}},
                                              {101, ProcStat{101, 'S', 100, 100, 9}},
                                              {200, ProcStat{200, 'S', 1, 200, 8}},
                                              {300, ProcStat{300, 'S', 1, 300, 3}}};
  const auto read = [&](unsigned pid) -> std::optional<ProcStat> {
    const auto it = table.find(pid);
    return it == table.end() ? std::nullopt : std::optional<ProcStat>(it->second);
  };
  const std::vector<WorkerPid> workers = {WorkerPid{100, 7, 4, 0, ""}, WorkerPid{200, 8, 5, 1, ""}};
  GpuReadings readings;
  GpuReading gpu0;
  gpu0.index = 0;
  gpu0.utilizationGpu = 12;
  gpu0.processes = {GpuProcessReading{101, "python", 64ULL << 20, -1, -1},
                    GpuProcessReading{200, "python", std::nullopt, -1, -1},
                    GpuProcessReading{300, "other", 1ULL << 30, -1, -1}};
  GpuReading gpu1;
  gpu1.index = 1;
  gpu1.utilizationGpu = 93;
  gpu1.processes = {GpuProcessReading{101, "python", 2048ULL << 20, -1, -1}};
  readings.gpus = {gpu0, gpu1};

  const auto byPid = dtrun::agent::detail::rankGpusOf(readings, workers, read);
  REQUIRE(byPid.size() == 2);
  CHECK(byPid.at(100).gpu == 1);
  CHECK(byPid.at(100).utilization == 93U);
  CHECK(byPid.at(100).memoryBytes == (2048ULL + 64) << 20);
  CHECK(byPid.at(200).gpu == 0);
  CHECK(byPid.at(200).utilization == 12U);
  CHECK_FALSE(byPid.at(200).memoryBytes.has_value());
}

TEST_CASE("a rank's GPU figures in the JSON and the metrics, none without them",
          "[unit][agent][live]") {
  NodeStatus node = liveNode(0, {3, 4});
  node.ranks[1].gpu = 1;
  node.ranks[1].gpuMemoryBytes = 812ULL << 20;
  node.ranks[1].gpuUtilization = 37;
  const auto json = dtrun::agent::detail::toJson(node);
  CHECK(json["ranks"][1]["gpu"] == 1);
  CHECK(json["ranks"][1]["gpu_memory_bytes"] == 812ULL << 20);
  CHECK(json["ranks"][1]["gpu_utilization"] == 37);
  CHECK_FALSE(json["ranks"][0].contains("gpu"));
  const auto back = dtrun::agent::detail::nodeStatusFromJson(json);
  REQUIRE(back.has_value());
  CHECK(back->ranks[1].gpuMemoryBytes == 812ULL << 20);
  CHECK(back->ranks[1].gpuUtilization == 37U);
  const std::string text = dtrun::agent::detail::metricsText({node});
  const std::string rank1 = R"(run_id="job1",node="0",host="h\"0",rank="1",local_rank="1")";
  CHECK(hasLine(text, "dtrun_rank_gpu_utilization_ratio{" + rank1 + "} 0.37"));
  CHECK(hasLine(text, "dtrun_rank_gpu_memory_bytes{" + rank1 + "} 851443712"));
  const std::string rank0 = R"(run_id="job1",node="0",host="h\"0",rank="0",local_rank="0")";
  CHECK(text.find("dtrun_rank_gpu_utilization_ratio{" + rank0) == std::string::npos);
  CHECK(text.find("dtrun_rank_gpu_memory_bytes{" + rank0) == std::string::npos);
}

TEST_CASE("a node's status survives its JSON form", "[unit][agent][live]") {
  const NodeStatus before = liveNode(1, {4, 5});
  const auto after = dtrun::agent::detail::nodeStatusFromJson(dtrun::agent::detail::toJson(before));
  REQUIRE(after.has_value());
  CHECK(after->host == before.host);
  CHECK(after->ranks.size() == 2);
  CHECK(after->ranks[1].ops == 5);
  CHECK(after->ranks[1].rssBytes == before.ranks[1].rssBytes);
  CHECK_FALSE(after->ranks[1].gpu.has_value());
  CHECK_FALSE(dtrun::agent::detail::nodeStatusFromJson(nlohmann::json{{"host", 1}}).has_value());
}

TEST_CASE("the status endpoint serves what was published, and refuses bad requests clearly",
          "[integration][agent][live]") {
  StatusServerOptions options;
  options.requestDeadline = std::chrono::milliseconds(1500);
  auto started = StatusServer::start(options);
  REQUIRE(started.isOk());
  auto server = std::move(started).value();
  const std::uint16_t port = server->port();
  REQUIRE(port != 0);
  server->publish(R"({"nodes":[]})", "dtrun_workers_up 1\n");

  SECTION("bodies and content types") {
    const std::string status = get(port, "/status");
    CHECK(status.starts_with("HTTP/1.1 200 OK"));
    CHECK(status.find("Content-Type: application/json") != std::string::npos);
    CHECK(status.ends_with(R"({"nodes":[]})"));
    const std::string metrics = get(port, "/metrics");
    CHECK(metrics.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
    CHECK(metrics.ends_with("dtrun_workers_up 1\n"));
    CHECK(get(port, "/").find("<!doctype html>") != std::string::npos);
    CHECK(get(port, "/nope").starts_with("HTTP/1.1 404"));
    CHECK(
        exchangeRaw(port, "POST /status HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 405"));
  }
  SECTION("junk bytes and a huge header") {
    CHECK(exchangeRaw(port, "\x16\x03\x01 not http at all\r\n\r\n").starts_with("HTTP/1.1 400"));
    const std::string huge = "X-Big: " + std::string(20000, 'a') + "\r\n";
    CHECK(get(port, "/status", huge).starts_with("HTTP/1.1 431"));
  }
  SECTION("a slow client is cut off at the deadline; others are served meanwhile") {
    std::string slowAnswer;
    std::thread slow([&] { slowAnswer = exchangeRaw(port, "GET /sta", std::chrono::seconds(3)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto before = std::chrono::steady_clock::now();
    CHECK(get(port, "/status").starts_with("HTTP/1.1 200"));
    CHECK(std::chrono::steady_clock::now() - before < std::chrono::seconds(1));
    slow.join();
    CHECK(slowAnswer.starts_with("HTTP/1.1 408"));
  }
}

TEST_CASE("with a store token, the status endpoint needs it", "[integration][agent][live]") {
  StatusServerOptions options;
  options.token = "s3cret";
  auto server = std::move(StatusServer::start(options)).value();
  server->publish("{}", "");
  const std::uint16_t port = server->port();
  const std::string refused = get(port, "/status");
  CHECK(refused.starts_with("HTTP/1.1 401"));
  CHECK(refused.find("needs its store token") != std::string::npos);
  CHECK(get(port, "/status", "Authorization: Bearer wrong\r\n").starts_with("HTTP/1.1 401"));
  CHECK(get(port, "/status", "Authorization: Bearer s3cret\r\n").starts_with("HTTP/1.1 200"));
  CHECK(get(port, "/metrics?token=s3cret").starts_with("HTTP/1.1 200"));
}

TEST_CASE("the status endpoint names an address it cannot use", "[unit][agent][live]") {
  StatusServerOptions options;
  options.address = "not-an-ip";
  const auto bad = StatusServer::start(options);
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().message().find("--status_addr: 'not-an-ip' is not an IP address") == 0);
}
