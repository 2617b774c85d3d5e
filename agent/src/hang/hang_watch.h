// --hang_timeout: looks at the workers' progress files on a steady timer (with the other nodes'
// ranks through ProgressExchange), diagnoses a hang, and dumps every worker's stacks. Dumps run
// on a thread of their own (eu-stack/gdb take up to 15 s per worker) and post their result back,
// so the agent's loop keeps answering signals, exits and heartbeats meanwhile. The rest runs on
// the agent's loop; not thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/agent_config.h"
#include "dtrun/round.h"

#include "hang/hang_detector.h"
#include "hang/progress_exchange.h"
#include "hang/starting_ranks.h"
#include "report/report.h"
#include "workers/workers.h"

namespace dtrun::agent::detail {

// A worker whose stacks are being dumped, as the loop saw it when the dump began.
struct StackTarget {
  int rank = 0;
  int localRank = 0;
  pid_t pid = 0;
  std::filesystem::path dir;
  bool pythonStacks = false;  // the worker was sent its stack signal
  // Where faulthandler's text of this dump begins in python_stack.txt: the file keeps every
  // dump of the worker's life, appended.
  std::uintmax_t pythonOffset = 0;
  std::vector<std::filesystem::path> flightRecords;  // torch's NCCL dumps asked for
};

// One worker's stacks, as a dump read them.
struct WorkerStacks {
  std::string native;  // every thread's, from eu-stack or gdb (or a line saying why none)
  std::string python;  // faulthandler's, every thread ("" without the Python hook)
};

// A dump in two steps, so that only the first runs on the loop. beginStackDump (on the loop):
// the running workers of `group`, each Python one sent its stack signal now (faulthandler writes
// from the signal handler while the native tool works); with `flightRecords`, torch's NCCL
// flight recorder is asked to dump too. readStacks (blocks: eu-stack or gdb, up to 15 s; call it
// from a thread of the caller's) reads one target's stacks; `cancelled` cuts it short.
std::vector<StackTarget> beginStackDump(const WorkerGroup& group, bool flightRecords);
WorkerStacks readStacks(const StackTarget& target, const std::string& pathVariable,
                        const std::atomic<bool>& cancelled);

// The failure a hang stands for, as the round's end and the report name it: the diagnosis's first
// suspect (a rank of `group` at node `nodeRank`, or of another node), its stacks in hang.txt.
WorkerFailure hangFailure(const HangDiagnosis& diagnosis, const WorkerGroup& group, int nodeRank,
                          const std::filesystem::path& attemptDir);

class HangWatch {
 public:
  // `exchange` may be null (one node, or the other nodes' progress is unavailable).
  HangWatch(boost::asio::io_context& io, const AgentConfig& config, std::string host,
            std::string pathVariable, std::unique_ptr<ProgressExchange> exchange);
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;
  HangWatch(HangWatch&&) = delete;
  HangWatch& operator=(HangWatch&&) = delete;
  ~HangWatch();  // stops a dump under way and joins its thread

  // Checks `group` every timeout/4 (50 ms to 1 s) until cancel(); `onHang` gets the first
  // diagnosis, after which checking stops. Nothing happens without --hang_timeout. `group` and
  // `assignment` outlive the watch of this attempt (the agent owns both).
  void watch(const WorkerGroup& group, const std::optional<rdzv::Assignment>& assignment,
             std::function<void(HangDiagnosis)> onHang);
  void cancel();

  // The diagnosis of a hang another node found: this node's ranks and the last other nodes'
  // ranks seen, with the rank the round's end names as the suspect.
  [[nodiscard]] HangDiagnosis peerDiagnosis(const rdzv::RoundEnd& end,
                                            const WorkerGroup& group) const;

  // Dumps the stacks of every running worker into <rank>/stack.txt and <attemptDir>/hang.txt
  // (the diagnosis first) off the loop; `done` runs on the loop with the hang's record.
  void dump(const WorkerGroup& group, const std::filesystem::path& attemptDir,
            HangDiagnosis diagnosis, std::function<void(HangRecord)> done);
  [[nodiscard]] bool dumping() const { return dumping_; }
  // The agent is stopping: a dump under way ends within a fraction of a second.
  void stopDump() { cancelDump_ = true; }

 private:
  void arm();
  void check();
  // The running workers of `group` whose progress file reads consistently.
  [[nodiscard]] std::vector<RankProgress> progressOf(const WorkerGroup& group) const;

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  const std::string host_;
  const std::string pathVariable_;
  std::unique_ptr<ProgressExchange> exchange_;
  boost::asio::steady_timer timer_;
  const WorkerGroup* group_ = nullptr;  // the attempt being watched
  const std::optional<rdzv::Assignment>* assignment_ = nullptr;
  std::function<void(HangDiagnosis)> onHang_;
  std::vector<RankProgress> remoteProgress_;  // the other nodes' latest ranks
  StartingRanks starting_;                    // this node's ranks before their first operation
  bool dumping_ = false;
  std::atomic<bool> cancelDump_{false};
  std::thread dumpThread_;  // joined before the next dump and in the destructor
};

}  // namespace dtrun::agent::detail
