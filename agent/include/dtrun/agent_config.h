// What one node's agent is told to do: the job, its workers, its rendezvous, its checks, and how
// its output and reports are written. The launcher fills it from flags and the environment; every
// part of the agent reads it. Plain data and two pure helpers for --log-line-prefix-template.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrun::agent {

// Which standard streams of a worker go to its log files (torchrun's -r/--redirects and
// -t/--tee values: 0 none, 1 stdout, 2 stderr, 3 both).
enum class Streams : std::uint8_t { kNone = 0, kOut = 1, kErr = 2, kBoth = 3 };

// One setting for every local rank ("3"), or per local rank ("0:3,1:1", any number of digits).
struct StreamSelection {
  Streams all = Streams::kNone;
  std::map<int, Streams> perRank;  // when non-empty, local ranks not listed get kNone
  [[nodiscard]] Streams forRank(int localRank) const {
    if (perRank.empty()) {
      return all;
    }
    const auto it = perRank.find(localRank);
    return it == perRank.end() ? Streams::kNone : it->second;
  }
};

// --rdzv_backend=etcd: the rounds live in etcd (a keeper elected among the agents, leases for
// liveness), and every agent serves a workers' store: the round's node 0's is the workers'.
struct EtcdRendezvous {
  std::vector<std::string> endpoints;  // "host:port" client URLs
  std::string prefix;                  // the job's: every key it writes is under it
  std::string caFile;                  // TLS when set: verify etcd with it
  std::string certFile;                // the client certificate and key (both or neither)
  std::string keyFile;
  std::string user;  // etcd user/password auth when set
  std::string password;
  std::chrono::seconds leaseTtl{5};  // an agent silent this long is gone; its keeper replaced
};

// A job over several nodes (--nnodes with a maximum above 1): the agents rendezvous in rounds
// through the store at masterAddr:storePort, which the agent with hostsStore serves (or, with
// `etcd`, through etcd).
struct MultiNodeConfig {
  int minNodes = 1;
  int maxNodes = 1;
  int nodeRank = -1;        // --node_rank when given: this node's rank if the round allows
  int schedulerOrder = -1;  // the batch scheduler's order of this node, when known
  bool hostsStore = false;
  // c10d guessed is_host from the endpoint naming this host: when the port is taken, another
  // agent (or `dtrun store`) on this host serves it and this agent is a client.
  bool hostGuessed = false;
  // c10d: --local_addr, where other nodes' workers reach this node's workers' store (in a round
  // without the store's host, e.g. on a shared `dtrun store`); "" = this host's name.
  std::string localAddr;
  std::chrono::milliseconds joinTimeout{600000};
  std::chrono::milliseconds lastCallTimeout{30000};
  std::chrono::milliseconds closeTimeout{30000};
  std::chrono::milliseconds keepAliveInterval{5000};
  int keepAliveMaxAttempt = 3;
  std::chrono::milliseconds readTimeout{60000};  // a silent store is lost after this
  // c10d: nodes per group of a grouped join (--rdzv_conf group_size; dtrun/group_relay.h);
  // 0 = every node joins at the job's store.
  int groupSize = 0;
  std::optional<EtcdRendezvous> etcd;
};

// A program that cannot be run at all (not found, not executable): the shell's code, decided by
// the launcher before anything starts, or by the agent when exec fails anyway.
constexpr int kExitCannotRun = 127;

// Restarts that stop early: a worker that exits with kExitNoRestart (workers get it as
// DTRUN_NO_RESTART_EXIT_CODE) asks not to be restarted, and dtrun exits with it; a job stopped
// after --max_no_progress_attempts failed attempts in a row without progress exits
// kExitNoProgress.
constexpr int kExitNoRestart = 87;
constexpr int kExitNoProgress = 86;
// A worker outlived SIGKILL by --kill_wait (stuck in the kernel: a dead NFS server, a hung GPU
// driver call): the node cannot run another attempt; it leaves the job and exits with this.
constexpr int kExitWorkerStuck = 75;

// --log_dir's value that writes no log files (torchrun compares it with os.devnull exactly).
inline constexpr std::string_view kDiscardLogs = "/dev/null";

// What one local rank is bound to and sees (--numa-binding, --cpu_binding, --gpus,
// --gpus_per_worker, --workers_per_gpu, --virtual-local-rank), planned by the launcher.
struct LocalPlacement {
  std::vector<int> cpus;      // its CPU affinity, set before exec (empty = inherited)
  std::vector<int> memNodes;  // its preferred memory nodes (empty = the default policy)
  std::string gpus;           // the GPUs it uses, as CUDA_VISIBLE_DEVICES names them ("" = none)
  std::optional<std::string> visibleDevices;  // its CUDA_VISIBLE_DEVICES (nullopt = inherited)
  bool localRankZero = false;                 // --virtual-local-rank: LOCAL_RANK=0, as torchrun
};

