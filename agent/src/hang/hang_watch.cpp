#include "hang/hang_watch.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <iostream>
#include <system_error>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "job/job.h"
#include "log.h"
#include "report/report.h"
#include "workers/workers.h"

namespace dtrun::agent::detail {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;

constexpr std::chrono::milliseconds kStackToolTimeout{15000};
// How long a Python worker gets to write its stacks after the signal (faulthandler writes
// from the signal handler, so this is only the scheduling delay).
constexpr std::chrono::milliseconds kPythonStackWait{2000};
constexpr std::chrono::milliseconds kHangCheckMax{1000};
// torch's watchdog polls its pipe about once a second, then writes the dump.
constexpr std::chrono::milliseconds kFlightRecordWait{5000};

// torch's flight recorder pipes in a rank's directory (<prefix><rank>.pipe, made by
// ProcessGroupNCCL when the Python hook set TORCH_NCCL_DEBUG_INFO_PIPE_FILE): a write makes
// torch dump its recent collectives to <prefix><rank>. Returns the dumps to wait for.
std::vector<fs::path> requestFlightRecords(const fs::path& rankDir) {
  std::vector<fs::path> dumps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(rankDir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kFlightRecorderPrefix) || !name.ends_with(".pipe") ||
        !entry.is_fifo(ec)) {
      continue;
    }
    // Non-blocking: a pipe nobody reads (the process group is gone) fails with ENXIO.
    const UniqueFd pipe(::open(entry.path().c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    if (pipe.valid() && ::write(pipe.get(), "1", 1) == 1) {
      dumps.push_back(entry.path().parent_path() / entry.path().stem());
    }
  }
  return dumps;
}

// Until `file` holds more than `offset` bytes, the deadline passes or the dump is cancelled.
void waitForContent(const fs::path& file, std::chrono::steady_clock::time_point deadline,
                    const std::atomic<bool>& cancelled, std::uintmax_t offset = 0) {
  std::error_code ec;
  // file_size of a file not there yet is not 0 but an error: wait for both to clear.
  while ((fs::file_size(file, ec) <= offset || ec) && std::chrono::steady_clock::now() < deadline &&
         !cancelled.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// What `file` holds from `offset` on, once it stopped growing (faulthandler writes a dump in
// many small writes), at most its last kPythonStackLines lines.
std::string textFrom(const fs::path& file, std::uintmax_t offset,
                     std::chrono::steady_clock::time_point deadline) {
  constexpr std::size_t kPythonStackLines = 400;
  std::error_code ec;
  for (auto size = fs::file_size(file, ec); !ec && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto now = fs::file_size(file, ec);
    if (now == size) {
      break;
    }
    size = now;
  }
  std::ifstream in(file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::move(line));
    if (lines.size() > kPythonStackLines) {
      lines.pop_front();
    }
  }
  std::string text;
  for (const std::string& line : lines) {
    text += line + "\n";
  }
  return text;
}

// What the flight recorder wrote, for the rank's stack text: the files and how to read them.
std::string flightRecords(const std::vector<fs::path>& dumps, const std::atomic<bool>& cancelled) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + kFlightRecordWait;
  for (const fs::path& dump : dumps) {
    waitForContent(dump, deadline, cancelled);
    std::error_code ec;
    const auto size = fs::file_size(dump, ec);
    text += ec ? "\nNCCL flight recorder: asked, nothing written to " + dump.string() + "\n"
               : "\nNCCL flight recorder: " + dump.string() + " (" + std::to_string(size) +
                     " bytes: torch's record of its recent collectives, a pickle)\n";
  }
  return text;
}

// A process stopped (SIGSTOP, a debugger) or in uninterruptible sleep makes no progress, like a
// deadlocked one, but is mended elsewhere: the summary says so for this node's suspects.
void noteFrozenSuspects(HangDiagnosis& diagnosis, const WorkerGroup& group) {
  for (const HangRank& suspect : diagnosis.ranks) {
    if (!suspect.suspect) {
      continue;
    }
    for (const Worker& w : group.workers()) {
      if (w.rank != suspect.rank || !w.child || !w.child->running()) {
        continue;
      }
      const std::string state = kernelWaitOf(w.child->pid());
      if (state.starts_with("state T") || state.starts_with("state t") ||
          state.starts_with("state D")) {
        diagnosis.summary += "; rank " + std::to_string(w.rank) + "'s process (pid " +
                             std::to_string(w.child->pid()) + ") is in " + state;
      }
    }
  }
}

void sortByRank(std::vector<RankProgress>& ranks) {
  std::sort(ranks.begin(), ranks.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
}

// The dump itself, on the dump thread: no member of the watch or the group is touched.
HangRecord dumpTargets(const std::vector<StackTarget>& targets, const fs::path& attemptDir,
                       HangDiagnosis diagnosis, const std::string& pathVariable,
                       const std::atomic<bool>& cancelled) {
  std::string hangText =
      "dtrun: hang detected (" + diagnosis.reason + "): " + diagnosis.summary + "\n";
  for (const StackTarget& t : targets) {
    const WorkerStacks read = readStacks(t, pathVariable, cancelled);
    std::string stack = read.native;
    if (t.pythonStacks) {
      stack += "\nPython stacks (faulthandler):\n" + read.python;
    }
    stack += flightRecords(t.flightRecords, cancelled);
    const fs::path stackFile = t.dir / "stack.txt";
    static_cast<void>(writeFileAtomically(stackFile.string(), stack));
    hangText += "\n==== rank " + std::to_string(t.rank) + " (local rank " +
                std::to_string(t.localRank) + ", pid " + std::to_string(t.pid) + ") ====\n" + stack;
    for (auto& rank : diagnosis.ranks) {
      if (rank.rank == t.rank) {
        rank.stackFile = stackFile.string();
        rank.stack = stack;
      }
    }
  }
  const fs::path hangFile = attemptDir / "hang.txt";
  static_cast<void>(writeFileAtomically(hangFile.string(), hangText));
  HangRecord hang;
  hang.detectedAt = Clock::now();
  hang.reason = diagnosis.reason;
  hang.summary = diagnosis.summary;
  hang.reportFile = hangFile.string();
  hang.ranks = std::move(diagnosis.ranks);
  return hang;
}

}  // namespace

std::vector<StackTarget> beginStackDump(const WorkerGroup& group, bool flightRecords) {
  std::vector<StackTarget> targets;
  for (const Worker& w : group.workers()) {
    if (!w.child || !w.child->running()) {
      continue;
    }
    StackTarget target;
    target.rank = w.rank;
    target.localRank = w.localRank;
    target.pid = w.child->pid();
    target.dir = w.dir;
    if (flightRecords) {
      target.flightRecords = requestFlightRecords(w.dir);
    }
    if (w.progress) {
      if (const auto snapshot = w.progress->read(); snapshot && snapshot->stackSignal > 0) {
        std::error_code ec;
        const auto size = fs::file_size(w.dir / "python_stack.txt", ec);
        target.pythonOffset = ec ? 0 : size;
        target.pythonStacks = ::kill(target.pid, snapshot->stackSignal) == 0;
      }
    }
    targets.push_back(std::move(target));
  }
  return targets;
}

WorkerStacks readStacks(const StackTarget& target, const std::string& pathVariable,
                        const std::atomic<bool>& cancelled) {
  WorkerStacks stacks;
  stacks.native = nativeStack(target.pid, pathVariable, kStackToolTimeout, &cancelled);
  if (target.pythonStacks) {
    const fs::path file = target.dir / "python_stack.txt";
    const auto deadline = std::chrono::steady_clock::now() + kPythonStackWait;
    waitForContent(file, deadline, cancelled, target.pythonOffset);
    stacks.python = textFrom(file, target.pythonOffset, deadline);
  }
  return stacks;
}

WorkerFailure hangFailure(const HangDiagnosis& diagnosis, const WorkerGroup& group, int nodeRank,
                          const fs::path& attemptDir) {
  WorkerFailure failure;
  failure.localRank = -1;  // a rank of another node
  failure.rank = -1;       // none, when no rank is to blame
  const auto suspect = std::find_if(diagnosis.ranks.begin(), diagnosis.ranks.end(),
                                    [](const HangRank& r) { return r.suspect; });
  if (suspect != diagnosis.ranks.end()) {
    failure.rank = suspect->rank;
    failure.pid = suspect->pid;
    failure.host = suspect->host;
    if (const Worker* w = group.findByRank(suspect->rank)) {
      failure.localRank = w->localRank;
      failure.nodeRank = nodeRank;
    }
  }
  failure.status = ExitStatus{false, kExitHang};
  failure.time = Clock::now();
  failure.errorFile = (attemptDir / "hang.txt").string();
  failure.message = "hang: " + diagnosis.summary;
  return failure;
}

HangWatch::HangWatch(asio::io_context& io, const AgentConfig& config, std::string host,
                     std::string pathVariable, std::unique_ptr<ProgressExchange> exchange)
    : io_(io),
      config_(config),
      host_(std::move(host)),
      pathVariable_(std::move(pathVariable)),
      exchange_(std::move(exchange)),
      timer_(io) {}

HangWatch::~HangWatch() {
  cancelDump_ = true;
  if (dumpThread_.joinable()) {
    dumpThread_.join();
  }
}

void HangWatch::watch(const WorkerGroup& group, const std::optional<rdzv::Assignment>& assignment,
                      std::function<void(HangDiagnosis)> onHang) {
  group_ = &group;
  assignment_ = &assignment;
  onHang_ = std::move(onHang);
  remoteProgress_.clear();
  arm();
}

void HangWatch::cancel() {
  timer_.cancel();
  onHang_ = nullptr;
}

void HangWatch::arm() {
  if (config_.hangTimeout.count() <= 0) {
    return;
  }
  timer_.expires_after(
      std::clamp(config_.hangTimeout / 4, std::chrono::milliseconds(50), kHangCheckMax));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && onHang_) {
      check();
    }
  });
}

