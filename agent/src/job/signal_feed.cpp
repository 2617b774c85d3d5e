#include "job/signal_feed.h"

#include <cerrno>

#include <sys/signalfd.h>
#include <unistd.h>

#include "signal_mask.h"

namespace dtrun::agent::detail {

Result<std::unique_ptr<SignalFeed>> SignalFeed::open(boost::asio::io_context& io,
                                                     const std::vector<int>& signals) {
  const sigset_t set = signals::block(signals);
  UniqueFd fd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd.valid()) {
    return Status::system("signalfd", errno);
  }
  return std::unique_ptr<SignalFeed>(new SignalFeed(io, std::move(fd)));
}

SignalFeed::SignalFeed(boost::asio::io_context& io, UniqueFd fd)
    : fd_(std::move(fd)), watch_(io, ::dup(fd_.get())) {}

void SignalFeed::watch(OnSignal onSignal) {
  onSignal_ = std::move(onSignal);
  arm();
}

void SignalFeed::arm() {
  watch_.async_wait(
      boost::asio::posix::descriptor_base::wait_read, [this](const boost::system::error_code& ec) {
        if (ec) {
          return;
        }
        signalfd_siginfo info{};
        while (::read(fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
          onSignal_(static_cast<int>(info.ssi_signo));
        }
        arm();
      });
}

}  // namespace dtrun::agent::detail
