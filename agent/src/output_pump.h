// Copies one worker stream from its pipe to the rank's log file (the exact bytes) and, depending
// on the console mode, to dtrun's own stdout/stderr: raw, or behind a "[role3]:" prefix; either
// way one whole line at a time (line_assembler.h), each console write(2) whole lines only, so
// ranks' lines never mix. Runs on the agent's event loop; not thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/common.h"

#include "line_assembler.h"

namespace dtrun::agent::detail {

enum class ConsoleMode : std::uint8_t { kNone, kRaw, kPrefixed };

// Where a stream's lines go besides its log file.
struct ConsoleTarget {
  ConsoleMode mode = ConsoleMode::kNone;
  int fd = 1;          // dtrun's stdout (1) or stderr (2)
  std::string prefix;  // kPrefixed: written before every line
  // kPrefixed with --duplicate_std{out,err}_filters: prefixed lines containing any of `filters`
  // are also written to this file (the attempt's filtered_std{out,err}.log, shared by the
  // group's pumps and owned by the group); -1: none.
  int filteredFd = -1;
  std::vector<std::string> filters;
};

class OutputPump {
 public:
  // A partial line is shown after this long without its end: prompts and progress output still
  // appear, while a line written in several pieces (python -u writes text and "\n" apart) is
  // shown whole.
  static constexpr std::chrono::milliseconds kHoldLimit{150};

  // Takes the pipe's read end and the log file.
  OutputPump(boost::asio::io_context& io, UniqueFd pipe, UniqueFd logFile, ConsoleTarget console);
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;
  OutputPump(OutputPump&&) = delete;
  OutputPump& operator=(OutputPump&&) = delete;
  ~OutputPump();

  void start();
  // Copies whatever is still buffered in the pipe without waiting, then stops; used once the
  // worker exited (its children may keep the pipe open, so EOF is not awaited).
  void drainAndStop();

 private:
  void readSome();
  // Reads until the pipe is empty; true once it reached EOF.
  bool readAvailable();
  void consume(const char* data, std::size_t n);
  void onPiece(const LineAssembler::Piece& piece);
  [[nodiscard]] bool matchesFilter(std::string_view line) const;
  // One write(2) per destination for everything the last feed completed.
  void writeOut();
  void armHoldTimer();
  void onHoldTimer();
  void flushPartialLine();

  boost::asio::posix::stream_descriptor pipe_;
  UniqueFd logFile_;
  const ConsoleTarget console_;
  LineAssembler lines_;
  boost::asio::steady_timer holdTimer_;
  std::chrono::steady_clock::time_point heldSince_;  // when the held partial line began
  bool timerArmed_ = false;
  bool emitted_ = false;  // a piece left the assembler during the current feed
  std::string consoleOut_;
  std::string filteredOut_;
  std::array<char, 16384> buffer_{};
  // Outstanding waits hold this; it is cleared when the pump stops or is destroyed.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dtrun::agent::detail
