#include "health/health_checks.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dtrun/rendezvous.h"

#include "iso_time.h"
#include "json_text.h"
#include "log.h"
#include "tcp_probe.h"
#include "text.h"

namespace dtrun::agent::detail {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Outcome = CheckResult::Outcome;

namespace {

std::string sizeText(std::uint64_t bytes) {
  std::array<char, 32> buffer{};
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  if (mib >= 1024.0) {
    static_cast<void>(std::snprintf(buffer.data(), buffer.size(), "%.1f GiB", mib / 1024.0));
  } else {
    static_cast<void>(std::snprintf(buffer.data(), buffer.size(), "%.1f MiB", mib));
  }
  return buffer.data();
}

// Whether this process has fewer than `needed` descriptors left under its soft limit (or cannot
// even list them: the listing's own descriptor fails with EMFILE).
bool outOfDescriptors(std::uint64_t needed) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return false;
  }
  std::error_code ec;
  std::uint64_t listed = 0;  // the listing's own descriptor among them
  for (fs::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
    ++listed;
  }
  if (ec) {
    return ec.value() == EMFILE;
  }
  return listed - 1 + needed > limit.rlim_cur;
}

std::string secondsText(milliseconds ms) {
  std::array<char, 32> buffer{};
  static_cast<void>(std::snprintf(buffer.data(), buffer.size(), "%g s",
                                  static_cast<double>(ms.count()) / 1000.0));
  return buffer.data();
}

// The nearest directory of `path` (itself or a parent) that exists: free space is the file
// system's, and a log directory is often made by the first attempt.
std::string existingAncestor(const std::string& path) {
  fs::path p = fs::absolute(fs::path(path)).lexically_normal();
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec) && p != p.root_path()) {
    p = p.parent_path();
  }
  return p.empty() ? "/" : p.string();
}

