// Copies one worker stream from its pipe to the rank's log file and, depending on the console
// mode, to dtrun's own stdout/stderr: raw, or line by line behind a "[role3]:" prefix. Runs on
// the agent's event loop; not thread-safe.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "dtrun/common.h"

namespace dtrun::agent::detail {

enum class ConsoleMode : std::uint8_t { kNone, kRaw, kPrefixed };

class OutputPump {
 public:
  // Takes the pipe's read end and the log file; `consoleFd` is 1 or 2.
  OutputPump(boost::asio::io_context& io, UniqueFd pipe, UniqueFd logFile, ConsoleMode mode,
             int consoleFd, std::string prefix);
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
  void flushPartialLine();

  boost::asio::posix::stream_descriptor pipe_;
  UniqueFd logFile_;
  const ConsoleMode mode_;
  const int consoleFd_;
  const std::string prefix_;
  std::string partialLine_;
  std::array<char, 16384> buffer_{};
  // Outstanding reads hold this; it is cleared when the pump is destroyed.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dtrun::agent::detail