// --health_checks: what the agent checks before each round (multi-node: before each join; one
// node: before each attempt). A node that fails one leaves the job with the reason.
struct HealthChecks {
  bool logDir = true;      // the log directory is writable and has minFreeBytes free
  bool entrypoint = true;  // AgentConfig::executable is still there and executable
  bool store = true;       // the store answers within `timeout`
  // The planned GPUs exist (when GPUs are placed); with NVML (dlopen'ed: `nvmlLibrary`), they
  // also need no reset and hold no other process's memory, waited for up to `gpuMemoryWait`.
  bool gpus = true;
  // The open files the workers may hold: their soft RLIMIT_NOFILE, and the system's free file
  // handles (fs.file-max), at least minOpenFiles.
  bool openFiles = true;
  std::uint64_t minOpenFiles = 1024;                      // --health_min_open_files
  std::uint64_t minFreeBytes = std::uint64_t{100} << 20;  // --health_min_free_mb
  std::chrono::milliseconds timeout{5000};                // --health_check_timeout, per check
  std::string nvmlLibrary = "libnvidia-ml.so.1";          // DTRUN_NVML_LIBRARY overrides it
  std::chrono::milliseconds gpuMemoryWait{30000};         // --health_gpu_memory_wait
  // Opt-in (--health_checks=network): after a round formed, its nodes measure every pair with
  // `netcheckProgram` (dtrun-netcheck); a node every one of whose pairs is below a floor leaves.
  bool network = false;
  std::string netcheckProgram;  // found beside dtrun by the launcher
  double netMinGbps = 1.0;      // --health_net_min_gbps (0 = not checked)
  double netMaxRttUs = 10000;   // --health_net_max_rtt_us (0 = not checked)
  // The local checks (network runs later, once the round formed).
  [[nodiscard]] bool any() const { return logDir || entrypoint || store || gpus || openFiles; }
};

struct AgentConfig {
  // What every worker runs. command[0] is the program as the user named it (a path, or a name
  // looked up in PATH); the literal "${local_rank}" in any element is replaced by the worker's
  // local rank.
  std::vector<std::string> command;
  // command[0] resolved once, by the launcher, to the file exec'd: the agent never searches PATH.
  std::string executable;
  std::string entrypointName;  // how logs and the failure report name the program
  std::string dtrunVersion;    // dtrun's --version line, for the run report ("" = not known)
  std::vector<std::string> commandLine;  // dtrun's own argv, for the run's record (run.json)
  int nprocPerNode = 1;
  std::string role = "default";
  std::string runId;  // never empty: the launcher generates one when the user gave none
  int maxRestarts = 0;
  std::chrono::milliseconds shutdownTimeout{30000};  // SIGTERM -> SIGKILL grace
  // --kill_wait: SIGKILL -> a worker still there is named stuck and no longer waited for.
  std::chrono::milliseconds killWait{30000};
  // --restart_backoff / --restart_backoff_max: the wait before restart n is
  // backoff * 2^(n-1), at most the max (backoff 0 = restart at once, as torchrun).
  std::chrono::milliseconds restartBackoff{0};
  std::chrono::milliseconds restartBackoffMax{60000};
  // --max_no_progress_attempts (0 = off): stop after this many failed attempts in a row that
  // made no progress (kExitNoProgress). Progress: a rank past its start in its progress file, or
  // a larger number in --progress_file (the user's checkpoint-iteration file, "" = none).
  int maxNoProgressAttempts = 0;
  std::string progressFile;
  // Signals that stop the job: forwarded to every worker group, then dtrun exits 128+signal.
  std::vector<int> signalsToHandle;
  std::string signalsToHandleText;  // as given, exported as TORCHELASTIC_SIGNALS_TO_HANDLE
  // Signals passed on to every worker group while the job keeps running: a scheduler's
  // preemption warning (sbatch --signal=USR1@120) reaches the workers, which may checkpoint.
  std::vector<int> signalsToForward;

  // The agent's store, which workers find at MASTER_ADDR:MASTER_PORT. Port 0 picks a free port
  // (the bound one is what workers get; nothing is bound and released).
  std::string storeListenHost;  // "" = every address
  std::uint16_t storePort = 0;
  std::string storePortOption = "--master_port";  // where storePort came from, for its errors
  std::string masterAddr = "127.0.0.1";
  // The store's token ("" = none): the agent's store requires it, the agent's clients present
  // it, and workers get it as DTRUN_STORE_TOKEN (libdtrt presents it too).
  std::string storeToken;

