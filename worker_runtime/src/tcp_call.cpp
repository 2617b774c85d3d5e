#include "tcp_call.h"

#include <string>
#include <vector>

#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {
namespace {

std::string rankSetList(const std::set<int>& ranks) {
  return detail::rankList(std::vector<int>(ranks.begin(), ranks.end()));
}

// A failure names every peer that died, not only the one behind `message`: where a survivor's
// reset arrives before the dead rank's end of file, the rank that really died is still named.
std::string withEveryCrash(std::string message, const std::vector<std::string>& crashes) {
  for (const std::string& crash : crashes) {
    if (message.find(crash) == std::string::npos) {
      message += "; also " + crash;
    }
  }
  return message;
}

}  // namespace

Call::Call(TcpCommunicator& comm, const char* name)
    : comm_(comm),
      name_(name),
      deadline_(Clock::now() + comm.config_.timeout),
      tagBase_(tcp::kCollectiveTagBit |
               (static_cast<std::uint64_t>(comm.sequence_++ & 0x3fffffffU) << 32)) {
  comm.ensureUsable(name);
}

Call::~Call() {
  if (!finished_ && comm_.broken_.empty()) {
    // Left by an exception (not ours: failWith already broke the group): ops may still point
    // into the caller's buffers, so the transport must drop them.
    comm_.breakGroup(std::string(name_) + " was interrupted");
  }
}

Op& Call::next() {
  if (used_ == comm_.ops_.size()) {
    comm_.ops_.push_back(std::make_unique<Op>());
  }
  return *comm_.ops_[used_++];
}

Op& Call::send(int peer, std::uint32_t step, const std::byte* data, std::size_t bytes) {
  Op& op = next();
  // The transport only reads a send's buffer.
  op.reset(OpKind::kSend, peer, tagBase_ | step, const_cast<std::byte*>(data), bytes, name_);
  comm_.transport_->post(op);
  return op;
}

Op& Call::recv(int peer, std::uint32_t step, std::byte* data, std::size_t bytes) {
  Op& op = next();
  op.reset(OpKind::kRecv, peer, tagBase_ | step, data, bytes, name_);
  comm_.transport_->post(op);
  return op;
}

Op& Call::recvReduce(int peer, std::uint32_t step, std::byte* data, std::size_t bytes,
                     DataType type, ReduceOp reduceOp) {
  Op& op = next();
  op.reset(OpKind::kRecv, peer, tagBase_ | step, data, bytes, name_);
  op.reduce = true;
  op.reduceType = type;
  op.reduceOp = reduceOp;
  comm_.transport_->post(op);
  return op;
}

void Call::wait(Op& op) {
  const WaitResult result = comm_.transport_->wait(op, deadline_, true);
  if (result == WaitResult::kFinished) {
    if (op.state == OpState::kDone) {
      return;
    }
    failWith(withEveryCrash(op.error, comm_.transport_->crashReasons()), false);
  }
  const std::set<int> waitingFor = pendingRanks();
  if (result == WaitResult::kPeerCrashed) {
    // The peer's reason may blame a rank that was itself only waiting (a timeout travels along
    // a ring): what this rank still waited for helps find the one that never came.
    const std::vector<std::string> crashes = comm_.transport_->crashReasons();
    failWith(
        withEveryCrash(std::string(name_) + ": " + crashes.front(), crashes) +
            (waitingFor.empty() ? "" : "; this rank was waiting for " + rankSetList(waitingFor)),
        false);
  }
  failWith(std::string(name_) + ": timed out after " + millis(comm_.config_.timeout) +
               " ms waiting for " + rankSetList(waitingFor),
           true);
}

std::set<int> Call::pendingRanks() const {
  std::set<int> ranks;
  for (std::size_t i = 0; i < used_; ++i) {
    const Op& pending = *comm_.ops_[i];
    if (!comm_.transport_->isFinished(pending)) {
      ranks.insert(comm_.globalRank(pending.peer));
    }
  }
  return ranks;
}

void Call::waitAll() {
  for (; waited_ < used_; ++waited_) {
    wait(*comm_.ops_[waited_]);
  }
}

void Call::failWith(const std::string& reason, bool timeout) {
  finished_ = true;
  // A peer that failed first may have closed on this rank before its reason could reach it.
  const std::string why = timeout ? reason : comm_.withRecordedCauses(reason);
  comm_.breakGroup(why);
  if (timeout) {
    throw TimeoutError(why);
  }
  throw CommError(why);
}
}  // namespace dtrun::runtime::detail::tcp