class SystemProbe final : public HealthProbe {
 public:
  Status writeProbeFile(const std::string& dir) override {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec && !fs::is_directory(dir)) {
      return Status::error(Errc::kSystem, "cannot make " + dir + ": " + ec.message());
    }
    if (!fs::is_directory(dir, ec)) {
      return Status::error(Errc::kSystem, dir + " is not a directory");
    }
    const std::string file =
        (fs::path(dir) / (".dtrun-health-" + std::to_string(::getpid()))).string();
    const UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd.valid()) {
      return Status::error(Errc::kSystem, "cannot write in " + dir + ": " + systemErrorText(errno));
    }
    const char byte = 'x';
    const bool wrote = ::write(fd.get(), &byte, 1) == 1 && ::fsync(fd.get()) == 0;
    const int err = errno;
    ::unlink(file.c_str());
    if (!wrote) {
      return Status::error(Errc::kSystem, "cannot write in " + dir + ": " + systemErrorText(err));
    }
    return Status::ok();
  }

  Result<std::uint64_t> freeBytes(const std::string& dir) override {
    const std::string at = existingAncestor(dir);
    struct statvfs vfs {};
    if (::statvfs(at.c_str(), &vfs) != 0) {
      return Status::system("statvfs(" + at + ")", errno);
    }
    return static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  }

  Status executable(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return Status::error(Errc::kNotFound, path + ": " + systemErrorText(errno));
    }
    if (!S_ISREG(st.st_mode)) {
      return Status::error(Errc::kSystem, path + " is not a regular file");
    }
    // root passes access(X_OK) when any execute bit is set; so does exec.
    if (::access(path.c_str(), X_OK) != 0) {
      return Status::error(Errc::kSystem, path + " is not executable: " + systemErrorText(errno));
    }
    return Status::ok();
  }

  Status pingStore(const std::string& host, std::uint16_t port, const std::string& token,
                   milliseconds connectWait, milliseconds answerWait) override {
    // First something must accept a connection: the store's host may start after this agent,
    // so a refusal is retried until connectWait.
    const auto connectUntil = std::chrono::steady_clock::now() + connectWait;
    Status accepted = acceptsConnection(host, port, answerWait);
    while (!accepted.isOk() && std::chrono::steady_clock::now() < connectUntil) {
      std::this_thread::sleep_for(milliseconds(100));
      accepted = acceptsConnection(host, port, answerWait);
    }
    DTRUN_TRY(accepted);
    // Then it must answer the handshake and a ping within answerWait. The client retries until
    // its deadline, so a failure here means nothing useful came back in time.
    rdzv::ClientOptions options;
    options.host = host;
    options.port = port;
    options.token = token;
    options.timeout = answerWait;
    auto store = rdzv::connectStore(options);
    Status s = store.isOk() ? store.value()->ping().status() : store.status();
    if (s.isOk() || s.code() == Errc::kDenied) {
      return s;
    }
    // A store in this process cannot take the check's connection once the process is out of
    // descriptors (the check's own socket took the last one): the limit is the news, not the
    // silence (seen under load at 20 files: "no answer within 5 s", the limit unnamed).
    if (outOfDescriptors(2)) {
      return Status::system("the store at " + host + ":" + std::to_string(port) +
                                " could not take this check's connection",
                            EMFILE);
    }
    return store.isOk() ? s : Status::timeout(s.message());
  }

  bool deviceExists(const std::string& path) override {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
  }

  Result<std::vector<GpuState>> gpuStates(const std::string& library,
                                          const std::vector<int>& gpus) override {
    DTRUN_ASSIGN_OR_RETURN(auto nvml, loadNvml(library));
    return nvml->query(gpus);
  }

  Result<OpenFileRoom> openFileRoom() override {
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
      return Status::system("getrlimit(RLIMIT_NOFILE)", errno);
    }
    OpenFileRoom room;
    room.soft = limit.rlim_cur;
    room.hard = limit.rlim_max;
    // "allocated unused max": the kernel's file handles in use and its ceiling.
    std::uint64_t allocated = 0;
    std::uint64_t unused = 0;
    std::uint64_t max = 0;
    std::ifstream fileNr("/proc/sys/fs/file-nr");
    if (fileNr >> allocated >> unused >> max && max >= allocated) {
      room.systemFree = max - allocated;
    }
    return room;
  }
};

// One check's work: its result's outcome and detail.
using CheckWork = std::function<std::pair<Outcome, std::string>()>;

std::pair<Outcome, std::string> fromStatus(const Status& s, std::string passed) {
  if (s.isOk()) {
    return {Outcome::kPassed, std::move(passed)};
  }
  return {s.code() == Errc::kTimeout ? Outcome::kTimedOut : Outcome::kFailed, s.message()};
}

// Without NVML: the device nodes only, as a node without a driver (or a container without
// NVML) allows.
std::pair<Outcome, std::string> checkGpuDevices(HealthProbe& probe, const HealthPlan& plan,
                                                const std::string& whyNoNvml) {
  static std::once_flag said;
  std::call_once(said, [&] {
    log::agent().info("gpus check: NVML absent: device existence only ({})", whyNoNvml);
  });
  std::string missing;
  for (const int gpu : plan.gpus) {
    const std::string node = "/dev/nvidia" + std::to_string(gpu);
    if (!probe.deviceExists(node)) {
      missing += (missing.empty() ? "" : ", ") + node;
    }
  }
  if (!missing.empty()) {
    return {Outcome::kFailed, "planned GPU(s) missing: " + missing};
  }
  return {Outcome::kPassed, std::to_string(plan.gpus.size()) +
                                " planned GPU(s) present (NVML absent: device existence only)"};
}

std::string processText(const GpuProcess& p) {
  std::string text = "pid " + std::to_string(p.pid);
  if (!p.name.empty()) {
    text += " (" + p.name + ")";
  }
  if (p.usedBytes != GpuProcess::kUnknownBytes) {
    text += " holds " + sizeText(p.usedBytes);
  }
  return text;
}

