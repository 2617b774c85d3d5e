// --health_checks: what an agent checks before each round (multi-node: before each join; one
// node: before each attempt), so that a broken node stays out of the job instead of failing it.
// Each check has its own bound: it runs on a thread of its own and a check still running at its
// bound is reported as timed out (its thread is left to finish on its own: a hung statvfs or
// connect cannot be cancelled). The checks' system calls sit behind HealthProbe, so tests feed
// their own results; planning the checks and describing their results are pure.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrun/agent_config.h"
#include "dtrun/common.h"

#include "health/gpu_nvml.h"

namespace dtrun::agent::detail {

// The local checks' names, in the order they run and report.
inline constexpr std::string_view kCheckLogDir = "log_dir";
inline constexpr std::string_view kCheckEntrypoint = "entrypoint";
inline constexpr std::string_view kCheckStore = "store";
inline constexpr std::string_view kCheckGpus = "gpus";
inline constexpr std::string_view kCheckOpenFiles = "open_files";

// This node's room for open files: the RLIMIT_NOFILE the workers inherit from the agent, and the
// file handles the whole system may still allocate.
struct OpenFileRoom {
  std::uint64_t soft = 0;  // RLIM_INFINITY: unlimited
  std::uint64_t hard = 0;
  std::optional<std::uint64_t> systemFree;  // fs.file-max less fs.file-nr's allocated ones
};

// The system calls behind the checks. Each call may block (a hung file system, a silent
// store); the caller bounds it. Implementations must be safe to call from several threads.
class HealthProbe {
 public:
  HealthProbe() = default;
  HealthProbe(const HealthProbe&) = delete;
  HealthProbe& operator=(const HealthProbe&) = delete;
  HealthProbe(HealthProbe&&) = delete;
  HealthProbe& operator=(HealthProbe&&) = delete;
  virtual ~HealthProbe() = default;
  // Makes `dir` when missing, then writes, syncs and removes a small file in it.
  virtual Status writeProbeFile(const std::string& dir) = 0;
  // The bytes an unprivileged user may still write on `dir`'s file system.
  virtual Result<std::uint64_t> freeBytes(const std::string& dir) = 0;
  // `path` is a regular file this process may execute.
  virtual Status executable(const std::string& path) = 0;
  // The store at host:port answers a ping: connecting is retried until `connectWait` (the store's
  // host may start after this agent), the answer is awaited for `answerWait`. kTimeout when a
  // connected store stays silent.
  virtual Status pingStore(const std::string& host, std::uint16_t port, const std::string& token,
                           std::chrono::milliseconds connectWait,
                           std::chrono::milliseconds answerWait) = 0;
  // The device node exists (/dev/nvidia<N>).
  virtual bool deviceExists(const std::string& path) = 0;
  // NVML's state of `gpus` through `library`: kNotFound when NVML is absent (no driver).
  virtual Result<std::vector<GpuState>> gpuStates(const std::string& library,
                                                  const std::vector<int>& gpus) = 0;
  // getrlimit(RLIMIT_NOFILE) and /proc/sys/fs/file-nr.
  virtual Result<OpenFileRoom> openFileRoom() = 0;
};

// The real system calls.
std::shared_ptr<HealthProbe> systemHealthProbe();

// What runs before a round, derived from the configuration (planHealthChecks).
struct HealthPlan {
  HealthChecks checks;
  std::string logDir;  // "" = no log directory to check (--log_dir=/dev/null)
  std::string executable;
  std::string storeHost;
  std::uint16_t storePort = 0;
  std::string storeToken;
  std::chrono::milliseconds storeConnectWait{0};  // beyond the check's own bound
  std::vector<int> gpus;                          // the planned GPUs' indices, sorted, unique
  // How often the gpus check asks NVML again while another process's memory is still there.
  std::chrono::milliseconds gpuPollInterval{250};
};

// `logDir` is the directory the run directory goes under (the configured one, else $TMPDIR or
// /tmp); `storeHost`/`storePort` the store this agent uses. Pure.
HealthPlan planHealthChecks(const AgentConfig& config, const std::string& logDir,
                            const std::string& storeHost, std::uint16_t storePort,
                            std::chrono::milliseconds storeConnectWait);

// The planned GPUs' indices from the placement's CUDA_VISIBLE_DEVICES names ("0,1"); names that
// are not indices (UUIDs, MIG names) are left out. Pure.
std::vector<int> plannedGpuIndices(const std::vector<LocalPlacement>& placement);

// The open_files check's verdict on `room` against the floor `minOpenFiles`: passed, or failed
// with what to raise and how. Pure.
std::pair<bool, std::string> judgeOpenFiles(const OpenFileRoom& room, std::uint64_t minOpenFiles);

struct CheckResult {
  enum class Outcome : std::uint8_t { kPassed, kFailed, kTimedOut };
  std::string check;  // kCheckLogDir, ...
  Outcome outcome = Outcome::kPassed;
  std::string detail;  // what was found: "12.3 GiB free in /tmp", or why it failed
  std::chrono::milliseconds took{0};
  std::chrono::system_clock::time_point at;  // when the checks began
  int round = -1;                            // the network check's round (-1 = none)
  std::string network;  // the network check's figures, a JSON object's text ("" = none)
  [[nodiscard]] bool passed() const { return outcome == Outcome::kPassed; }
};

// "passed", "failed", "timed_out": the event log's and the report's words.
std::string_view outcomeName(CheckResult::Outcome outcome);

// Runs every check of `plan` at once, each on its own thread, and returns their results in
// kCheck order once each has answered or reached its bound. Blocks at most the longest bound
// (the store's: its connect wait plus the check timeout).
std::vector<CheckResult> runHealthChecks(const HealthPlan& plan,
                                         const std::shared_ptr<HealthProbe>& probe);

// The one console line for a failed check:
// "health check log_dir failed on node-3: cannot write /logs: Not a directory".
std::string failureLine(const std::string& host, const CheckResult& result);

// The event log's members for one result (without braces): check, outcome, detail,
// duration_s, and attempt and round when given (-1 = none).
std::string checkEventFields(const CheckResult& result, int attempt, int round);

// One result as the run report keeps it: with the attempt it came before.
struct HealthCheckRecord {
  CheckResult result;
  int attempt = 0;
};

// `reportJson` (a report document's text) with a "health_checks" member: every check's result
// (docs/report.schema.json). The text as it was when there are none.
std::string withHealthChecks(const std::string& reportJson,
                             const std::vector<HealthCheckRecord>& records);

}  // namespace dtrun::agent::detail
