// Copies one worker stream from its pipe to the rank's log file (the exact bytes) and, depending
// on the console mode, to dtrun's own stdout/stderr: passed through as it comes (the only rank on
// the console), or one whole line at a time behind an optional prefix (console_lines.h), so
// ranks' lines never mix. An unfinished line goes out on its own after a short quiet spell (a
// prompt, a progress dot) and at the end. Tee'd lines that contain one of the duplicate filters
// are also appended to a file shared by the attempt's ranks (torchrun's
// --duplicate-stdout-filters). Runs on the agent's event loop; not thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/common.h"

#include "console/console.h"

namespace dtrun::agent::detail {

enum class ConsoleMode : std::uint8_t { kNone, kRaw, kLines };

// Where tee'd lines matching any of `filters` (substrings) are copied, shared by the pumps of
// one attempt.
struct DuplicateSink {
  std::vector<std::string> filters;
  UniqueFd file;
};

class OutputPump {
 public:
  static constexpr std::chrono::milliseconds kQuietFlush{200};
  // While the writer runs (see holdWhileRunning) a held line waits for its rest this long.
  static constexpr std::chrono::milliseconds kRunningHold{5000};
  static constexpr std::chrono::milliseconds kRunningPoll{50};

  // Takes the pipe's read end and the log file; `consoleFd` is 1 or 2, written through `console`.
  // `prefix` goes before each console line in kLines mode ("" for none). `duplicates` may be
  // null.
  OutputPump(boost::asio::io_context& io, UniqueFd pipe, UniqueFd logFile, ConsoleMode mode,
             std::shared_ptr<ConsoleOut> console, int consoleFd, std::string prefix,
             std::shared_ptr<DuplicateSink> duplicates);
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;
  OutputPump(OutputPump&&) = delete;
  OutputPump& operator=(OutputPump&&) = delete;
  ~OutputPump();

  // --console=collapse: whole lines go to `console` as `rank`'s (the pump's prefix must be
  // empty); duplicate-filtered lines are copied behind "[rank N]: ". Call before start().
  void collapseInto(std::shared_ptr<CollapsedConsole> console, int rank, ConsoleStream stream);

  // `running` says whether the worker writing into the pipe is running (not waiting): one that
  // runs is most likely still writing the line it began, in pieces (Python's print writes each
  // argument on its own under PYTHONUNBUFFERED or line buffering), slowed down by a loaded
  // machine; its unfinished line then waits for its rest up to kRunningHold instead of going out
  // after kQuietFlush. A prompt's writer waits for its reader and goes out at once. Call before
  // start().
  void holdWhileRunning(std::function<bool()> running);
  void start();
  // Copies whatever is still buffered in the pipe without waiting, then stops; used once the
  // worker exited (its children may keep the pipe open, so EOF is not awaited).
  void drainAndStop();
  // Why the log file lost bytes ("" = it has them all): the first failed write's error.
  [[nodiscard]] const std::string& logError() const { return logError_; }

 private:
  void readSome();
  // Reads until the pipe is empty; true once it reached EOF.
  bool readAvailable();
  void consume(const char* data, std::size_t n);
  void flushPartialLine();
  void writeConsole(const std::string& lines);
  void copyDuplicates(const std::string& lines);
  void armQuietFlush();
  void armQuietFlushAt(std::chrono::steady_clock::time_point at);

  boost::asio::posix::stream_descriptor pipe_;
  UniqueFd logFile_;
  std::string logError_;
  const ConsoleMode mode_;
  std::shared_ptr<ConsoleOut> console_;
  const int consoleFd_;
  ConsoleLines lines_;
  std::shared_ptr<DuplicateSink> duplicates_;
  std::shared_ptr<CollapsedConsole> collapsed_;
  int collapsedRank_ = 0;
  ConsoleStream collapsedStream_ = ConsoleStream::kOut;
  boost::asio::steady_timer quietTimer_;
  bool quietArmed_ = false;
  std::function<bool()> writerRunning_;
  // When the line held now began: the quiet spell counts from it, not from an earlier line's
  // start (a line written in pieces a few ms apart must not be cut because the line before it
  // armed the timer).
  std::chrono::steady_clock::time_point heldSince_;
  std::array<char, 16384> buffer_{};
  // Outstanding reads and timers hold this; it is cleared when the pump is destroyed.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dtrun::agent::detail
