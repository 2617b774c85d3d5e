#include "output_pump.h"

#include <cerrno>

#include <fcntl.h>
#include <unistd.h>

#include "fd_io.h"

namespace dtrun::agent::detail {
namespace {

// A closed console or a full disk must not stop the agent: a failed write is dropped.
void writeAll(int fd, const char* data, std::size_t n) {
  static_cast<void>(io::writeAll(fd, data, n));
}

}  // namespace

OutputPump::OutputPump(boost::asio::io_context& io, UniqueFd pipe, UniqueFd logFile,
                       ConsoleMode mode, int consoleFd, std::string prefix)
    : pipe_(io, pipe.release()),
      logFile_(std::move(logFile)),
      mode_(mode),
      consoleFd_(consoleFd),
      prefix_(std::move(prefix)) {
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
    writeAll(logFile_.get(), data, n);
  }
  if (mode_ == ConsoleMode::kRaw) {
    writeAll(consoleFd_, data, n);
    return;
  }
  if (mode_ != ConsoleMode::kPrefixed) {
    return;
  }
  // Whole lines only, each behind the prefix, so ranks' lines never interleave mid-line.
  std::string out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') {
      continue;
    }
    out += prefix_;
    out += partialLine_;
    partialLine_.clear();
    out.append(data + start, i + 1 - start);
    start = i + 1;
  }
  partialLine_.append(data + start, n - start);
  if (!out.empty()) {
    writeAll(consoleFd_, out.data(), out.size());
  }
}

void OutputPump::flushPartialLine() {
  if (mode_ == ConsoleMode::kPrefixed && !partialLine_.empty()) {
    const std::string line = prefix_ + partialLine_ + "\n";
    partialLine_.clear();
    writeAll(consoleFd_, line.data(), line.size());
  }
}

void OutputPump::drainAndStop() {
  if (!pipe_.is_open()) {
    return;
  }
  static_cast<void>(readAvailable());
  flushPartialLine();
  *alive_ = false;
  boost::system::error_code ignored;
  pipe_.close(ignored);  // cancels the pending wait; its handler sees alive == false
}

}  // namespace dtrun::agent::detail
