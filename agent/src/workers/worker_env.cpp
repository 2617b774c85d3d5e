#include "workers/worker_env.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "dtrun/placement.h"

#include "text.h"
#include "workers/worker_guardian.h"

namespace dtrun::agent::detail {
namespace {

// dtrun's sitecustomize after the user's PYTHONPATH entries (theirs keep precedence), and
// torch's NCCL flight recorder (torch >= 2.2; older versions ignore these names) writing into
// the rank's directory: on its own NCCL timeout, and when the hang watch writes to its pipe
// (<prefix><rank>.pipe). The user's own settings win.
template <typename Put>
void addPythonHook(const std::string& hookDir, const std::string& rankDir,
                   const std::vector<std::string>& env,
                   const std::unordered_map<std::string, std::size_t>& index, const Put& put) {
  static constexpr std::string_view kPythonPath = "PYTHONPATH=";
  const auto user = index.find("PYTHONPATH");
  const std::string userPath =
      user == index.end() ? std::string() : env[user->second].substr(kPythonPath.size());
  put("PYTHONPATH", userPath.empty() ? hookDir : userPath + ":" + hookDir);
  if (rankDir.empty()) {
    return;  // --log_dir=/dev/null: nowhere for the flight recorder to dump
  }
  const std::string prefix = rankDir + "/" + std::string(kFlightRecorderPrefix);
  for (const auto& [name, value] :
       {std::pair<const char*, std::string>{"TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"},
        {"TORCH_NCCL_DUMP_ON_TIMEOUT", "1"},
        {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix},
        {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", prefix}}) {
    if (index.find(name) == index.end()) {
      put(name, value);
    }
  }
}

// What the launcher placed this rank on: the variables a worker reads its placement from, the
// GPUs it sees, and as many OpenMP threads as it has CPUs (unless the user chose).
template <typename Put>
void addPlacement(const LocalPlacement& placement, bool userSetThreads, bool userSetOrder,
                  const Put& put) {
  if (!placement.cpus.empty()) {
    put("DTRUN_CPUS", placement::formatCpuList(placement.cpus));
    if (!userSetThreads) {
      put("OMP_NUM_THREADS", std::to_string(placement.cpus.size()));
    }
  }
  if (!placement.memNodes.empty()) {
    put("DTRUN_NUMA_NODES", placement::formatCpuList(placement.memNodes));
  }
  if (!placement.gpus.empty()) {
    put("DTRUN_GPUS", placement.gpus);
  }
  if (placement.visibleDevices) {
    put("CUDA_VISIBLE_DEVICES", *placement.visibleDevices);
    if (!userSetOrder) {
      // dtrun numbers GPUs by PCI address (sysfs, nvidia-smi); CUDA's default order may differ.
      put("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    }
  }
  if (placement.localRankZero) {
    put("LOCAL_RANK", "0");
  }
}

}  // namespace

std::vector<std::string> workerEnvironment(const std::vector<std::string>& inherited,
                                           const AgentConfig& config, const WorkerPlacement& p) {
  std::vector<std::string> env;
  std::unordered_map<std::string, std::size_t> index;  // name -> position in env
  const auto put = [&](const std::string& name, const std::string& value) {
    const auto it = index.find(name);
    if (it != index.end()) {
      env[it->second] = name + "=" + value;
    } else {
      index.emplace(name, env.size());
      env.push_back(name + "=" + value);
    }
  };
  for (const auto& entry : inherited) {
    const auto eq = entry.find('=');
    if (eq != std::string::npos && eq > 0) {
      put(entry.substr(0, eq), entry.substr(eq + 1));
    }
  }
  const bool userSetThreads = index.contains("OMP_NUM_THREADS");
  const bool userSetOrder = index.contains("CUDA_DEVICE_ORDER");
  for (const auto& [name, value] : config.defaultEnv) {
    if (index.find(name) == index.end()) {
      put(name, value);
    }
  }
  // torch >= 2.2 reads TORCH_NCCL_ASYNC_ERROR_HANDLING, torch <= 2.1 NCCL_ASYNC_ERROR_HANDLING:
  // both get 1 (torchrun's default), or the user's value of whichever was set.
  {
    static constexpr std::string_view kNew = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
    static constexpr std::string_view kOld = "NCCL_ASYNC_ERROR_HANDLING";
    const auto valueOf = [&](std::string_view name) -> std::optional<std::string> {
      const auto it = index.find(std::string(name));
      return it == index.end() ? std::nullopt
                               : std::optional(env[it->second].substr(name.size() + 1));
    };
    const std::string chosen = valueOf(kNew).value_or(valueOf(kOld).value_or("1"));
    for (const auto name : {kNew, kOld}) {
      if (!valueOf(name)) {
        put(std::string(name), chosen);
      }
    }
  }
  const int localWorldSize = config.nprocPerNode;
  put("LOCAL_RANK", std::to_string(p.localRank));
  put("RANK", std::to_string(p.rank));
  put("GROUP_RANK", std::to_string(p.groupRank));
  put("ROLE_RANK", std::to_string(p.rank));
  put("ROLE_NAME", config.role);
  put("LOCAL_WORLD_SIZE", std::to_string(localWorldSize));
  put("WORLD_SIZE", std::to_string(p.worldSize));
  put("GROUP_WORLD_SIZE", std::to_string(p.groupWorldSize));
  put("ROLE_WORLD_SIZE", std::to_string(p.worldSize));
  put("MASTER_ADDR", p.masterAddr);
  put("MASTER_PORT", std::to_string(p.masterPort));
  put("TORCHELASTIC_RESTART_COUNT", std::to_string(p.restartCount));
  put("TORCHELASTIC_MAX_RESTARTS", std::to_string(config.maxRestarts));
  put("TORCHELASTIC_RUN_ID", config.runId);
  put("TORCHELASTIC_USE_AGENT_STORE", "True");
  put("TORCHELASTIC_ERROR_FILE", p.errorFile);
  if (!config.signalsToHandleText.empty()) {
    put("TORCHELASTIC_SIGNALS_TO_HANDLE", config.signalsToHandleText);
  }
  // What libdtrt reads: where the store is and which key prefix this attempt owns.
  put("DTRUN_STORE_ADDR", p.masterAddr + ":" + std::to_string(p.masterPort));
  put("DTRUN_STORE_PREFIX", "/worker/attempt_" + std::to_string(p.restartCount));
  put("DTRUN_RUN_ID", config.runId);
  // Empty with --log_dir=/dev/null: still set, so that a dtrun run by a worker of another dtrun
  // does not pass on its parent's directory and progress file.
  put("DTRUN_LOG_DIR", p.logDir);
  if (!config.storeToken.empty()) {
    put("DTRUN_STORE_TOKEN", config.storeToken);
  }
  put("DTRUN_PROGRESS_FILE", p.progressFile);
  put("DTRUN_PROGRESS_SLOT", p.progressFile.empty() ? "" : std::to_string(p.localRank));
  // Found by the worker guardian in whatever the worker leaves behind, after kill -9 of dtrun.
  if (const std::string& mark = workerGuardianMark(); !mark.empty()) {
    put("DTRUN_GUARDIAN_MARK", mark);
  }
  // The exit code that asks dtrun not to restart the job (a retry cannot help).
  put("DTRUN_NO_RESTART_EXIT_CODE", std::to_string(kExitNoRestart));
  if (!config.pythonHookDir.empty()) {
    addPythonHook(config.pythonHookDir, p.logDir, env, index, put);
  }
  if (static_cast<std::size_t>(p.localRank) < config.placement.size()) {
    addPlacement(config.placement[static_cast<std::size_t>(p.localRank)], userSetThreads,
                 userSetOrder, put);
  }
  return env;
}

std::string environmentRecord(const AgentConfig& config, const WorkerPlacement& placement) {
  std::string record = "# local rank " + std::to_string(placement.localRank) + ", rank " +
                       std::to_string(placement.rank) + "\n";
  for (const std::string& entry : workerEnvironment({}, config, placement)) {
    record += text::redactSecrets(entry) + "\n";
  }
  return record;
}

std::vector<std::string> substituteLocalRank(const std::vector<std::string>& args, int localRank) {
  static constexpr std::string_view kMacro = "${local_rank}";
  std::vector<std::string> out = args;
  const std::string value = std::to_string(localRank);
  for (auto& arg : out) {
    for (auto pos = arg.find(kMacro); pos != std::string::npos;
         pos = arg.find(kMacro, pos + value.size())) {
      arg.replace(pos, kMacro.size(), value);
    }
  }
  return out;
}

}  // namespace dtrun::agent::detail
