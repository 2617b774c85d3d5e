// dtrun's stdout and stderr as the event loop writes workers' output to them, never blocking: a
// console nobody reads (a full pipe, a paused pager, a FIFO whose reader sleeps) must not stop
// the loop, and with it the workers (whose pipes the loop drains), exits and signals. Where fd 1
// or 2 is a pipe, FIFO or terminal, writes go through a description of the agent's own, opened
// non-blocking (the shell's stays as it was); what the reader cannot take yet waits, up to
// kMaxPending bytes per stream, and goes out once the console is writable again. Beyond that the
// console's share is dropped (the log files keep every byte), said once when it starts and once
// when it ends. Files and sockets are written as before. On the loop; not thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>  // before Asio (Boost 1.74 under C++20)

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "dtrun/common.h"

namespace dtrun::agent::detail {

class ConsoleOut {
 public:
  static constexpr std::size_t kMaxPending = std::size_t{4} << 20;

  explicit ConsoleOut(boost::asio::io_context& io);
  ConsoleOut(const ConsoleOut&) = delete;
  ConsoleOut& operator=(const ConsoleOut&) = delete;
  ConsoleOut(ConsoleOut&&) = delete;
  ConsoleOut& operator=(ConsoleOut&&) = delete;
  ~ConsoleOut();

  // `fd` is 1 or 2; `bytes` go out in order after what is pending on that stream.
  void write(int fd, std::string_view bytes);
  // The agent's end: waits at most `limit` for what is pending to go out, then drops the rest.
  void flush(std::chrono::milliseconds limit);

 private:
  struct Stream {
    const char* name = "stdout";
    int fd = -1;  // where bytes go: `own`, or the inherited 1 or 2
    UniqueFd own;
    std::unique_ptr<boost::asio::posix::stream_descriptor> watch;  // on `own`
    std::string pending;
    std::size_t dropped = 0;
    bool waiting = false;
  };

  Stream& stream(int fd) { return streams_[fd == 2 ? 1 : 0]; }
  // Writes from the front of `pending` until done or the console would block.
  void drain(Stream& s);
  void arm(Stream& s);
  void say(Stream& s, const std::string& note);

  std::array<Stream, 2> streams_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace dtrun::agent::detail
