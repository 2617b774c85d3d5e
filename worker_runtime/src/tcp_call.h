// One collective call of the Tcp backend (TcpCommunicator): the messages of one collective,
// posted under the call's sequence number and waited for against one deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>

#include "dtrun/runtime.h"

#include "tcp_transport.h"

namespace dtrun::runtime::detail::tcp {

class TcpCommunicator;

// One collective call: posts its messages under the call's sequence number and waits for them
// against one deadline. Any failure breaks the group (the ranks are no longer in step), tells
// the peers why, and throws.
class Call {
 public:
  Call(TcpCommunicator& comm, const char* name);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  Call(Call&&) = delete;
  Call& operator=(Call&&) = delete;

  Op& send(int peer, std::uint32_t step, const std::byte* data, std::size_t bytes);
  Op& recv(int peer, std::uint32_t step, std::byte* data, std::size_t bytes);
  // A receive whose data is combined into `data` as it arrives: data = op(data, incoming).
  Op& recvReduce(int peer, std::uint32_t step, std::byte* data, std::size_t bytes, DataType type,
                 ReduceOp op);
  void wait(Op& op);
  void waitAll();  // every op posted so far
  void finish() {
    waitAll();
    finished_ = true;
  }

 private:
  Op& next();
  [[noreturn]] void failWith(const std::string& reason, bool timeout);
  [[nodiscard]] std::set<int> pendingRanks() const;

  TcpCommunicator& comm_;
  const char* name_;
  const Clock::time_point deadline_;
  const std::uint64_t tagBase_;
  std::size_t used_ = 0;
  std::size_t waited_ = 0;  // ops [0, waited_) are known to be done
  bool finished_ = false;
};

}  // namespace dtrun::runtime::detail::tcp