std::vector<RankProgress> HangWatch::progressOf(const WorkerGroup& group) const {
  std::vector<RankProgress> ranks;
  for (const Worker& w : group.workers()) {
    if (!w.child || !w.child->running() || !w.progress) {
      continue;
    }
    if (auto snapshot = w.progress->read()) {
      ranks.push_back(RankProgress{w.rank, w.child->pid(), host_, *snapshot});
    }
  }
  return ranks;
}

void HangWatch::check() {
  std::vector<RankProgress> ranks = progressOf(*group_);
  const std::int64_t now = progress::monotonicNs();
  starting_.markBusy(ranks, now);  // before the other nodes see them
  const auto& assignment = *assignment_;
  if (exchange_ && assignment) {
    // The other nodes matter once this node's ranks have been quiet for half the timeout:
    // reading them earlier would cost every node O(nodes) requests on every tick.
    std::int64_t newest = 0;
    for (const auto& rank : ranks) {
      newest = std::max(newest, rank.snapshot.ops > 0 ? rank.snapshot.changedNs : 0);
    }
    const bool quiet = now - newest >= std::chrono::nanoseconds(config_.hangTimeout).count() / 2;
    if (!quiet) {
      remoteProgress_.clear();  // stale the moment this node's ranks move again
    }
    exchange_->exchange(
        static_cast<std::int64_t>(assignment->round), assignment->nodeRank, assignment->nodeCount,
        ranks, quiet,
        [this](std::vector<RankProgress> remote) { remoteProgress_ = std::move(remote); });
    const int first = assignment->rankOffset;
    const int last = first + config_.nprocPerNode;
    for (const auto& remote : remoteProgress_) {
      if (remote.rank < first || remote.rank >= last) {
        ranks.push_back(remote);
      }
    }
    sortByRank(ranks);
  }
  auto diagnosis = diagnoseHang(ranks, now, config_.hangTimeout);
  if (!diagnosis) {
    arm();
    return;
  }
  noteFrozenSuspects(*diagnosis, *group_);
  auto onHang = std::exchange(onHang_, nullptr);
  onHang(std::move(*diagnosis));
}

