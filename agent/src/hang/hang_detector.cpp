#include "hang/hang_detector.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <map>
#include <sstream>
#include <system_error>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "workers/workers.h"

namespace dtrun::agent::detail {
namespace {

constexpr double kNsPerSecond = 1e9;

// A stack tool on `pathVariable` (the only PATH lookup the agent makes: workers run the
// executable the launcher resolved). Empty if not found.
std::string findTool(const std::string& name, const std::string& pathVariable) {
  std::stringstream dirs(pathVariable);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return {};
}

std::string describeOp(const progress::Snapshot& s) {
  std::ostringstream out;
  out << (s.op.empty() ? "?" : s.op) << " #" << s.ops;
  if (!s.group.empty()) {
    out << " (group " << s.group << ")";
  }
  return out.str();
}

std::string seconds(double value) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << value << " s";
  return out.str();
}

// Where a rank is: "in all_reduce #7 (group world) since 9.1 s", or outside any operation.
std::string whereIs(const RankProgress& r, std::int64_t nowNs) {
  const auto& s = r.snapshot;
  if (s.opStartNs != 0) {
    return "is in " + describeOp(s) + " since " +
           seconds(static_cast<double>(nowNs - s.opStartNs) / kNsPerSecond);
  }
  return "is outside any operation since " +
         seconds(static_cast<double>(nowNs - s.changedNs) / kNsPerSecond) +
         " (last: " + describeOp(s) + ")";
}

std::string signature(const progress::Snapshot& s) {
  return s.opStartNs == 0 ? std::string() : s.op + "\n" + s.group;
}

}  // namespace

std::string rankRanges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string text;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) {
      ++j;
    }
    text += (text.empty() ? "" : ",") + std::to_string(ranks[i]);
    if (j > i) {
      text += "-" + std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return text;
}

HangRank hangRankOf(const RankProgress& r, std::int64_t nowNs, bool suspect) {
  const auto& s = r.snapshot;
  const bool inOp = s.opStartNs != 0;
  HangRank rank;
  rank.rank = r.rank;
  rank.host = r.host;
  rank.pid = r.pid;
  rank.ops = s.ops;
  rank.op = inOp ? s.op : "";
  rank.group = inOp ? s.group : "";
  rank.bytes = inOp ? s.bytes : 0;
  rank.inOpSeconds = inOp ? static_cast<double>(nowNs - s.opStartNs) / kNsPerSecond : 0.0;
  rank.idleSeconds = static_cast<double>(nowNs - s.changedNs) / kNsPerSecond;
  rank.suspect = suspect;
  return rank;
}

