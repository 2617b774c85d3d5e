#include "workers/output_pump.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include "fd_io.h"
#include "log.h"

namespace dtrun::agent::detail {
namespace {

// A full disk must not stop the agent: a failed write is dropped.
void writeAll(int fd, const char* data, std::size_t n) {
  static_cast<void>(io::writeAll(fd, data, n));
}

// A log cut short (a full disk, a quota) is said once per agent: every rank's would follow.
std::atomic<bool> toldLogError{false};

bool matchesAny(std::string_view line, const std::vector<std::string>& filters) {
  for (const auto& filter : filters) {
    if (line.find(filter) != std::string_view::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

OutputPump::OutputPump(boost::asio::io_context& io, UniqueFd pipe, UniqueFd logFile,
                       ConsoleMode mode, std::shared_ptr<ConsoleOut> console, int consoleFd,
                       std::string prefix, std::shared_ptr<DuplicateSink> duplicates)
    : pipe_(io, pipe.release()),
      logFile_(std::move(logFile)),
      mode_(mode),
      console_(std::move(console)),
      consoleFd_(consoleFd),
      lines_(std::move(prefix)),
      duplicates_(std::move(duplicates)),
      quietTimer_(io) {
  boost::system::error_code ignored;
  pipe_.non_blocking(true, ignored);
}

OutputPump::~OutputPump() {
  *alive_ = false;
  boost::system::error_code ignored;
  pipe_.close(ignored);
  // The timer's own destructor cancels its wait; the handler sees alive == false.
}

void OutputPump::collapseInto(std::shared_ptr<CollapsedConsole> console, int rank,
                              ConsoleStream stream) {
  collapsed_ = std::move(console);
  collapsedRank_ = rank;
  collapsedStream_ = stream;
}

void OutputPump::holdWhileRunning(std::function<bool()> running) {
  writerRunning_ = std::move(running);
}

void OutputPump::start() { readSome(); }

// Waits for readiness and reads itself, so no bytes ever sit in a queued completion handler
// where drainAndStop() could overtake them.
void OutputPump::readSome() {
  pipe_.async_wait(boost::asio::posix::descriptor_base::wait_read,
                   [this, alive = alive_](const boost::system::error_code& ec) {
                     if (!*alive) {
                       return;
                     }
                     if (ec || readAvailable()) {
                       flushPartialLine();
                       return;
                     }
                     readSome();
                   });
}

bool OutputPump::readAvailable() {
  for (;;) {
    const ssize_t n = ::read(pipe_.native_handle(), buffer_.data(), buffer_.size());
    if (n > 0) {
      consume(buffer_.data(), static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    return n == 0 || errno != EAGAIN;  // EOF or a broken pipe ends the stream
  }
}

void OutputPump::consume(const char* data, std::size_t n) {
  if (logFile_.valid() && !io::writeAll(logFile_.get(), data, n) && logError_.empty()) {
    logError_ = std::system_category().message(errno);
    if (!toldLogError.exchange(true)) {
      std::error_code ec;
      const auto path =
          std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(logFile_.get()), ec);
      log::agent().warn(
          "a worker's log file is cut short: {}: {}; other ranks' logs may lose "
          "lines too (the report names each one)",
          path.string(), logError_);
    }
  }
  if (mode_ == ConsoleMode::kRaw) {
    console_->write(consoleFd_, std::string_view(data, n));
    return;
  }
  if (mode_ != ConsoleMode::kLines) {
    return;
  }
  const bool wasPending = lines_.pending();
  std::string out;
  lines_.feed(std::string_view(data, n), out);
  writeConsole(out);
  if (!lines_.pending()) {
    return;
  }
  if (!wasPending || !out.empty()) {
    heldSince_ = std::chrono::steady_clock::now();  // a new line is held
  }
  armQuietFlush();
}

// One write(2) for every whole line at hand: the agent's pumps share one thread, so lines of
// different ranks never interleave inside a write.
void OutputPump::writeConsole(const std::string& lines) {
  if (lines.empty()) {
    return;
  }
  if (!collapsed_) {
    console_->write(consoleFd_, lines);
    copyDuplicates(lines);
    return;
  }
  collapsed_->lines(collapsedStream_, collapsedRank_, lines);
  if (duplicates_ && duplicates_->file.valid()) {
    std::string prefixed;
    const std::string prefix = "[rank " + std::to_string(collapsedRank_) + "]: ";
    for (std::size_t start = 0; start < lines.size();) {
      const std::size_t end = std::min(lines.find('\n', start), lines.size() - 1);
      prefixed += prefix;
      prefixed.append(lines, start, end + 1 - start);
      start = end + 1;
    }
    copyDuplicates(prefixed);
  }
}

void OutputPump::copyDuplicates(const std::string& lines) {
  if (!duplicates_ || !duplicates_->file.valid()) {
    return;
  }
  // Each copied line ends in '\n', as torchrun's filtered files (read in universal newlines).
  std::string copied;
  for (std::size_t start = 0; start < lines.size();) {
    const std::size_t end = std::min(lines.find_first_of("\r\n", start), lines.size());
    const std::string_view line(lines.data() + start, end - start);
    if (matchesAny(line, duplicates_->filters)) {
      copied.append(line);
      copied += '\n';
    }
    const bool crlf = lines.compare(end, 2, "\r\n") == 0;
    start = end + (crlf ? 2 : 1);
  }
  if (!copied.empty()) {
    writeAll(duplicates_->file.get(), copied.data(), copied.size());
  }
}

// The first byte of an unfinished line starts the clock: whatever of it is still held
// kQuietFlush later goes out as a line of its own, unless its writer is still running (then up to
// kRunningHold). One timer serves every line: when it fires for a line that has ended since, it
// waits again for the line held now.
void OutputPump::armQuietFlush() { armQuietFlushAt(heldSince_ + kQuietFlush); }

void OutputPump::armQuietFlushAt(std::chrono::steady_clock::time_point at) {
  if (quietArmed_) {
    return;
  }
  quietArmed_ = true;
  quietTimer_.expires_at(at);
  quietTimer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) {
      return;
    }
    quietArmed_ = false;
    if (!lines_.pending()) {
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now < heldSince_ + kQuietFlush) {
      armQuietFlush();
      return;
    }
    if (now < heldSince_ + kRunningHold && writerRunning_ && writerRunning_()) {
      armQuietFlushAt(now + kRunningPoll);
      return;
    }
    flushPartialLine();
  });
}

void OutputPump::flushPartialLine() {
  if (mode_ != ConsoleMode::kLines || !lines_.pending()) {
    return;
  }
  std::string out;
  lines_.flush(out);
  writeConsole(out);
}

void OutputPump::drainAndStop() {
  if (!pipe_.is_open()) {
    return;
  }
  static_cast<void>(readAvailable());
  flushPartialLine();
  *alive_ = false;
  quietTimer_.cancel();
  boost::system::error_code ignored;
  pipe_.close(ignored);  // cancels the pending wait; its handler sees alive == false
}

}  // namespace dtrun::agent::detail
