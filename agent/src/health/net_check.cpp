#include "health/net_check.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "json_text.h"
#include "workers/workers.h"

namespace dtrun::agent::detail {

namespace asio = boost::asio;
using Json = nlohmann::ordered_json;
using Outcome = CheckResult::Outcome;

namespace {

// Round trips in whole microseconds, bandwidth in 3 significant digits, floors as given.
std::string micros(double value) {
  std::array<char, 32> buffer{};
  static_cast<void>(std::snprintf(buffer.data(), buffer.size(), "%.0f", value));
  return buffer.data();
}
std::string gbits(double value) {
  std::array<char, 32> buffer{};
  static_cast<void>(std::snprintf(buffer.data(), buffer.size(), "%.3g", value));
  return buffer.data();
}
std::string plain(double value) {
  std::array<char, 32> buffer{};
  static_cast<void>(std::snprintf(buffer.data(), buffer.size(), "%g", value));
  return buffer.data();
}

std::string nodeText(const NetMeasurement& m, int rank) {
  std::string text = "node " + std::to_string(rank);
  for (const auto& node : m.nodes) {
    if (node.rank == rank) {
      text += " (" + node.host + (node.address.empty() ? "" : " " + node.address) + ")";
    }
  }
  return text;
}

// Why a pair is below a floor ("" = it is not).
std::string slowness(const NetPair& p, const HealthChecks& floors) {
  std::string why;
  if (floors.netMaxRttUs > 0 && p.rttUs > floors.netMaxRttUs) {
    why = "round trip " + micros(p.rttUs) + " us above " + plain(floors.netMaxRttUs) +
          " us (--health_net_max_rtt_us)";
  }
  const double slower = std::min(p.gbpsAb, p.gbpsBa);
  if (floors.netMinGbps > 0 && slower < floors.netMinGbps) {
    why += (why.empty() ? "" : ", ") + gbits(slower) + " Gbit/s below " + plain(floors.netMinGbps) +
           " Gbit/s (--health_net_min_gbps)";
  }
  return why;
}

std::string figures(const NetPair& p) {
  return "round trip " + micros(p.rttUs) + " us, " + gbits(p.gbpsAb) + "/" + gbits(p.gbpsBa) +
         " Gbit/s";
}

}  // namespace

namespace {

// The program's result: its last line that opens an object (libdtrt may have warned on stderr
// before it). "" when there is none.
std::string lastJsonLine(const std::string& output) {
  std::string line;
  for (std::size_t end = output.size(); end > 0;) {
    const std::size_t begin = output.rfind('\n', end - 1);
    const std::size_t from = begin == std::string::npos ? 0 : begin + 1;
    if (from < end && output[from] == '{') {
      line = output.substr(from, end - from);
      break;
    }
    if (begin == std::string::npos) {
      break;
    }
    end = begin;
  }
  return line;
}

}  // namespace

std::vector<int> namedUnreachable(const std::string& output, int nodeCount) {
  const auto doc = Json::parse(lastJsonLine(output), nullptr, false);
  std::vector<int> named;
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("unreached") ||
      !doc["unreached"].is_object() || nodeCount < 3) {
    return named;
  }
  std::map<int, std::vector<int>> votes;
  for (const auto& [reporter, list] : doc["unreached"].items()) {
    if (!list.is_array()) {
      return named;
    }
    auto& ranks = votes[std::atoi(reporter.c_str())];
    for (const auto& rank : list) {
      if (rank.is_number_integer()) {
        ranks.push_back(rank.get<int>());
      }
    }
  }
  for (int x = 0; x < nodeCount; ++x) {
    int reporters = 0;
    bool everyone = true;
    for (const auto& [reporter, ranks] : votes) {
      if (reporter == x) {
        continue;
      }
      ++reporters;
      everyone = everyone && std::find(ranks.begin(), ranks.end(), x) != ranks.end();
    }
    if (reporters >= 2 && everyone) {
      named.push_back(x);
    }
  }
  return named;
}

