// `dtrun top ADDR` (and `dtrun status ADDR`, one look): the live view of a running job from its
// status endpoint (--status_port): a row per rank, the slowest first, refreshed in place on a
// terminal; plain lines once when stdout is not one (or with --once); --json the endpoint's
// JSON as it is. The store token comes from --token or DTRUN_STORE_TOKEN.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dtrun/common.h"
#include "dtrun/launcher.h"

#include "report/status_client.h"
#include "text.h"

namespace dtrun::launcher {
namespace {

struct TopOptions {
  std::string address;
  std::string token;
  std::string sort = "lag";
  double interval = 1.0;
  bool json = false;
  bool once = false;
};

// GET /status within `timeout`: the body, or one line saying what went wrong.
Result<std::string> fetchStatus(const TopOptions& o, std::chrono::milliseconds timeout) {
  DTRUN_ASSIGN_OR_RETURN(HttpAnswer answer, httpGet(o.address, "/status", o.token, timeout));
  if (answer.status == 401) {
    return Status::error(Errc::kDenied, "the job at " + o.address +
                                            " needs its store token: pass --token or set "
                                            "DTRUN_STORE_TOKEN");
  }
  if (answer.status != 200) {
    return Status::connection("the status endpoint at " + o.address + " answered " +
                              std::to_string(answer.status) + ": " +
                              std::string(text::trim(answer.body)));
  }
  return std::move(answer.body);
}

struct Row {
  int rank = 0;
  int node = 0;
  std::string host;
  int pid = 0;
  std::string state;
  std::string op;
  std::uint64_t ops = 0;
  std::uint64_t lag = 0;
  nlohmann::json rate, since, cpu, rss, late;
  bool straggler = false;
  nlohmann::json gpu, gpuUtilization, gpuMemory;  // NVML's, where the agent has it
};

std::string fixed(const nlohmann::json& value, int digits) {
  if (!value.is_number()) {
    return "-";
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value.get<double>();
  return out.str();
}

// The table of a /status answer; "" (and `why`) when it is not one.
std::string renderStatus(const std::string& body, const std::string& sort, std::string& why) {
  const auto job = nlohmann::json::parse(body, nullptr, false);
  if (job.is_discarded() || !job.contains("nodes") || !job["nodes"].is_array()) {
    why = "the endpoint's answer is not dtrun's status JSON";
    return "";
  }
  std::vector<Row> rows;
  std::uint64_t most = 0;
  bool gpus = false;  // the GPU columns, only when some rank has a GPU
  std::ostringstream out;
  const auto& nodes = job["nodes"];
  for (const auto& n : nodes) {
    for (const auto& r : n.value("ranks", nlohmann::json::array())) {
      Row row{r.value("rank", 0),
              n.value("node_rank", 0),
              n.value("host", ""),
              r.value("pid", 0),
              r.value("state", ""),
              r.value("op", ""),
              r.value("ops", std::uint64_t{0}),
              0,
              r.value("ops_per_second", nlohmann::json()),
              r.value("since_progress_seconds", nlohmann::json()),
              r.value("cpu_percent", nlohmann::json()),
              r.value("rss_bytes", nlohmann::json()),
              r.value("late_seconds", nlohmann::json()),
              r.value("straggler", false),
              r.value("gpu", nlohmann::json()),
              r.value("gpu_utilization", nlohmann::json()),
              r.value("gpu_memory_bytes", nlohmann::json())};
      most = std::max(most, row.ops);
      gpus = gpus || row.gpu.is_number();
      rows.push_back(std::move(row));
    }
  }
  for (Row& row : rows) {
    row.lag = most - row.ops;
  }
  // The slowest first: stragglers (the latest first), then the ranks furthest behind.
  const auto late = [](const Row& r) { return r.late.is_number() ? r.late.get<double>() : 0.0; };
  std::sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    if (sort == "lag" && a.straggler != b.straggler) {
      return a.straggler;
    }
    if (sort == "lag" && a.straggler && late(a) != late(b)) {
      return late(a) > late(b);
    }
    if (sort == "lag" && a.lag != b.lag) {
      return a.lag > b.lag;
    }
    return a.rank < b.rank;
  });
  const nlohmann::json first = nodes.empty() ? nlohmann::json::object() : nodes[0];
  out << "dtrun " << job.value("run_id", "") << ": " << nodes.size() << " node(s), " << rows.size()
      << " rank(s), round " << first.value("round", 0) << ", restarts "
      << first.value("restarts", 0) << "/" << first.value("max_restarts", 0) << ", "
      << first.value("state", "") << "\n";
  for (const Row& row : rows) {
    if (row.straggler) {
      out << "straggler: rank " << row.rank << " on " << row.host << " reaches collectives "
          << fixed(row.late, 2) << " s after the others\n";
    }
  }
  out << std::left << std::setw(6) << "rank" << std::setw(5) << "node" << std::setw(16) << "host"
      << std::setw(9) << "pid" << std::setw(10) << "state" << std::setw(16) << "op" << std::right
      << std::setw(8) << "ops" << std::setw(8) << "ops/s" << std::setw(8) << "idle_s"
      << std::setw(6) << "lag" << std::setw(8) << "late_s" << std::setw(6) << "cpu%" << std::setw(8)
      << "rss_MiB";
  if (gpus) {
    out << std::setw(5) << "gpu" << std::setw(6) << "gpu%" << std::setw(9) << "gpu_MiB";
  }
  out << "\n";
  for (const Row& row : rows) {
    const std::string rss =
        row.rss.is_number() ? std::to_string(row.rss.get<std::uint64_t>() >> 20U) : "-";
    out << std::left << std::setw(6) << row.rank << std::setw(5) << row.node << std::setw(16)
        << row.host.substr(0, 15) << std::setw(9) << row.pid << std::setw(10) << row.state
        << std::setw(16) << (row.op.empty() ? "-" : row.op.substr(0, 15)) << std::right
        << std::setw(8) << row.ops << std::setw(8) << fixed(row.rate, 1) << std::setw(8)
        << fixed(row.since, 1) << std::setw(6) << row.lag << std::setw(8)
        << (fixed(row.late, 2) + (row.straggler ? "!" : "")) << std::setw(6) << fixed(row.cpu, 0)
        << std::setw(8) << rss;
    if (gpus) {
      out << std::setw(5) << (row.gpu.is_number() ? row.gpu.dump() : "-") << std::setw(6)
          << fixed(row.gpuUtilization, 0) << std::setw(9)
          << (row.gpuMemory.is_number() ? std::to_string(row.gpuMemory.get<std::uint64_t>() >> 20U)
                                        : "-");
    }
    out << "\n";
  }
  return out.str();
}

volatile std::sig_atomic_t gTopStop = 0;

int runTop(TopOptions o) {
  if (o.token.empty()) {
    o.token = text::envText("DTRUN_STORE_TOKEN");
  }
  if (o.sort != "lag" && o.sort != "rank") {
    std::cerr << "dtrun top: --sort expects lag or rank, got '" << o.sort << "'\n";
    return 2;
  }
  if (!(o.interval >= 0.1 && o.interval <= 3600)) {
    std::cerr << "dtrun top: --interval expects seconds from 0.1 to 3600\n";
    return 2;
  }
  const bool live = !o.json && !o.once && ::isatty(STDOUT_FILENO) == 1;
  static_cast<void>(std::signal(SIGINT, [](int) { gTopStop = 1; }));
  static_cast<void>(std::signal(SIGTERM, [](int) { gTopStop = 1; }));
  do {
    auto body = fetchStatus(o, std::chrono::milliseconds(3000));
    if (!body.isOk()) {
      std::cerr << "dtrun top: " << body.status().message() << "\n";
      return body.status().code() == Errc::kInvalidArgument ? 2 : 1;
    }
    if (o.json) {
      std::cout << body.value() << "\n";
      return 0;
    }
    std::string why;
    const std::string table = renderStatus(body.value(), o.sort, why);
    if (table.empty()) {
      std::cerr << "dtrun top: " << why << " (is " << o.address << " a dtrun --status_port?)\n";
      return 1;
    }
    std::cout << (live ? "\x1b[H\x1b[2J" : "") << table << std::flush;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<long>(o.interval * 1000));
    while (live && gTopStop == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } while (live && gTopStop == 0);
  return 0;
}

}  // namespace

std::function<int()> addTopCommand(CLI::App& app) {
  auto options = std::make_shared<TopOptions>();
  CLI::App* top = app.add_subcommand(
      "top",
      "The live view of a running job from its --status_port (ADDR = HOST:PORT): a row per "
      "rank, the slowest first, refreshed in place; plain lines once when not on a terminal");
  top->alias("status");
  top->add_option("address", options->address, "HOST:PORT of the job's status endpoint")
      ->required();
  top->add_option("--token", options->token, "The job's store token (default: DTRUN_STORE_TOKEN)");
  top->add_option("--sort", options->sort, "Row order: lag (the slowest first) or rank")
      ->capture_default_str();
  top->add_option("--interval", options->interval, "Seconds between refreshes (default 1)");
  top->add_flag("--once", options->once, "One look, then exit");
  top->add_flag("--json", options->json, "The endpoint's JSON once (for scripts)");
  return [top, options]() { return top->parsed() ? runTop(*options) : -1; };
}

}  // namespace dtrun::launcher
