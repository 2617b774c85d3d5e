// What the rendezvous benchmarks (rdzv_bench: a thread per node; rdzv_sim: event loops) share:
// a process's CPU time, the descriptor limit, HOST:PORT parsing, waiting for a job's keeper, and
// the figures' formatting. Header-only: each benchmark is one translation unit.
#pragma once

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"

#include "round_codec.h"

namespace dtrun::bench {

using Clock = std::chrono::steady_clock;

// utime + stime of process `pid` (/proc/PID/stat), seconds; -1 if unreadable.
inline double cpuSeconds(int pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(file, line)) {
    return -1;
  }
  // After the command name's closing parenthesis: fields 3.. (utime and stime are 14 and 15).
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0;
  unsigned long long stime = 0;
  for (int i = 3; i <= 13 && rest >> field; ++i) {
  }
  if (!(rest >> utime >> stime)) {
    return -1;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

inline double secondsOf(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

inline double msBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

inline std::string fixed(double v, int decimals) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(decimals);
  out << v;
  return out.str();
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t m = values.size() / 2;
  return values.size() % 2 == 1 ? values[m] : (values[m - 1] + values[m]) / 2;
}

// Raises the soft descriptor limit to the hard one; returns the soft limit now in force.
inline rlim_t raiseFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return 0;
  }
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
    }
  }
  return limit.rlim_cur;
}

inline bool parseEndpoint(const std::string& text, rdzv::ClientOptions& out) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return false;
  }
  try {
    const int port = std::stoi(text.substr(colon + 1));
    if (port <= 0 || port > 65535) {
      return false;
    }
    out.port = static_cast<std::uint16_t>(port);
  } catch (const std::exception&) {
    return false;
  }
  out.host = text.substr(0, colon);
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  return true;
}

// Waits for the keeper of `jobId` to open round 0 (its round key), so joins start at once.
inline Status waitForKeeper(const rdzv::ClientOptions& store, const std::string& jobId,
                            std::chrono::milliseconds timeout) {
  DTRUN_ASSIGN_OR_RETURN(const auto client, rdzv::connectStore(store));
  const std::vector<std::string> keys{rdzv::detail::RoundKeys(jobId).round()};
  return client->wait(keys, timeout);
}

}  // namespace dtrun::bench
