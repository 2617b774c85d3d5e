// --health_checks=network: after a round formed and before its workers start, every node of the
// round runs dtrun-netcheck (netcheck/main.cpp, built on libdtrt: the agent does not link the
// worker runtime), which measures every pair of nodes and prints the figures of all pairs. Each
// agent judges them the same way (judgeNetwork) and so agrees with the others on which node is
// below the floor: that node leaves the round, the others wait for the round to re-form.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>

#include "dtrun/agent_config.h"
#include "dtrun/common.h"

#include "health/health_checks.h"

namespace dtrun::agent::detail {

inline constexpr std::string_view kCheckNetwork = "network";
inline constexpr std::string_view kNetcheckProgram = "dtrun-netcheck";

struct NetNode {
  int rank = 0;
  std::string host;
  std::string address;  // the one its peers reached it at
};

struct NetPair {
  int a = 0;  // a < b, node ranks of the round
  int b = 0;
  double rttUs = -1;   // the median of 20 round trips
  double gbpsAb = -1;  // a's sending to b, Gbit/s
  double gbpsBa = -1;
};

struct NetMeasurement {
  std::vector<NetNode> nodes;
  std::vector<NetPair> pairs;
  std::uint64_t bytes = 0;  // sent each way per pair
};

// The program's output (its last line that opens a JSON object): the figures, or the error it
// reported (kTimeout when a peer did not show up or answer in time). Pure.
Result<NetMeasurement> parseNetcheckOutput(const std::string& output);

// What a round's figures say, the same on every node.
struct NetVerdict {
  // Below the floor: with 3 or more nodes, a node every one of whose pairs is slow. With 2
  // nodes a slow pair cannot say which side is slow, and a slow pair between two nodes that each
  // have a good pair is the link's: neither names a node (they are in `warning`).
  std::vector<int> named;
  std::string warning;  // slow pairs no node explains ("" = none)
  CheckResult result;   // this node's: failed when it is named
};

// `self`: this node's rank in the round; `floors`: --health_net_min_gbps, --health_net_max_rtt_us
// (0 = not checked). Pure.
NetVerdict judgeNetwork(const NetMeasurement& m, int self, const HealthChecks& floors);

// The report's and the event log's "network" member: the floors, every node and every pair's
// figures, and the nodes named (JSON object text).
std::string networkJson(const NetMeasurement& m, const NetVerdict& verdict,
                        const HealthChecks& floors);

// After a check that timed out: the nodes that every other node that reported could not reach
// (votes in the program's "unreached"; at least two reporters besides the node, so never in a
// 2-node round). A node cut off from its peers, or dead, is named; a slow start is not. Pure.
std::vector<int> namedUnreachable(const std::string& output, int nodeCount);

// The environment dtrun-netcheck runs with: `inherited`, then a worker's variables for node
// `nodeRank` of `nodeCount` and the store at masterAddr:masterPort under `storePrefix`.
struct NetcheckPlace {
  int nodeRank = 0;
  int nodeCount = 1;
  std::string masterAddr;
  std::uint16_t masterPort = 0;
  std::string storeToken;
  std::string storePrefix;
};
std::vector<std::string> netcheckEnvironment(const std::vector<std::string>& inherited,
                                             const NetcheckPlace& place);

// One run of dtrun-netcheck on the agent's loop: its output is read from a pipe, a deadline
// (the check's bound plus a grace to start and print) kills it. `done` runs on the loop with
// what it printed and whether it had to be killed. Loop thread only; destroying it kills a
// program still running and `done` never runs.
class NetcheckRun {
 public:
  using Done = std::function<void(std::string output, bool killed)>;
  static Result<std::unique_ptr<NetcheckRun>> start(boost::asio::io_context& io,
                                                    const std::string& program,
                                                    std::vector<std::string> argv,
                                                    std::vector<std::string> env,
                                                    std::chrono::milliseconds deadline, Done done);
  NetcheckRun(const NetcheckRun&) = delete;
  NetcheckRun& operator=(const NetcheckRun&) = delete;
  NetcheckRun(NetcheckRun&&) = delete;
  NetcheckRun& operator=(NetcheckRun&&) = delete;
  ~NetcheckRun();

 private:
  struct State;
  explicit NetcheckRun(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace dtrun::agent::detail
