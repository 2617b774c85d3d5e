// --console=collapse across nodes: every agent collapses its own ranks' lines (a 20 ms window
// on the nodes that do not host the store); those agents send each batch of groups, with their
// ranks and age, as one queue_push onto dtrun/<job>/console; the agent that hosts the store pops
// them (a blocking pop, up to 256 items a request) and merges them into its own console, whose
// window counts from when the line was printed (the age travels, never a clock reading). So the
// whole job's console is on the store's node, and a line waits at most the window plus the
// transfer. Cost: one request per sending node per batch (at most one per 20 ms while its ranks
// print), one blocking pop on the host. The store calls run on threads of their own; received
// groups come back through the agent's io_context.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>

#include "dtrun/rendezvous.h"

#include "console/collapsed_console.h"
#include "job/job.h"

namespace dtrun::agent::detail {

// Groups as text for the queue, with their ages as of `now`; and back (malformed text: skipped).
std::string encodeGroups(const std::vector<CollapsedLine>& lines,
                         ConsoleCollapse::Clock::time_point now);
struct ReceivedGroup {
  ConsoleStream stream = ConsoleStream::kOut;
  std::vector<int> ranks;
  std::string text;
  std::chrono::milliseconds age{0};
};
std::vector<ReceivedGroup> decodeGroups(std::string_view text);

class ConsoleRelay {
 public:
  // `receiver`: this agent hosts the store and prints the job's console; else it sends.
  static Result<std::unique_ptr<ConsoleRelay>> connect(boost::asio::io_context& io,
                                                       const rdzv::StoreFactory& stores,
                                                       const std::string& jobId,
                                                       std::shared_ptr<CollapsedConsole> console,
                                                       bool receiver);
  ConsoleRelay(const ConsoleRelay&) = delete;
  ConsoleRelay& operator=(const ConsoleRelay&) = delete;
  ConsoleRelay(ConsoleRelay&&) = delete;
  ConsoleRelay& operator=(ConsoleRelay&&) = delete;
  // A sender sends what is queued; a receiver stops popping, then prints what is still queued.
  ~ConsoleRelay();

 private:
  // The destructor's work: the sender flushes what is queued; the receiver merges what the other
  // nodes sent last and prints it.
  void finish();
  ConsoleRelay(boost::asio::io_context& io, std::unique_ptr<rdzv::Store> store, std::string key,
               std::shared_ptr<CollapsedConsole> console, bool receiver);
  void receive();

  boost::asio::io_context& io_;
  std::unique_ptr<rdzv::Store> store_;  // used on the relay's thread only
  const std::string key_;
  std::shared_ptr<CollapsedConsole> console_;
  const bool receiver_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<TaskThread> sender_;  // senders: the pushes, in order
  std::thread receiverThread_;
};

}  // namespace dtrun::agent::detail