Result<NetMeasurement> parseNetcheckOutput(const std::string& output) {
  const std::string line = lastJsonLine(output);
  const auto doc = Json::parse(line, nullptr, false);
  if (line.empty() || doc.is_discarded() || !doc.is_object()) {
    const std::string tail = output.size() > 300 ? output.substr(output.size() - 300) : output;
    return Status::error(Errc::kProtocol, "dtrun-netcheck printed no result" +
                                              (tail.empty() ? std::string() : ": " + tail));
  }
  try {
    if (doc.contains("error")) {
      const std::string error = doc.at("error").get<std::string>();
      return doc.value("timed_out", false) ? Status::timeout(error)
                                           : Status::error(Errc::kSystem, error);
    }
    NetMeasurement m;
    m.bytes = doc.at("bytes").get<std::uint64_t>();
    for (const auto& node : doc.at("nodes")) {
      m.nodes.push_back(NetNode{node.at("rank").get<int>(), node.at("host").get<std::string>(),
                                node.at("address").get<std::string>()});
    }
    for (const auto& pair : doc.at("pairs")) {
      m.pairs.push_back(NetPair{pair.at("a").get<int>(), pair.at("b").get<int>(),
                                pair.at("rtt_us").get<double>(), pair.at("gbps_ab").get<double>(),
                                pair.at("gbps_ba").get<double>()});
    }
    return m;
  } catch (const Json::exception& e) {
    return Status::error(Errc::kProtocol, std::string("dtrun-netcheck's result: ") + e.what());
  }
}

NetVerdict judgeNetwork(const NetMeasurement& m, int self, const HealthChecks& floors) {
  NetVerdict v;
  v.result.check = std::string(kCheckNetwork);
  const int n = static_cast<int>(m.nodes.size());
  // rank -> [pairs it is in, slow ones]
  std::unordered_map<int, std::pair<int, int>> tally;
  for (const auto& p : m.pairs) {
    const bool slow = !slowness(p, floors).empty();
    for (const int end : {p.a, p.b}) {
      ++tally[end].first;
      tally[end].second += slow ? 1 : 0;
    }
  }
  if (n >= 3) {
    for (const auto& node : m.nodes) {
      const auto [pairs, slow] = tally[node.rank];
      if (pairs > 0 && slow == pairs) {
        v.named.push_back(node.rank);
      }
    }
  }
  const auto isNamed = [&](int rank) {
    return std::find(v.named.begin(), v.named.end(), rank) != v.named.end();
  };
  for (const auto& p : m.pairs) {
    const std::string why = slowness(p, floors);
    if (!why.empty() && !isNamed(p.a) && !isNamed(p.b)) {
      v.warning += (v.warning.empty() ? "" : "; ") + nodeText(m, p.a) + " - " + nodeText(m, p.b) +
                   ": " + why;
    }
  }
  if (!v.warning.empty()) {
    v.warning = (n == 2 ? "a slow pair (2 nodes: it cannot say which node is slow, so none is "
                          "named): "
                        : "slow pair(s) between nodes that each have a good pair (the link, not "
                          "a node): ") +
                v.warning;
  }
  std::string mine;
  for (const auto& p : m.pairs) {
    if (p.a != self && p.b != self) {
      continue;
    }
    const int peer = p.a == self ? p.b : p.a;
    const std::string why = slowness(p, floors);
    mine += (mine.empty() ? "" : "; ") + std::string("to ") + nodeText(m, peer) + ": " +
            (why.empty() ? figures(p) : why);
  }
  if (isNamed(self)) {
    v.result.outcome = Outcome::kFailed;
    v.result.detail = nodeText(m, self) + " is below the floor with every other node: " + mine;
    return v;
  }
  v.result.detail = std::to_string(m.pairs.size()) + " pair(s) of " + std::to_string(n) +
                    " nodes measured; " + mine;
  for (const int rank : v.named) {
    v.result.detail += "; " + nodeText(m, rank) + " is below the floor and leaves the round";
  }
  if (!v.warning.empty()) {
    v.result.detail += "; " + v.warning;
  }
  return v;
}

std::string networkJson(const NetMeasurement& m, const NetVerdict& verdict,
                        const HealthChecks& floors) {
  Json doc;
  doc["min_gbps"] = floors.netMinGbps;
  doc["max_rtt_us"] = floors.netMaxRttUs;
  doc["bytes"] = m.bytes;
  auto& nodes = doc["nodes"] = Json::array();
  for (const auto& node : m.nodes) {
    nodes.push_back({{"rank", node.rank},
                     {"host", node.host},
                     {"address", node.address},
                     {"named", std::find(verdict.named.begin(), verdict.named.end(), node.rank) !=
                                   verdict.named.end()}});
  }
  auto& pairs = doc["pairs"] = Json::array();
  for (const auto& p : m.pairs) {
    pairs.push_back({{"a", p.a},
                     {"b", p.b},
                     {"rtt_us", p.rttUs},
                     {"gbps_ab", p.gbpsAb},
                     {"gbps_ba", p.gbpsBa},
                     {"slow", !slowness(p, floors).empty()}});
  }
  return jsonText(doc);
}

