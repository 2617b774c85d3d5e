// The agent's collapsed console (--console=collapse): the output pumps hand it their ranks'
// whole lines, it groups them (console_collapse.h) and writes each group once to dtrun's stdout
// or stderr behind its ranks, on a timer that fires when the front group's window ends. A sink
// can take the groups instead (another node's relay sends them to the store's node). Runs on
// the agent's event loop; not thread-safe. Lives as long as the worker group, across attempts.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "console/console_collapse.h"
#include "console/console_out.h"

namespace dtrun::agent::detail {

class CollapsedConsole {
 public:
  static constexpr std::chrono::milliseconds kWindow{200};
  using Sink = std::function<void(std::vector<CollapsedLine>)>;

  CollapsedConsole(boost::asio::io_context& io, std::shared_ptr<ConsoleOut> console,
                   std::chrono::milliseconds window = kWindow);
  CollapsedConsole(const CollapsedConsole&) = delete;
  CollapsedConsole& operator=(const CollapsedConsole&) = delete;
  CollapsedConsole(CollapsedConsole&&) = delete;
  CollapsedConsole& operator=(CollapsedConsole&&) = delete;
  ~CollapsedConsole();

  // Ready groups go to `sink` instead of the console (null: the console).
  void setSink(Sink sink) { sink_ = std::move(sink); }
  // How many ranks print to this console: a group of that many leaves at once.
  void setExpectedRanks(std::size_t n) { collapse_.setExpectedRanks(n); }
  void setWindow(std::chrono::milliseconds window) { collapse_.setWindow(window); }
  // This console merges the whole job's lines (the store's node, console_relay.h).
  void setJobWide(bool jobWide) { jobWide_ = jobWide; }
  [[nodiscard]] bool jobWide() const { return jobWide_; }
  // Whole lines of one rank's stream, each with its end, as ConsoleLines cuts them.
  void lines(ConsoleStream stream, int rank, std::string_view text);
  // A group another node collapsed, printed `age` ago there.
  void group(ConsoleStream stream, std::span<const int> ranks, std::string_view text,
             std::chrono::milliseconds age);
  // Everything still pending, now (an attempt's end, the agent's exit).
  void flushAll();

 private:
  void emit(std::vector<CollapsedLine> ready);
  void takeReady();
  void arm();

  boost::asio::steady_timer timer_;
  std::shared_ptr<ConsoleOut> console_;
  ConsoleCollapse collapse_;
  Sink sink_;
  bool armed_ = false;
  bool jobWide_ = false;
  ConsoleCollapse::Clock::time_point armedFor_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Writes `lines` to fds 1 and 2 behind their ranks' prefix: one write per run of lines of one
// stream.
void writeCollapsed(ConsoleOut& console, const std::vector<CollapsedLine>& lines);

}  // namespace dtrun::agent::detail
