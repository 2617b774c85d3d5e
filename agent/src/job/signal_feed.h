// The signals the agent takes, as events on its loop: blocked in every thread (before the
// store's thread exists, so that it inherits the mask) and read from a signalfd, so no handler
// ever runs in signal context.
#pragma once

#include <functional>
#include <memory>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "dtrun/common.h"

namespace dtrun::agent::detail {

class SignalFeed {
 public:
  using OnSignal = std::function<void(int)>;

  // Blocks `signals` in the calling thread: call it before the first thread starts.
  static Result<std::unique_ptr<SignalFeed>> open(boost::asio::io_context& io,
                                                  const std::vector<int>& signals);
  SignalFeed(const SignalFeed&) = delete;
  SignalFeed& operator=(const SignalFeed&) = delete;
  SignalFeed(SignalFeed&&) = delete;
  SignalFeed& operator=(SignalFeed&&) = delete;
  ~SignalFeed() = default;

  // `onSignal` runs on the loop for every signal that arrives from now on.
  void watch(OnSignal onSignal);

 private:
  SignalFeed(boost::asio::io_context& io, UniqueFd fd);
  void arm();

  UniqueFd fd_;
  boost::asio::posix::stream_descriptor watch_;  // a dup of fd_: Asio closes its own
  OnSignal onSignal_;
};

}  // namespace dtrun::agent::detail