HangDiagnosis HangWatch::peerDiagnosis(const rdzv::RoundEnd& end, const WorkerGroup& group) const {
  const auto root = decodeFailure(end.detail);
  HangDiagnosis diagnosis;
  diagnosis.reason = "no_progress";
  diagnosis.summary = end.message;
  const std::int64_t now = progress::monotonicNs();
  std::vector<RankProgress> ranks = progressOf(group);
  for (const auto& remote : remoteProgress_) {
    if (std::none_of(ranks.begin(), ranks.end(),
                     [&](const auto& r) { return r.rank == remote.rank; })) {
      ranks.push_back(remote);
    }
  }
  sortByRank(ranks);
  for (const auto& rank : ranks) {
    diagnosis.ranks.push_back(hangRankOf(rank, now, root && root->rank == rank.rank));
  }
  if (root && std::none_of(diagnosis.ranks.begin(), diagnosis.ranks.end(),
                           [](const HangRank& r) { return r.suspect; })) {
    HangRank suspect;  // on a node whose progress this one never saw
    suspect.rank = root->rank;
    suspect.host = root->host;
    suspect.pid = root->pid;
    suspect.suspect = true;
    diagnosis.ranks.push_back(suspect);
  }
  return diagnosis;
}

void HangWatch::dump(const WorkerGroup& group, const fs::path& attemptDir, HangDiagnosis diagnosis,
                     std::function<void(HangRecord)> done) {
  log::agent().warn("dumping the stacks of every worker into {}", attemptDir.string());
  // Python workers first: faulthandler writes from the signal handler while eu-stack works.
  std::vector<StackTarget> targets = beginStackDump(group, true);
  if (dumpThread_.joinable()) {
    dumpThread_.join();  // the previous attempt's dump, long finished
  }
  dumping_ = true;
  cancelDump_ = false;
  dumpThread_ = std::thread([this, targets = std::move(targets), attemptDir,
                             diagnosis = std::move(diagnosis), done = std::move(done)]() mutable {
    HangRecord hang =
        dumpTargets(targets, attemptDir, std::move(diagnosis), pathVariable_, cancelDump_);
    asio::post(io_, [this, hang = std::move(hang), done = std::move(done)]() mutable {
      dumping_ = false;
      std::cerr << "dtrun: hang: " << hang.summary << "\ndtrun: stacks of this node's workers in "
                << hang.reportFile << "\n";
      done(std::move(hang));
    });
  });
}

}  // namespace dtrun::agent::detail
