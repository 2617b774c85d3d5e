// The Tcp backend's point-to-point path: send/recv block on one message, isend/irecv hand back a
// TcpWork. User tags are 32-bit: collective traffic (tcp::kCollectiveTagBit) never matches them.
#include <memory>
#include <string>

#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {
namespace {

// Completion of an isend/irecv. Shares the transport, so it stays valid after the group.
class TcpWork final : public WorkState {
 public:
  TcpWork(std::shared_ptr<tcp::Transport> transport, std::shared_ptr<Op> op,
          std::chrono::milliseconds defaultTimeout, int globalPeer, int tag)
      : transport_(std::move(transport)),
        op_(std::move(op)),
        defaultTimeout_(defaultTimeout),
        globalPeer_(globalPeer),
        tag_(tag) {}

  void wait(std::chrono::milliseconds timeout) override {
    const auto limit = timeout.count() > 0 ? timeout : defaultTimeout_;
    const WaitResult result = transport_->wait(*op_, Clock::now() + limit, false);
    if (result != WaitResult::kFinished) {
      // The operation stays posted: a later wait() may still see it complete.
      throw TimeoutError(std::string(op_->opName) + ": timed out after " + millis(limit) +
                         " ms waiting for rank " + std::to_string(globalPeer_) + " (tag " +
                         std::to_string(tag_) + ")");
    }
    if (op_->state == OpState::kFailed) {
      throw CommError(op_->error);
    }
  }

  [[nodiscard]] bool isCompleted() const override { return transport_->isFinished(*op_); }

 private:
  std::shared_ptr<tcp::Transport> transport_;
  std::shared_ptr<Op> op_;
  const std::chrono::milliseconds defaultTimeout_;
  const int globalPeer_;
  const int tag_;
};

std::uint64_t userTag(int tag) { return static_cast<std::uint32_t>(tag); }

}  // namespace

void TcpCommunicator::send(const Buffer& buffer, int dst, int tag) {
  ensureUsable("send");
  Op op;
  op.reset(OpKind::kSend, dst, userTag(tag), bytePtr(buffer), buffer.bytes(), "send");
  transport_->post(op);
  p2p(op, dst, tag);
}

void TcpCommunicator::recv(const Buffer& buffer, int src, int tag) {
  ensureUsable("recv");
  Op op;
  op.reset(OpKind::kRecv, src, userTag(tag), bytePtr(buffer), buffer.bytes(), "recv");
  transport_->post(op);
  p2p(op, src, tag);
}

void TcpCommunicator::p2p(Op& op, int peer, int tag) {
  if (transport_->wait(op, Clock::now() + config_.timeout, false) != WaitResult::kFinished) {
    // The caller's buffer is about to go away: the transport must forget the op first.
    transport_->cancel(op);
    if (op.state != OpState::kDone) {
      throw TimeoutError(std::string(op.opName) + ": timed out after " + millis(config_.timeout) +
                         " ms waiting for rank " + std::to_string(globalRank(peer)) + " (tag " +
                         std::to_string(tag) + ")");
    }
  }
  if (op.state == OpState::kFailed) {
    throw CommError(op.error);
  }
}

std::shared_ptr<WorkState> TcpCommunicator::p2pAsync(OpKind kind, const Buffer& buffer, int peer,
                                                     int tag, const char* name) {
  ensureUsable(name);
  auto op = std::make_shared<Op>();
  op->reset(kind, peer, userTag(tag), bytePtr(buffer), buffer.bytes(), name);
  transport_->postAsync(op);
  return std::make_shared<TcpWork>(transport_, std::move(op), config_.timeout, globalRank(peer),
                                   tag);
}

std::shared_ptr<WorkState> TcpCommunicator::isend(const Buffer& buffer, int dst, int tag) {
  return p2pAsync(OpKind::kSend, buffer, dst, tag, "isend");
}

std::shared_ptr<WorkState> TcpCommunicator::irecv(const Buffer& buffer, int src, int tag) {
  return p2pAsync(OpKind::kRecv, buffer, src, tag, "irecv");
}
}  // namespace dtrun::runtime::detail::tcp