  // "" = a fresh directory under $TMPDIR, whose path is printed once; kDiscardLogs = none at all.
  std::string logDir;
  // torchrun's --log_dir=/dev/null: no directory and no file is made; workers get an empty
  // TORCHELASTIC_ERROR_FILE and their streams stay on the console (there is no file to
  // redirect to).
  [[nodiscard]] bool discardsLogs() const { return logDir == kDiscardLogs; }
  StreamSelection redirects;
  StreamSelection tee;  // implies redirect; the console gets lines prefixed "[<role><rank>]:"
  std::optional<std::set<int>> localRanksFilter;  // local ranks whose output reaches the console
  // --log-line-prefix-template: the tee'd console lines' prefix, with ${role_name}, ${rank},
  // ${local_rank} (torchrun's) and ${hostname}, ${pid} replaced ("" =
  // "[${role_name}${local_rank}]:").
  std::string logLinePrefixTemplate;
  // --duplicate-stdout/stderr-filters: tee'd lines containing any of these are also copied to
  // <attempt dir>/filtered_stdout.log / filtered_stderr.log.
  std::vector<std::string> duplicateStdoutFilters;
  std::vector<std::string> duplicateStderrFilters;
  // --console: kRanks prints each rank's lines (torchrun's console); kCollapse prints a line that
  // several ranks printed within consoleWindow (200 ms) once, behind "[ranks 0-7]: "
  // (console_collapse.h), for the whole job on the node that hosts the store.
  enum class Console : std::uint8_t { kRanks, kCollapse } console = Console::kRanks;
  // How long kCollapse waits for the other ranks' copies of a line (DTRUN_CONSOLE_WINDOW_MS): a
  // group leaves at once when every rank is in it, so a wider window delays only lines that not
  // every rank prints; on a loaded machine ranks' identical lines can arrive further apart.
  std::chrono::milliseconds consoleWindow{200};
  // --event_log: one JSON line per state change (docs/event_log.schema.json); "" = none.
  std::string eventLogFile;

  std::optional<MultiNodeConfig> multiNode;  // unset: one node with its own store
  HealthChecks healthChecks;

  // --report: the job's run report (JSON, docs/report.schema.json) is written here at exit.
  std::string reportFile;
  // dtrun's own TORCHELASTIC_ERROR_FILE ("" = unset), for the scheduler or launcher above it:
  // when the job fails, the root cause goes there as torchrun's @record writes it (the worker's
  // error file copied with errorCode added, else a message naming rank, host and exit).
  std::string errorFile;
  // --hang_timeout (0 = off): when no rank makes progress for this long, or one rank lags the
  // others by as much, every worker's stack is dumped and the round fails.
  std::chrono::milliseconds hangTimeout{0};
  bool verbose = false;  // --verbose: each attempt's startup timeline on the console
  // --status_port (-1 = off, 0 = a free port) and --status_addr: the live status endpoint.
  int statusPort = -1;
  std::string statusAddr = "127.0.0.1";
  // --straggler_threshold (0 = off) and --straggler_window: a rank that enters collectives last,
  // later than the others by more than the threshold, often enough in the last `window`
  // collectives every rank entered, is named a straggler. On, the workers record their entry
  // times and the live view samples them (with or without --status_port).
  std::chrono::milliseconds stragglerThreshold{0};
  int stragglerWindow = 50;
  // The directory of dtrun's sitecustomize.py ("" = off): appended to the workers' PYTHONPATH
  // so that unmodified PyTorch scripts report progress (python/dtrun_torch_hook.py), with
  // torch's NCCL flight recorder set to dump into each rank's directory.
  std::string pythonHookDir;

  // Set in every worker's environment unless the agent's environment already has them
  // (e.g. OMP_NUM_THREADS=1 when nproc > 1).
  std::vector<std::pair<std::string, std::string>> defaultEnv;
  // Per local rank (empty = nothing placed): CPUs and memory applied between fork and exec,
  // CUDA_VISIBLE_DEVICES, and DTRUN_CPUS / DTRUN_NUMA_NODES / DTRUN_GPUS for the worker to read;
  // OMP_NUM_THREADS follows the bound CPU count unless the user set it.
  std::vector<LocalPlacement> placement;
};

// --log-line-prefix-template: the variables it may name, and its default (torchrun's prefix).
inline constexpr std::array<std::string_view, 5> kLinePrefixVariables = {
    "role_name", "rank", "local_rank", "hostname", "pid"};
inline constexpr std::string_view kDefaultLinePrefixTemplate = "[${role_name}${local_rank}]:";
// Templates read as Python's string.Template reads them, as torchrun does: "${name}" or "$name",
// "$$" for a '$'.
// The first variable of `pattern` (as written) whose name is not in kLinePrefixVariables; "" when
// none.
std::string unknownLinePrefixVariable(std::string_view pattern);
// `pattern` with each variable replaced by its value in `values`; unknown names stay as written.
std::string expandLinePrefix(std::string_view pattern,
                             const std::vector<std::pair<std::string, std::string>>& values);

}  // namespace dtrun::agent
