// Rank-aware logging for worker programs (dtrun/runtime.h "logging"): "[rank R] [level] text"
// lines on stderr and, with DTRT_LOG_FILE, timestamped in a per-rank file. The environment is
// read once, on first use; one mutex serialises the writes so lines never interleave.
#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "dtrun/common.h"
#include "dtrun/runtime.h"

#include "fd_io.h"
#include "text.h"

namespace dtrun::runtime {
namespace {

constexpr LogLevel kDefaultLevel = LogLevel::kWarn;

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "?";
}

bool parseLevel(std::string text, LogLevel& level) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (text == "debug" || text == "trace") {
    level = LogLevel::kDebug;
  } else if (text == "info") {
    level = LogLevel::kInfo;
  } else if (text == "warn" || text == "warning") {
    level = LogLevel::kWarn;
  } else if (text == "error" || text == "critical") {
    level = LogLevel::kError;
  } else if (text == "off" || text == "none") {
    level = LogLevel::kOff;
  } else {
    return false;
  }
  return true;
}

void writeAll(int fd, std::string_view text) { static_cast<void>(io::writeAll(fd, text)); }

// "[2026-11-21 22:01:02.123] " in local time.
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm local{};
  localtime_r(&seconds, &local);
  std::array<char, 32> date{};
  const std::size_t n = std::strftime(date.data(), date.size(), "%Y-%m-%d %H:%M:%S", &local);
  std::array<char, 8> ms{};
  static_cast<void>(std::snprintf(ms.data(), ms.size(), ".%03d", static_cast<int>(millis)));
  return "[" + std::string(date.data(), n) + ms.data() + "] ";
}

// Every line of `message` gets the prefix, so a multi-line message stays attributed.
std::string formatLines(std::string_view prefix, std::string_view message) {
  std::string out;
  out.reserve(message.size() + prefix.size() + 1);
  do {
    const auto end = message.find('\n');
    out.append(prefix);
    out.append(message.substr(0, end));
    out.push_back('\n');
    message = end == std::string_view::npos ? std::string_view{} : message.substr(end + 1);
  } while (!message.empty());
  return out;
}

class Logger {
 public:
  static Logger& instance() {
    static Logger logger;
    return logger;
  }

  [[nodiscard]] LogLevel level() const { return level_.load(std::memory_order_relaxed); }
  void setLevel(LogLevel level) { level_.store(level, std::memory_order_relaxed); }

  void write(LogLevel level, std::string_view message) {
    const std::string prefix = "[rank " + rank_ + "] [" + levelName(level) + "] ";
    const std::string lines = formatLines(prefix, message);
    const std::lock_guard<std::mutex> lock(mutex_);
    writeAll(STDERR_FILENO, lines);
    if (file_.valid()) {
      writeAll(file_.get(), formatLines(timestamp() + prefix, message));
    }
  }

 private:
  // Reads DTRT_LOG_LEVEL, RANK and DTRT_LOG_FILE (once: the function-static instance).
  Logger() {
    const std::string rank = text::envText("RANK");
    rank_ = rank.empty() ? "?" : rank;
    std::string warning;
    LogLevel level = kDefaultLevel;
    if (const std::string text = text::envText("DTRT_LOG_LEVEL"); !text.empty()) {
      if (!parseLevel(text, level)) {
        level = kDefaultLevel;
        warning =
            "DTRT_LOG_LEVEL='" + text + "' is not one of debug, info, warn, error, off; using warn";
      }
    }
    level_.store(level);
    if (std::string path = text::envText("DTRT_LOG_FILE"); !path.empty()) {
      for (auto at = path.find("{rank}"); at != std::string::npos; at = path.find("{rank}")) {
        path.replace(at, 6, rank_);
      }
      file_ = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
      const int err = errno;
      if (!file_.valid()) {
        warning += (warning.empty() ? "" : "\n") + std::string("DTRT_LOG_FILE: cannot open ") +
                   path + ": " + std::system_category().message(err);
      }
    }
    if (!warning.empty()) {
      writeAll(STDERR_FILENO, formatLines("[rank " + rank_ + "] [warn] ", warning));
    }
  }

  std::atomic<LogLevel> level_{kDefaultLevel};
  std::string rank_;  // constant after construction
  std::mutex mutex_;
  UniqueFd file_;  // constant after construction; written under mutex_
};

}  // namespace

void setLogLevel(LogLevel level) { Logger::instance().setLevel(level); }

LogLevel logLevel() { return Logger::instance().level(); }

bool logEnabled(LogLevel level) {
  return level != LogLevel::kOff && level >= Logger::instance().level();
}

void logMessage(LogLevel level, std::string_view message) {
  if (!logEnabled(level)) {
    return;
  }
  try {
    Logger::instance().write(level, message);
  } catch (...) {  // NOLINT(bugprone-empty-catch): logging must never throw into the caller
  }
}

}  // namespace dtrun::runtime