// With NVML: every planned GPU is there, needs no reset, and holds no other process's memory.
// The checks run before the round's workers start, so any process on a planned GPU belongs to
// someone else, or is a previous attempt's whose memory the driver has not released yet: that is
// waited for, up to --health_gpu_memory_wait.
std::string limitText(std::uint64_t n) {
  return n == RLIM_INFINITY ? std::string("unlimited") : std::to_string(n);
}

std::pair<Outcome, std::string> checkGpus(HealthProbe& probe, const HealthPlan& plan) {
  const auto began = std::chrono::steady_clock::now();
  const auto waitUntil = began + plan.checks.gpuMemoryWait;
  std::string waitedFor;
  for (;;) {
    auto states = probe.gpuStates(plan.checks.nvmlLibrary, plan.gpus);
    if (!states.isOk()) {
      if (states.status().code() == Errc::kNotFound) {
        return checkGpuDevices(probe, plan, states.status().message());
      }
      return {Outcome::kFailed, "NVML: " + states.status().message()};
    }
    std::string busy;
    for (const GpuState& gpu : states.value()) {
      const std::string name = "GPU " + std::to_string(gpu.index);
      if (!gpu.present) {
        return {Outcome::kFailed,
                "planned " + name + " missing: NVML has no device " + std::to_string(gpu.index)};
      }
      if (!gpu.fault.empty()) {
        return {Outcome::kFailed, name + ": " + gpu.fault};
      }
      for (const GpuProcess& p : gpu.processes) {
        busy += (busy.empty() ? "" : "; ") + name + ": " + processText(p);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    const auto waited = std::chrono::duration_cast<milliseconds>(now - began);
    if (busy.empty()) {
      std::string detail = std::to_string(plan.gpus.size()) +
                           " planned GPU(s) healthy and free of other processes (NVML)";
      if (!waitedFor.empty()) {
        detail += " after waiting " + secondsText(waited) + " for " + waitedFor;
      }
      return {Outcome::kPassed, detail};
    }
    if (now >= waitUntil) {
      return {Outcome::kFailed, "another process's memory on a planned GPU: " + busy +
                                    " (still there after " + secondsText(waited) +
                                    ", --health_gpu_memory_wait)"};
    }
    if (waitedFor.empty()) {
      log::agent().info("gpus check: waiting up to {} for {} to release its memory",
                        secondsText(plan.checks.gpuMemoryWait), busy);
    }
    waitedFor = busy;
    std::this_thread::sleep_for(std::min<milliseconds>(
        plan.gpuPollInterval, std::chrono::duration_cast<milliseconds>(waitUntil - now)));
  }
}

// The network check's round and figures, when it has them.
void addNetworkFields(nlohmann::ordered_json& entry, const CheckResult& r) {
  if (r.round >= 0 && !entry.contains("round")) {
    entry["round"] = r.round;
  }
  if (!r.network.empty()) {
    auto figures = nlohmann::ordered_json::parse(r.network, nullptr, false);
    if (!figures.is_discarded()) {
      entry["network"] = std::move(figures);
    }
  }
}

}  // namespace

std::shared_ptr<HealthProbe> systemHealthProbe() { return std::make_shared<SystemProbe>(); }

std::vector<int> plannedGpuIndices(const std::vector<LocalPlacement>& placement) {
  std::vector<int> out;
  for (const auto& local : placement) {
    for (const auto& name : text::split(local.gpus, ',')) {
      int index = 0;
      const auto* end = name.data() + name.size();
      const auto [ptr, ec] = std::from_chars(name.data(), end, index);
      if (!name.empty() && ec == std::errc() && ptr == end && index >= 0) {
        out.push_back(index);
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

HealthPlan planHealthChecks(const AgentConfig& config, const std::string& logDir,
                            const std::string& storeHost, std::uint16_t storePort,
                            milliseconds storeConnectWait) {
  HealthPlan plan;
  plan.checks = config.healthChecks;
  plan.logDir = config.discardsLogs() ? std::string() : logDir;
  plan.checks.logDir = plan.checks.logDir && !plan.logDir.empty();
  plan.executable = config.executable;
  plan.checks.entrypoint = plan.checks.entrypoint && !plan.executable.empty();
  plan.storeHost = storeHost;
  plan.storePort = storePort;
  plan.storeToken = config.storeToken;
  plan.storeConnectWait = storeConnectWait;
  plan.checks.store = plan.checks.store && storePort != 0;
  plan.gpus = plannedGpuIndices(config.placement);
  plan.checks.gpus = plan.checks.gpus && !plan.gpus.empty();
  return plan;
}

std::pair<bool, std::string> judgeOpenFiles(const OpenFileRoom& room, std::uint64_t minOpenFiles) {
  const std::string floor = std::to_string(minOpenFiles);
  if (room.soft < minOpenFiles) {
    return {false, "a worker may open " + limitText(room.soft) +
                       " files (RLIMIT_NOFILE), below the " + floor +
                       " needed (--health_min_open_files): " +
                       (room.hard >= minOpenFiles
                            ? "run `ulimit -n " + floor + "` before dtrun (the hard limit allows " +
                                  limitText(room.hard) + ")"
                            : "the hard limit (" + limitText(room.hard) +
                                  ") is below it too: raise nofile in /etc/security/limits.conf, "
                                  "the container's or the scheduler's settings")};
  }
  if (room.systemFree && *room.systemFree < minOpenFiles) {
    return {false, "the system can open only " + std::to_string(*room.systemFree) +
                       " more files (fs.file-nr), below the " + floor +
                       " needed (--health_min_open_files): raise fs.file-max or find the process "
                       "holding them"};
  }
  return {true, "a worker may open " + limitText(room.soft) + " files (hard limit " +
                    limitText(room.hard) + ")" +
                    (room.systemFree ? ", " + std::to_string(*room.systemFree) +
                                           " file handles free system-wide"
                                     : std::string())};
}

std::string_view outcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kPassed:
      return "passed";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kTimedOut:
      return "timed_out";
  }
  return "failed";
}

std::vector<CheckResult> runHealthChecks(const HealthPlan& plan,
                                         const std::shared_ptr<HealthProbe>& probe) {
  struct Pending {
    std::string check;
    milliseconds bound;
    std::future<std::pair<Outcome, std::string>> answer;
  };
  const milliseconds bound = plan.checks.timeout;
  std::vector<Pending> pending;
  // Each check owns copies of what it reads: a thread that outlives its bound reads nothing of
  // the caller's.
  const auto launch = [&](std::string_view check, milliseconds limit, CheckWork work) {
    std::packaged_task<std::pair<Outcome, std::string>()> task(std::move(work));
    pending.push_back(Pending{std::string(check), limit, task.get_future()});
    std::thread(std::move(task)).detach();
  };
  if (plan.checks.logDir) {
    launch(kCheckLogDir, bound, [probe, dir = plan.logDir, minFree = plan.checks.minFreeBytes] {
      if (auto s = probe->writeProbeFile(dir); !s.isOk()) {
        return fromStatus(s, "");
      }
      const auto free = probe->freeBytes(dir);
      if (!free.isOk()) {
        return fromStatus(free.status(), "");
      }
      const std::string found = sizeText(free.value()) + " free in " + dir;
      if (free.value() < minFree) {
        return std::pair{Outcome::kFailed, found + ", below the " + sizeText(minFree) +
                                               " needed (--health_min_free_mb)"};
      }
      return std::pair{Outcome::kPassed, "writable, " + found};
    });
  }
  if (plan.checks.entrypoint) {
    launch(kCheckEntrypoint, bound, [probe, path = plan.executable] {
      return fromStatus(probe->executable(path), path + " is executable");
    });
  }
  if (plan.checks.store) {
    launch(kCheckStore, plan.storeConnectWait + bound,
           [probe, host = plan.storeHost, port = plan.storePort, token = plan.storeToken,
            connectWait = plan.storeConnectWait, bound] {
             const auto began = std::chrono::steady_clock::now();
             const std::string where = host + ":" + std::to_string(port);
             // The store gets four fifths of the bound to answer: the last fifth is for the
             // check's verdict, which says why (out of descriptors), to come before the
             // runner's "no answer".
             auto s = probe->pingStore(host, port, token, connectWait, bound - bound / 5);
             if (s.code() == Errc::kTimeout) {
               return std::pair{Outcome::kTimedOut, "the store at " + where +
                                                        " did not answer within " +
                                                        secondsText(bound) + ": " + s.message()};
             }
             const auto took =
                 std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - began);
             return fromStatus(s, "the store at " + where + " answered in " +
                                      std::to_string(took.count()) + " ms");
           });
  }
  if (plan.checks.gpus) {
    // Waiting for a previous attempt's memory is part of the check: its bound grows by that wait.
    launch(kCheckGpus, bound + plan.checks.gpuMemoryWait,
           [probe, plan] { return checkGpus(*probe, plan); });
  }
  if (plan.checks.openFiles) {
    launch(kCheckOpenFiles, bound, [probe, minOpenFiles = plan.checks.minOpenFiles] {
      const auto room = probe->openFileRoom();
      if (!room.isOk()) {
        return fromStatus(room.status(), "");
      }
      auto [passed, detail] = judgeOpenFiles(room.value(), minOpenFiles);
      return std::pair{passed ? Outcome::kPassed : Outcome::kFailed, std::move(detail)};
    });
  }
  std::vector<CheckResult> results;
  const auto began = std::chrono::steady_clock::now();
  const auto now = std::chrono::system_clock::now();
  for (auto& p : pending) {
    CheckResult r;
    r.check = p.check;
    r.at = now;
    if (p.answer.wait_until(began + p.bound) == std::future_status::ready) {
      auto [outcome, detail] = p.answer.get();
      r.outcome = outcome;
      r.detail = std::move(detail);
    } else {
      r.outcome = Outcome::kTimedOut;
      r.detail = "no answer within " + secondsText(p.bound) + " (--health_check_timeout)";
    }
    r.took = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - began);
    results.push_back(std::move(r));
  }
  return results;
}

std::string failureLine(const std::string& host, const CheckResult& result) {
  return "health check " + result.check + " " +
         (result.outcome == Outcome::kTimedOut ? "timed out" : "failed") + " on " + host + ": " +
         result.detail;
}

std::string withHealthChecks(const std::string& reportJson,
                             const std::vector<HealthCheckRecord>& records) {
  if (records.empty()) {
    return reportJson;
  }
  auto doc = nlohmann::ordered_json::parse(reportJson, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return reportJson;
  }
  auto& list = doc["health_checks"] = nlohmann::ordered_json::array();
  for (const auto& record : records) {
    const CheckResult& r = record.result;
    nlohmann::ordered_json entry = {
        {"time", isoTime(r.at)},
        {"attempt", record.attempt},
        {"check", r.check},
        {"outcome", outcomeName(r.outcome)},
        {"detail", r.detail},
        {"duration_s", std::round(static_cast<double>(r.took.count())) / 1000.0},
    };
    addNetworkFields(entry, r);
    list.push_back(std::move(entry));
  }
  return jsonText(doc, 2) + "\n";
}

std::string checkEventFields(const CheckResult& result, int attempt, int round) {
  nlohmann::ordered_json fields = {
      {"check", result.check},
      {"outcome", outcomeName(result.outcome)},
      {"detail", result.detail},
      {"duration_s", std::round(static_cast<double>(result.took.count())) / 1000.0},
  };
  if (attempt >= 0) {
    fields["attempt"] = attempt;
  }
  if (round >= 0) {
    fields["round"] = round;
  }
  addNetworkFields(fields, result);
  const std::string text = jsonText(fields);
  return text.substr(1, text.size() - 2);  // the members, without the braces
}

}  // namespace dtrun::agent::detail