std::vector<std::string> netcheckEnvironment(const std::vector<std::string>& inherited,
                                             const NetcheckPlace& place) {
  const std::vector<std::pair<std::string, std::string>> own = {
      {"RANK", std::to_string(place.nodeRank)},
      {"WORLD_SIZE", std::to_string(place.nodeCount)},
      {"LOCAL_RANK", "0"},
      {"LOCAL_WORLD_SIZE", "1"},
      {"MASTER_ADDR", place.masterAddr},
      {"MASTER_PORT", std::to_string(place.masterPort)},
      {"DTRUN_STORE_PREFIX", place.storePrefix},
      {"DTRUN_STORE_TOKEN", place.storeToken},
      // Sockets even between nodes on one host (tests, several agents per machine): the check
      // measures the network, not libdtrt's shared-memory rings.
      {"DTRUN_TRANSPORT", "tcp"},
  };
  std::vector<std::string> env;
  for (const auto& entry : inherited) {
    const bool replaced = std::any_of(
        own.begin(), own.end(), [&](const auto& v) { return entry.rfind(v.first + "=", 0) == 0; });
    if (!replaced) {
      env.push_back(entry);
    }
  }
  for (const auto& [name, value] : own) {
    if (!value.empty()) {
      std::string entry = name;
      entry += '=';
      entry += value;
      env.push_back(std::move(entry));
    }
  }
  return env;
}

struct NetcheckRun::State {
  State(asio::io_context& io, UniqueFd fd, ChildProcess c)
      : pipe(io, fd.release()), timer(io), child(std::move(c)) {}
  asio::posix::stream_descriptor pipe;
  asio::steady_timer timer;
  ChildProcess child;
  std::array<char, 4096> buffer{};
  std::string output;
  bool killed = false;
  bool over = false;
  Done done;

  void read(const std::shared_ptr<State>& self) {
    pipe.async_read_some(asio::buffer(buffer),
                         [self](const boost::system::error_code& ec, std::size_t n) {
                           if (self->over) {
                             return;
                           }
                           self->output.append(self->buffer.data(), n);
                           if (!ec) {
                             self->read(self);
                             return;
                           }
                           // EOF (or a broken pipe): the program ended, or was killed at the
                           // deadline.
                           self->over = true;
                           self->timer.cancel();
                           Done d = std::move(self->done);
                           d(std::move(self->output), self->killed);
                         });
  }
};

Result<std::unique_ptr<NetcheckRun>> NetcheckRun::start(
    asio::io_context& io, const std::string& program, std::vector<std::string> argv,
    std::vector<std::string> env, std::chrono::milliseconds deadline, Done done) {
  std::array<int, 2> fds{-1, -1};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
    return Status::system("pipe2", errno);
  }
  UniqueFd readEnd(fds[0]);
  const UniqueFd writeEnd(fds[1]);
  SpawnRequest request;
  request.path = program;
  request.argv = std::move(argv);
  request.env = std::move(env);
  request.stdoutFd = writeEnd.get();
  request.stderrFd = writeEnd.get();
  DTRUN_ASSIGN_OR_RETURN(auto child, ChildProcess::spawn(request));
  auto state = std::make_shared<State>(io, std::move(readEnd), std::move(child));
  state->done = std::move(done);
  state->timer.expires_after(deadline);
  state->timer.async_wait(
      [weak = std::weak_ptr<State>(state)](const boost::system::error_code& ec) {
        const auto self = weak.lock();
        if (!ec && self && !self->over) {
          self->killed = true;
          self->child.signalGroup(SIGKILL);  // its end of the pipe closes: the read sees EOF
        }
      });
  state->read(state);
  return std::unique_ptr<NetcheckRun>(new NetcheckRun(std::move(state)));
}

NetcheckRun::NetcheckRun(std::shared_ptr<State> state) : state_(std::move(state)) {}

NetcheckRun::~NetcheckRun() {
  state_->over = true;  // a completion still queued calls nothing
  state_->done = nullptr;
  try {
    boost::system::error_code ignored;
    state_->timer.cancel();
    state_->pipe.cancel(ignored);
  } catch (const boost::system::system_error&) {  // the child still dies with the state
  }
}

}  // namespace dtrun::agent::detail