std::optional<HangDiagnosis> diagnoseHang(const std::vector<RankProgress>& ranks,
                                          std::int64_t nowNs, std::chrono::milliseconds timeout) {
  std::vector<const RankProgress*> judged;
  std::vector<const RankProgress*> silent;  // report progress, but entered no operation yet
  for (const RankProgress& r : ranks) {
    if (r.snapshot.ops > 0) {
      judged.push_back(&r);
    } else if (r.snapshot.pid != 0) {
      silent.push_back(&r);
    }
  }
  if (judged.empty()) {
    return std::nullopt;
  }
  const std::int64_t limitNs = std::chrono::nanoseconds(timeout).count();
  std::int64_t newest = 0;
  for (const auto* r : judged) {
    newest = std::max(newest, r->snapshot.changedNs);
  }
  std::vector<const RankProgress*> suspects;
  std::string reason;
  const bool someoneWaits = std::any_of(judged.begin(), judged.end(),
                                        [](const auto* r) { return r->snapshot.opStartNs != 0; });
  // A rank before its first operation that changed within the timeout (StartingRanks: it kept a
  // CPU busy) is still starting; the waiters wait for it, nobody is hung yet.
  const bool stillStarting = std::any_of(silent.begin(), silent.end(), [&](const auto* r) {
    return nowNs - r->snapshot.changedNs < limitNs;
  });
  if (someoneWaits && stillStarting) {
    return std::nullopt;
  }
  if (nowNs - newest >= limitNs && someoneWaits && !silent.empty()) {
    // The others wait for ranks that never got as far as their first operation.
    reason = "no_progress";
    suspects = silent;
    judged.insert(judged.end(), silent.begin(), silent.end());
    std::sort(judged.begin(), judged.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  } else if (nowNs - newest >= limitNs) {
    reason = "no_progress";
    std::uint64_t fewest = judged.front()->snapshot.ops;
    std::map<std::string, int> votes;
    for (const auto* r : judged) {
      fewest = std::min(fewest, r->snapshot.ops);
      ++votes[signature(r->snapshot)];
    }
    for (const auto* r : judged) {
      if (r->snapshot.ops == fewest) {
        suspects.push_back(r);
      }
    }
    if (suspects.size() == judged.size() && votes.size() > 1) {
      // Equal counts: the ranks whose operation differs from the most common one.
      const auto majority = std::max_element(votes.begin(), votes.end(), [](auto& a, auto& b) {
                              return a.second < b.second;
                            })->first;
      suspects.clear();
      for (const auto* r : judged) {
        if (signature(r->snapshot) != majority) {
          suspects.push_back(r);
        }
      }
    } else if (suspects.size() == judged.size() && judged.size() > 1 && !someoneWaits) {
      // Every rank computes, none inside an operation: nobody waits for anybody, so no rank is
      // to blame (the first to leave its last operation is not the cause).
      suspects.clear();
    } else if (suspects.size() == judged.size() && judged.size() > 1) {
      // Everyone in the same operation: the one that entered it first waits the longest.
      suspects = {*std::min_element(judged.begin(), judged.end(), [](auto* a, auto* b) {
        return a->snapshot.changedNs < b->snapshot.changedNs;
      })};
    }
  } else {
    reason = "lagging_rank";
    // A rank that waits in the operation another has just entered (the same one: that rank was
    // still starting, or slow to get there) is not behind: the operation ends once all are in it.
    // On a loaded node the last arrival's init_process_group took long enough for a poll to fall
    // between its entry and everyone's exit.
    const auto waitsForLateArrival = [&](const RankProgress* r) {
      return r->snapshot.opStartNs != 0 &&
             std::any_of(judged.begin(), judged.end(), [&](const RankProgress* other) {
               return newest - other->snapshot.changedNs < limitNs &&
                      other->snapshot.ops == r->snapshot.ops &&
                      signature(other->snapshot) == signature(r->snapshot);
             });
    };
    for (const auto* r : judged) {
      if (newest - r->snapshot.changedNs >= limitNs && !waitsForLateArrival(r)) {
        suspects.push_back(r);
      }
    }
    if (suspects.empty()) {
      return std::nullopt;
    }
  }

  HangDiagnosis diagnosis;
  diagnosis.reason = reason;
  std::map<std::pair<bool, std::string>, std::vector<int>> othersBySignature;
  std::string suspectText;
  for (const auto* r : judged) {
    const bool suspect = std::find(suspects.begin(), suspects.end(), r) != suspects.end();
    HangRank rank = hangRankOf(*r, nowNs, suspect);
    diagnosis.ranks.push_back(rank);
    if (suspect) {
      suspectText += (suspectText.empty() ? "" : "; ") + std::string("rank ") +
                     std::to_string(r->rank) + " on " + r->host + " " +
                     (r->snapshot.ops == 0 ? std::string("has not entered any collective")
                                           : whereIs(*r, nowNs));
    } else {
      const auto& s = r->snapshot;
      othersBySignature[{s.opStartNs != 0, describeOp(s)}].push_back(r->rank);
    }
  }
  diagnosis.summary = suspects.empty()
                          ? "no rank is inside a collective: every rank computed longer than "
                            "--hang_timeout since its last operation"
                          : suspectText;
  for (const auto& [where, list] : othersBySignature) {
    const bool many = list.size() > 1;
    diagnosis.summary += std::string(many ? "; ranks " : "; rank ") + rankRanges(list) + " ";
    if (where.first) {
      diagnosis.summary += (many ? "wait in " : "waits in ") + where.second;
    } else {
      diagnosis.summary +=
          (many ? "are outside any operation (last: " : "is outside any operation (last: ") +
          where.second + ")";
    }
  }
  return diagnosis;
}

std::string nativeStack(pid_t pid, const std::string& pathVariable,
                        std::chrono::milliseconds timeout, const std::atomic<bool>* cancelled) {
  SpawnRequest request;
  if (const std::string euStack = findTool("eu-stack", pathVariable); !euStack.empty()) {
    request.path = euStack;
    request.argv = {"eu-stack", "-p", std::to_string(pid)};
  } else if (const std::string gdb = findTool("gdb", pathVariable); !gdb.empty()) {
    request.path = gdb;
    request.argv = {
        "gdb", "-batch", "-nx", "-p", std::to_string(pid), "-ex", "thread apply all bt"};
  } else {
    return "(no stack: neither eu-stack (elfutils) nor gdb is installed; scripts/setup.sh "
           "installs elfutils)\n";
  }
  std::string path = "/tmp/dtrun-stack-XXXXXX";
  UniqueFd output(::mkostemp(path.data(), O_CLOEXEC));
  if (!output.valid()) {
    return "(no stack: cannot create a temporary file: " +
           std::error_code(errno, std::generic_category()).message() + ")\n";
  }
  ::unlink(path.c_str());
  request.stdoutFd = output.get();
  request.stderrFd = output.get();
  request.env = {"PATH=" + pathVariable, "LC_ALL=C"};
  auto child = ChildProcess::spawn(request);
  if (!child.isOk()) {
    return "(no stack: " + child.status().message() + ")\n";
  }
  ChildProcess tool = std::move(child).value();
  // Short slices, so that a cancelled dump (the agent is stopping) ends within one of them.
  constexpr std::chrono::milliseconds kSlice{100};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int ready = 0;
  while (ready == 0 && std::chrono::steady_clock::now() < deadline &&
         (cancelled == nullptr || !cancelled->load())) {
    pollfd exited{tool.exitFd(), POLLIN, 0};
    ready = ::poll(&exited, 1, static_cast<int>(kSlice.count()));
  }
  std::string text;
  if (ready <= 0) {
    text = "(" + request.argv[0] +
           (cancelled != nullptr && cancelled->load()
                ? " was stopped: the agent is stopping)\n"
                : " did not finish within " + std::to_string(timeout.count()) + " ms; killed)\n");
  }
  static_cast<void>(tool.tryReap());  // a tool still running is killed by the destructor
  std::string stack;
  std::array<char, 4096> buffer{};
  ::lseek(output.get(), 0, SEEK_SET);
  for (ssize_t n = 0; (n = ::read(output.get(), buffer.data(), buffer.size())) > 0;) {
    stack.append(buffer.data(), static_cast<std::size_t>(n));
  }
  return stack + text;
}

}  // namespace dtrun::agent::detail
