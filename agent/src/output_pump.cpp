#include "output_pump.h"

#include <algorithm>
#include <cerrno>

#include <fcntl.h>
#include <unistd.h>

#include "fd_io.h"

namespace dtrun::agent::detail {
namespace {

// A closed console or a full disk must not stop the agent: a failed write is dropped.
void writeAll(int fd, const std::string& data) {
  static_cast<void>(io::writeAll(fd, data.data(), data.size()));
}

// The line without its terminator ("\n", "\r" or "\r\n").
std::string_view content(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
    line.remove_suffix(1);
  }
  return line;
}

}  // namespace

OutputPump::OutputPump(boost::asio::io_context& io, UniqueFd pipe, UniqueFd logFile,
                       ConsoleTarget console)
    : pipe_(io, pipe.release()),
      logFile_(std::move(logFile)),
      console_(std::move(console)),
      lines_([this](const LineAssembler::Piece& piece) { onPiece(piece); }),
      holdTimer_(io) {
  boost::system::error_code ignored;
  pipe_.non_blocking(true, ignored);
}

OutputPump::~OutputPump() {
  *alive_ = false;
  boost::system::error_code ignored;
  pipe_.close(ignored);
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
  if (logFile_.valid()) {
    static_cast<void>(io::writeAll(logFile_.get(), data, n));  // the exact bytes
  }
  if (console_.mode == ConsoleMode::kNone) {
    return;
  }
  const bool wasHolding = lines_.holding();
  emitted_ = false;
  lines_.feed(std::string_view(data, n));
  writeOut();
  if (!lines_.holding()) {
    return;
  }
  // The hold limit counts from the start of the line held now, not of an earlier one.
  if (!wasHolding || emitted_) {
    heldSince_ = std::chrono::steady_clock::now();
  }
  armHoldTimer();
}

void OutputPump::onPiece(const LineAssembler::Piece& piece) {
  emitted_ = true;
  if (console_.mode == ConsoleMode::kRaw) {
    consoleOut_.append(piece.text);  // the worker's bytes, unchanged
    return;
  }
  if (piece.crlfTail) {
    consoleOut_ += '\n';  // ends the line shown with its '\r'; it has its prefix already
    return;
  }
  // Every console line starts with the prefix, so a cut line's piece ends its console line.
  consoleOut_ += console_.prefix;
  consoleOut_.append(piece.text);
  if (piece.cut) {
    consoleOut_ += '\n';
  }
  if (console_.filteredFd >= 0 && matchesFilter(piece.text)) {
    filteredOut_ += console_.prefix;
    filteredOut_.append(content(piece.text));
    filteredOut_ += '\n';
  }
}

bool OutputPump::matchesFilter(std::string_view line) const {
  return std::any_of(
      console_.filters.begin(), console_.filters.end(),
      [line](const std::string& needle) { return line.find(needle) != std::string_view::npos; });
}

void OutputPump::writeOut() {
  if (!consoleOut_.empty()) {
    writeAll(console_.fd, consoleOut_);
    consoleOut_.clear();
  }
  if (!filteredOut_.empty()) {
    writeAll(console_.filteredFd, filteredOut_);
    filteredOut_.clear();
  }
}

void OutputPump::armHoldTimer() {
  if (timerArmed_) {
    return;
  }
  timerArmed_ = true;
  holdTimer_.expires_at(heldSince_ + kHoldLimit);
  holdTimer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive) {
      return;
    }
    timerArmed_ = false;
    if (!ec) {
      onHoldTimer();
    }
  });
}

void OutputPump::onHoldTimer() {
  if (!lines_.holding()) {
    return;
  }
  if (std::chrono::steady_clock::now() < heldSince_ + kHoldLimit) {
    armHoldTimer();  // the line held now began after the one the timer was set for
    return;
  }
  flushPartialLine();
}

void OutputPump::flushPartialLine() {
  lines_.flush();
  writeOut();
}

void OutputPump::drainAndStop() {
  if (!pipe_.is_open()) {
    return;
  }
  static_cast<void>(readAvailable());
  flushPartialLine();
  *alive_ = false;
  boost::system::error_code ignored;
  holdTimer_.cancel();
  pipe_.close(ignored);  // cancels the pending wait; its handler sees alive == false
}

}  // namespace dtrun::agent::detail
