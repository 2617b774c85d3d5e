// A pending isend/irecv of the Gloo backend (GlooCommunicator).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <gloo/transport/unbound_buffer.h>

#include "communicator.h"
#include "gloo_group.h"

namespace dtrun::runtime::detail {

// A pending isend/irecv. Gloo can only block on an unbound buffer (waitSend/waitRecv), and a wait
// that times out closes every pair of the context, so there is no way to poll. wait() therefore
// blocks in Gloo on the caller's thread; only when isCompleted() is asked first does a detached
// thread take over the blocking wait, and later wait() calls wait for that thread instead.
// A wait that times out inside Gloo breaks the whole group, as every Gloo timeout does.
class GlooWork final : public WorkState {
 public:
  GlooWork(std::shared_ptr<GlooGroup> group, std::unique_ptr<gloo::transport::UnboundBuffer> buffer,
           bool isSend, int peer, std::string op)
      : pending_(std::make_shared<Pending>(std::move(group), std::move(buffer), isSend, peer,
                                           std::move(op))) {}

  void wait(std::chrono::milliseconds timeout) override;

  [[nodiscard]] bool isCompleted() const override;

 private:
  enum class Phase : std::uint8_t { kPosted, kWaiting, kFinished };

  struct Pending {
    Pending(std::shared_ptr<GlooGroup> g, std::unique_ptr<gloo::transport::UnboundBuffer> b, bool s,
            int p, std::string o)
        : group(std::move(g)), buffer(std::move(b)), isSend(s), peer(p), op(std::move(o)) {}

    // Blocks in Gloo until the operation finished; exactly one thread calls this.
    void complete(std::chrono::milliseconds limit);

    const std::shared_ptr<GlooGroup> group;  // keeps the context (and its pairs) alive
    const std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    const bool isSend;
    const int peer;
    const std::string op;
    std::mutex mutex;
    std::condition_variable changed;
    Phase phase = Phase::kPosted;  // guarded by mutex
    std::exception_ptr error;      // guarded by mutex, set with phase = kFinished
  };

  const std::shared_ptr<Pending> pending_;
};

}  // namespace dtrun::runtime::detail
