// The Tcp backend: our own CPU backend. Connections and framing live in tcp_setup/tcp_transport
// (shared memory between ranks of one host, shm_setup); this file holds the algorithms, chosen
// by size and topology:
//   all_reduce      small: recursive doubling (non-powers of two fold the extra ranks in),
//                   large: pipelined ring reduce-scatter + all-gather; up to 4 ranks on one
//                   host: a star to rank 0 below 4 MiB (2 ranks) / 512 KiB; every rank on one
//                   host over shared memory, from 4 MiB (2 ranks) / 256 KiB: "direct" through
//                   one group-wide segment (shm_segment.h; allReduceDirect); the crossovers
//                   are measured (bench/collectives: --algo-sweep; see kRingFrom*,
//                   kDirectFrom*). Ranks on several hosts, some sharing one: hierarchical
//                   (reduce to each host's leader, all_reduce among leaders, broadcast back).
//                   DTRUN_ALLREDUCE_ALGO forces one.
//   broadcast       binomial tree; large messages on 3+ ranks: pipelined chain
//   reduce          binomial tree; large: ring reduce-scatter, then the blocks go to the root
//   all_gather      pipelined ring            reduce_scatter   pipelined ring
//   gather/scatter  direct to/from the root   all_to_all       pairwise exchange
//   barrier         dissemination (zero-byte messages)
// all_reduce is bitwise identical on every rank: recursive doubling combines the two halves in
// rank order on both sides, and the ring's all-gather and the direct one copy each finished block.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <set>
#include <span>
#include <thread>

#include <unistd.h>

#include "communicator.h"
#include "log.h"
#include "reduce.h"
#include "shm_segment.h"
#include "shm_setup.h"
#include "tcp_setup.h"
#include "tcp_transport.h"

namespace dtrun::runtime::detail {
namespace {

using tcp::Clock;
using tcp::Op;
using tcp::OpKind;
using tcp::OpState;
using tcp::WaitResult;

constexpr std::size_t kSmallBytes =
    std::size_t{64} * 1024;  // binomial trees (broadcast, reduce) up to this
// all_reduce thresholds, from bench/collectives/run.sh's algorithm sweep (bench/README.md; 2 and
// 4 ranks on this 2-core machine). One host, at most 4 ranks: the star (every rank sends to
// rank 0, which reduces in rank order and sends the result back: the hierarchical algorithm with
// one host) beat doubling and ring at every size up to 2 MiB at 2 ranks and up to 256 KiB at 4
// (medians of 3 sweeps; single sweeps put the crossovers between 256 KiB and 8 MiB): two steps,
// and one rank reduces instead of all of them, which is what counts when ranks share few cores.
// The ring wins above (from 4 MiB at 2 ranks, 512 KiB at 4).
constexpr std::size_t kRingFromOneHostPair = std::size_t{4} << 20U;
constexpr std::size_t kRingFromOneHost = std::size_t{512} << 10U;
constexpr int kStarMaxRanks = 4;
// More ranks on one host (not measured here: flat doubling/ring), and between hosts: the ring
// beat doubling from 64 KiB (shm, 4 ranks) to 512 KiB (shm, 2 ranks), from 128-256 KiB over
// sockets. A star across hosts would funnel n - 1 buffers through one NIC: never used there.
constexpr std::size_t kRingFromShm = std::size_t{64} * 1024;
constexpr std::size_t kRingFromTcp = std::size_t{128} * 1024;
// Step ids of the hierarchical all_reduce's in-host legs (doubling and ring use low ids).
constexpr std::uint32_t kHostUpStep = 1U << 30U;
constexpr std::uint32_t kHostDownStep = (1U << 30U) + 1;
// Ring and chain messages are cut into segments so a rank forwards (and reduces) the first part
// of a block while the rest is still arriving.
constexpr std::size_t kSegmentBytes = std::size_t{256} * 1024;
// Ring steps whose receives are posted ahead, so data lands in place (reduce-scatter steps
// combine it into the buffer as it arrives) instead of being buffered as unexpected.
constexpr int kRingWindow = 2;
// The direct all_reduce (every rank on one host, all over shared memory), from the same sweep
// (medians of 3): it beat every other algorithm at every size from 4 MiB at 2 ranks (below, the
// star and doubling are as fast: one exchange) and from 256 KiB at 4 ranks (below, the star's
// two steps win). 3 ranks, and more than 4 (not measured here), take the 4-rank threshold.
constexpr std::size_t kDirectFromPair = std::size_t{4} << 20U;
constexpr std::size_t kDirectFrom = std::size_t{256} << 10U;
// Each rank's slot holds one piece of the message (DTRUN_SHM_SLOT_BYTES); three sets of slots
// let one barrier per piece order every reader before the next writer (see allReduceDirect).
constexpr std::size_t kDirectSlotBytes = std::size_t{512} << 10U;
constexpr std::size_t kDirectSets = 3;
constexpr std::size_t kCacheLine = 64;
constexpr std::size_t kDirectChunkBytes = std::size_t{16} << 10U;  // reduced while in L1
// Its set-up messages' step ids, and the longest segment path it accepts.
constexpr std::uint32_t kSetUpLength = 0;
constexpr std::uint32_t kSetUpPath = 1;
constexpr std::uint32_t kSetUpAnswer = 2;
constexpr std::uint32_t kSetUpVerdict = 3;
constexpr std::uint32_t kMaxPathBytes = 4096;
// Step ids of recursive doubling's fold-in and fold-out messages (doubling steps are 1..31).
constexpr std::uint32_t kFoldInStep = 0;
constexpr std::uint32_t kFoldOutStep = 32;

std::string millis(std::chrono::milliseconds timeout) { return std::to_string(timeout.count()); }

// How long a waiting caller busy-polls before sleeping: DTRUN_TCP_SPIN_US if set, else 20 us
// when every rank on this node can have a core of its own, else 0 (spinning ranks would then
// steal the cores their peers need to answer).
std::chrono::microseconds spinFor() {
  constexpr long kDefaultSpinUs = 20;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only use of the environment at group creation
  if (const char* text = std::getenv("DTRUN_TCP_SPIN_US"); text != nullptr && *text != '\0') {
    return std::chrono::microseconds(std::clamp(std::strtol(text, nullptr, 10), 0L, 1000000L));
  }
  // NOLINTNEXTLINE(concurrency-mt-unsafe): as above
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const long localRanks = local != nullptr ? std::max(1L, std::strtol(local, nullptr, 10)) : 1;
  const auto cores = static_cast<long>(std::thread::hardware_concurrency());
  return std::chrono::microseconds(cores > 0 && localRanks <= cores ? kDefaultSpinUs : 0);
}

enum class AllReduceAlgo : std::uint8_t { kAuto, kDoubling, kRing, kHierarchical, kDirect };

AllReduceAlgo allReduceAlgo() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only use of the environment at group creation
  const char* text = std::getenv("DTRUN_ALLREDUCE_ALGO");
  const std::string name = text != nullptr ? text : "";
  if (name.empty() || name == "auto") {
    return AllReduceAlgo::kAuto;
  }
  if (name == "doubling") {
    return AllReduceAlgo::kDoubling;
  }
  if (name == "ring") {
    return AllReduceAlgo::kRing;
  }
  if (name == "hier") {
    return AllReduceAlgo::kHierarchical;
  }
  if (name == "direct") {
    return AllReduceAlgo::kDirect;
  }
  throw ConfigError("DTRUN_ALLREDUCE_ALGO='" + name +
                    "': expected auto (by size and topology), doubling, ring, hier or direct");
}

std::string rankList(const std::set<int>& ranks) {
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

void copyBytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) {
    std::memmove(dst, src, bytes);
  }
}

std::byte* bytePtr(const Buffer& b) { return static_cast<std::byte*>(b.data); }

// Grow-only scratch memory, uninitialised (it is always written before it is read).
class Scratch {
 public:
  std::byte* get(std::size_t bytes) {
    if (bytes > capacity_) {
      data_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
      capacity_ = bytes;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
};

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

class TcpCommunicator;

// The group's connections: a socket to every peer, and a shared-memory link to every peer on
// this host (see shm_setup.h). hosts[r] numbers group rank r's host; `linked` counts the peers
// over shared memory.
std::shared_ptr<tcp::Transport> connect(const CommunicatorConfig& config, std::vector<int>& hosts,
                                        int& linked) {
  std::vector<UniqueFd> fds = tcp::connectMesh(config);
  shm::Topology topology = shm::connectLinks(config, fds);
  hosts = std::move(topology.host);
  linked = 0;
  for (const auto& link : topology.links) {
    linked += link ? 1 : 0;
  }
  log::runtime().debug("tcp: group '{}' rank {}: {} of {} peers over shared memory",
                       config.groupName, config.rank, linked, config.size - 1);
  return std::make_shared<tcp::Transport>(std::move(fds), std::move(topology.links),
                                          config.globalRanks, spinFor());
}

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

class TcpCommunicator final : public Communicator {
 public:
  explicit TcpCommunicator(const CommunicatorConfig& config)
      : config_(config),
        algo_(allReduceAlgo()),
        slotBytes_(shm::slotBytes(kDirectSlotBytes)),
        transport_(connect(config, hosts_, linked_)) {
    for (int r = 0; r < config_.size; ++r) {
      world_.push_back(r);
      const int host = hosts_[static_cast<std::size_t>(r)];
      if (host == hosts_[static_cast<std::size_t>(config_.rank)]) {
        hostRanks_.push_back(r);
      }
      if (static_cast<std::size_t>(host) == leaders_.size()) {
        leaders_.push_back(r);  // hosts are numbered by first appearance: r is its first rank
      }
    }
    // Single-host groups use shared memory throughout (unless it is unavailable or off, which
    // the socket threshold then covers too: the two are measured within a few KiB).
    ringFrom_ = leaders_.size() == 1 ? kRingFromShm : kRingFromTcp;
    starBelow_ = leaders_.size() > 1 || config_.size > kStarMaxRanks ? 0
                 : config_.size == 2                                 ? kRingFromOneHostPair
                                                                     : kRingFromOneHost;
    directFrom_ = config_.size == 2 ? kDirectFromPair : kDirectFrom;
    transport_->start();
    log::runtime().debug("tcp: group '{}' ready: rank {} of {}", config_.groupName, config_.rank,
                         config_.size);
  }

  ~TcpCommunicator() override {
    try {
      transport_->stop();
    } catch (const std::exception& e) {
      log::runtime().warn("tcp: closing group '{}': {}", config_.groupName, e.what());
    }
  }
  TcpCommunicator(const TcpCommunicator&) = delete;
  TcpCommunicator& operator=(const TcpCommunicator&) = delete;
  TcpCommunicator(TcpCommunicator&&) = delete;
  TcpCommunicator& operator=(TcpCommunicator&&) = delete;

  [[nodiscard]] int rank() const override { return config_.rank; }
  [[nodiscard]] int size() const override { return config_.size; }
  [[nodiscard]] Backend backend() const override { return Backend::kTcp; }
  [[nodiscard]] std::chrono::milliseconds timeout() const override { return config_.timeout; }

  void barrier() override;
  void send(const Buffer& buffer, int dst, int tag) override;
  void recv(const Buffer& buffer, int src, int tag) override;
  std::shared_ptr<WorkState> isend(const Buffer& buffer, int dst, int tag) override;
  std::shared_ptr<WorkState> irecv(const Buffer& buffer, int src, int tag) override;
  void broadcast(const Buffer& buffer, int root) override;
  void reduce(const Buffer& buffer, int root, ReduceOp op) override;
  void allReduce(const Buffer& buffer, ReduceOp op) override;
  void allGather(const Buffer& in, const Buffer& out) override;
  void gather(const Buffer& in, const Buffer& out, int root) override;
  void scatter(const Buffer& in, const Buffer& out, int root) override;
  void reduceScatter(const Buffer& in, const Buffer& out, ReduceOp op) override;
  void allToAll(const Buffer& in, const Buffer& out) override;
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                      const std::string& groupName) override;

 private:
  friend class Call;

  void ensureUsable(const char* name) const override {
    if (!broken_.empty()) {
      throw CommError(std::string(name) + ": the group is unusable after an earlier failure (" +
                      broken_ + ")");
    }
  }
  void breakGroup(const std::string& reason) {
    if (broken_.empty()) {
      broken_ = reason;
    }
    transport_->abort(reason);
  }
  [[nodiscard]] int globalRank(int r) const {
    return config_.globalRanks[static_cast<std::size_t>(r)];
  }

  void p2p(Op& op, int peer, int tag);
  std::shared_ptr<WorkState> p2pAsync(OpKind kind, const Buffer& buffer, int peer, int tag,
                                      const char* name);
  // all_reduce among `members` (group ranks; this rank is members[me]) within `call`.
  void allReduceDoubling(Call& call, const std::vector<int>& members, int me, const Buffer& buffer,
                         ReduceOp op);
  void allReduceRing(Call& call, const std::vector<int>& members, int me, const Buffer& buffer,
                     ReduceOp op);
  void allReduceHierarchical(const Buffer& buffer, ReduceOp op);
  void allReduceDirect(const Buffer& buffer, ReduceOp op);
  // Whether the direct all_reduce can run: sets its segment up at the first call (a collective
  // on every rank of a one-host group; nothing elsewhere, where it answers false at once).
  bool directReady();
  void setUpDirect();
  void warnDirect(const std::string& why);
  // Runs `rsSteps` reduce-scatter then `agSteps` all-gather steps of a ring over `buf` among
  // `members` (this rank is members[me]), whose block c holds elements [offsets[c],
  // offsets[c + 1]). Step s sends block (me - s + shift) to the right and receives block
  // (me - s - 1 + shift) from the left; after m - 1 reduce-scatter steps, members[i] holds the
  // full reduction of block (i + 1 + shift).
  void ring(Call& call, const std::vector<int>& members, int me, std::byte* buf,
            const std::vector<std::size_t>& offsets, int rsSteps, int agSteps, int shift,
            DataType type, ReduceOp op);
  void ring(Call& call, std::byte* buf, const std::vector<std::size_t>& offsets, int rsSteps,
            int agSteps, int shift, DataType type, ReduceOp op) {
    ring(call, world_, rank(), buf, offsets, rsSteps, agSteps, shift, type, op);
  }
  std::vector<std::size_t>& balancedOffsets(std::size_t count, int parts);
  std::vector<std::size_t>& balancedOffsets(std::size_t count) {
    return balancedOffsets(count, size());
  }

  const CommunicatorConfig config_;
  const AllReduceAlgo algo_;     // DTRUN_ALLREDUCE_ALGO; kAuto: by size and topology
  const std::size_t slotBytes_;  // the direct all_reduce's piece per rank
  std::vector<int> hosts_;  // hosts_[r]: group rank r's host, numbered from 0 (set by connect())
  int linked_ = 0;          // peers over shared memory (set by connect())
  std::shared_ptr<tcp::Transport> transport_;
  std::vector<int> world_;      // 0 .. size - 1
  std::vector<int> hostRanks_;  // the group ranks on this rank's host, ascending
  std::vector<int> leaders_;    // each host's lowest group rank, by host number
  std::size_t ringFrom_ = 0;    // all_reduce: ring from this many bytes, doubling below
  std::size_t starBelow_ = 0;   // one host, few ranks: the star below this many bytes
  std::size_t directFrom_ = 0;  // one host, all over shared memory: direct from this many bytes
  enum class Direct : std::uint8_t { kUntried, kReady, kUnavailable };
  Direct direct_ = Direct::kUntried;
  std::unique_ptr<shm::Segment> segment_;  // kReady: kDirectSets x size() slots
  bool directWarned_ = false;
  std::uint64_t directEpoch_ = 0;  // steps of direct all_reduces so far: where the sets stand
  std::string broken_;             // why the group is unusable (a collective failed)
  std::uint32_t sequence_ = 0;
  // Per-call state, reused so that steady-state collectives do not allocate.
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<Op*> ringRecvs_;
  std::vector<std::size_t> offsets_;
  Scratch scratch_;      // received data waiting to be reduced
  Scratch work_;         // a copy of an input the caller's buffer must not see changed
  Scratch hostScratch_;  // the hierarchical all_reduce's in-host contributions
};

// ---- Call -------------------------------------------------------------------------------------

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
    failWith(withEveryCrash(std::string(name_) + ": " + crashes.front(), crashes) +
                 (waitingFor.empty() ? "" : "; this rank was waiting for " + rankList(waitingFor)),
             false);
  }
  failWith(std::string(name_) + ": timed out after " + millis(comm_.config_.timeout) +
               " ms waiting for " + rankList(waitingFor),
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
  comm_.breakGroup(reason);
  if (timeout) {
    throw TimeoutError(reason);
  }
  throw CommError(reason);
}

// ---- point to point -------------------------------------------------------------------------

std::uint64_t userTag(int tag) { return static_cast<std::uint32_t>(tag); }

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

// ---- barrier --------------------------------------------------------------------------------

void TcpCommunicator::barrier() {
  const int n = size();
  Call call(*this, "barrier");
  const int r = rank();
  std::uint32_t round = 0;
  for (int distance = 1; distance < n; distance <<= 1, ++round) {
    Op& in = call.recv((r - distance + n) % n, round, nullptr, 0);
    call.send((r + distance) % n, round, nullptr, 0);
    call.wait(in);
  }
  call.finish();
}

// ---- all_reduce -----------------------------------------------------------------------------

void TcpCommunicator::allReduce(const Buffer& buffer, ReduceOp op) {
  AllReduceAlgo algo = algo_;
  const bool wantDirect = algo == AllReduceAlgo::kDirect ||
                          (algo == AllReduceAlgo::kAuto && buffer.bytes() >= directFrom_);
  if (wantDirect && directReady()) {
    algo = AllReduceAlgo::kDirect;
  } else if (algo == AllReduceAlgo::kDirect) {
    algo = AllReduceAlgo::kAuto;  // directReady said why, once
  }
  if (algo == AllReduceAlgo::kAuto) {
    // Across hosts with some sharing one: the in-host legs go through shared memory, and only
    // one rank per host crosses the network.
    const bool hierarchical =
        (leaders_.size() > 1 && leaders_.size() < static_cast<std::size_t>(size())) ||
        buffer.bytes() < starBelow_;
    algo = hierarchical                 ? AllReduceAlgo::kHierarchical
           : buffer.bytes() < ringFrom_ ? AllReduceAlgo::kDoubling
                                        : AllReduceAlgo::kRing;
  }
  if (algo == AllReduceAlgo::kDirect) {
    allReduceDirect(buffer, op);
  } else if (algo == AllReduceAlgo::kHierarchical) {
    allReduceHierarchical(buffer, op);
  } else {
    Call call(*this, "all_reduce");
    if (algo == AllReduceAlgo::kDoubling) {
      allReduceDoubling(call, world_, rank(), buffer, op);
    } else {
      allReduceRing(call, world_, rank(), buffer, op);
    }
    call.finish();
  }
  if (op == ReduceOp::kAvg) {
    finishAverage(buffer.data, buffer.count, buffer.dtype, size());
  }
}

void TcpCommunicator::allReduceDoubling(Call& call, const std::vector<int>& members, int me,
                                        const Buffer& buffer, ReduceOp op) {
  const int n = static_cast<int>(members.size());
  const int r = me;
  auto real = [&](int index) { return members[static_cast<std::size_t>(index)]; };
  std::byte* buf = bytePtr(buffer);
  const std::size_t bytes = buffer.bytes();
  std::byte* theirs = scratch_.get(bytes);
  // Both partners compute op(lower half, upper half), in that order, so every rank ends with
  // the same bits even where op(a, b) and op(b, a) differ (NaN payloads, -0 vs +0).
  auto combine = [&](bool mineIsLower) {
    if (mineIsLower) {
      reduceInto(buf, theirs, buffer.count, buffer.dtype, op);
    } else {
      reduceInto(theirs, buf, buffer.count, buffer.dtype, op);
      std::memcpy(buf, theirs, bytes);
    }
  };
  // With n = 2^k + rem, the first 2 * rem ranks pair up: the even one hands its data to the
  // odd one and sits out the doubling, then gets the result back.
  const int pof2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int rem = n - pof2;
  int newRank = r - rem;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      call.wait(call.send(real(r + 1), kFoldInStep, buf, bytes));
      newRank = -1;
    } else {
      call.wait(call.recv(real(r - 1), kFoldInStep, theirs, bytes));
      combine(false);
      newRank = r / 2;
    }
  }
  if (newRank >= 0) {
    std::uint32_t step = 1;
    for (int mask = 1; mask < pof2; mask <<= 1, ++step) {
      const int newPeer = newRank ^ mask;
      const int peer = real(newPeer < rem ? newPeer * 2 + 1 : newPeer + rem);
      Op& in = call.recv(peer, step, theirs, bytes);
      Op& out = call.send(peer, step, buf, bytes);
      call.wait(in);
      call.wait(out);  // buf is about to change: the send must have left it
      combine(newRank < newPeer);
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      call.send(real(r - 1), kFoldOutStep, buf, bytes);
    } else {
      call.wait(call.recv(real(r + 1), kFoldOutStep, buf, bytes));
    }
  }
}

std::vector<std::size_t>& TcpCommunicator::balancedOffsets(std::size_t count, int parts) {
  const auto n = static_cast<std::size_t>(parts);
  offsets_.resize(n + 1);
  for (std::size_t c = 0; c <= n; ++c) {
    offsets_[c] = count * c / n;
  }
  return offsets_;
}

void TcpCommunicator::allReduceRing(Call& call, const std::vector<int>& members, int me,
                                    const Buffer& buffer, ReduceOp op) {
  const int n = static_cast<int>(members.size());
  ring(call, members, me, bytePtr(buffer), balancedOffsets(buffer.count, n), n - 1, n - 1, 0,
       buffer.dtype, op);
}

void TcpCommunicator::allReduceHierarchical(const Buffer& buffer, ReduceOp op) {
  Call call(*this, "all_reduce");
  std::byte* buf = bytePtr(buffer);
  const std::size_t bytes = buffer.bytes();
  const int leader = hostRanks_.front();
  if (rank() != leader) {
    // The result comes back into buf only after the leader has all of it: the send is done.
    call.send(leader, kHostUpStep, buf, bytes);
    call.recv(leader, kHostDownStep, buf, bytes);
    call.finish();
    return;
  }
  // Reduced in rank order on the host, so every host's partial is the same on every run.
  const std::size_t others = hostRanks_.size() - 1;
  std::byte* theirs = hostScratch_.get(std::max<std::size_t>(others, 1) * bytes);
  std::vector<Op*>& fromHost = ringRecvs_;
  fromHost.assign(others, nullptr);
  for (std::size_t i = 0; i < others; ++i) {
    fromHost[i] = &call.recv(hostRanks_[i + 1], kHostUpStep, theirs + i * bytes, bytes);
  }
  for (std::size_t i = 0; i < others; ++i) {
    call.wait(*fromHost[i]);  // the next ones keep arriving while this one is reduced
    reduceInto(buf, theirs + i * bytes, buffer.count, buffer.dtype, op);
  }
  if (leaders_.size() > 1) {
    const int me =
        static_cast<int>(std::find(leaders_.begin(), leaders_.end(), rank()) - leaders_.begin());
    if (bytes < kRingFromTcp) {
      allReduceDoubling(call, leaders_, me, buffer, op);
    } else {
      allReduceRing(call, leaders_, me, buffer, op);
    }
    call.waitAll();
  }
  for (std::size_t i = 0; i < others; ++i) {
    call.send(hostRanks_[i + 1], kHostDownStep, buf, bytes);
  }
  call.finish();
}

// ---- the direct all_reduce ------------------------------------------------------------------
//
// Every rank on one host: one segment holds a slot per rank (times kDirectSets). Per piece of the
// message, each rank copies its piece into its slot; after a barrier, rank i reduces sub-range i
// of the piece across all slots, in rank order, into slot 0 (and its own output); after the next
// barrier each rank copies the other sub-ranges out of slot 0. Two copies and a 1/n share of the
// reduction per rank and piece, and one barrier per piece: the ring's 2(n - 1) lock-step steps,
// each a copy into a ring and one out of it, cost context switches once ranks outnumber cores.
// The barriers are the group's own zero-byte messages, so a dead or late rank fails the call and
// is named exactly as in the other algorithms.

bool TcpCommunicator::directReady() {
  if (leaders_.size() != 1 || size() < 2) {
    if (algo_ == AllReduceAlgo::kDirect && size() > 1) {
      warnDirect("the group spans " + std::to_string(leaders_.size()) + " hosts");
    }
    return false;
  }
  if (direct_ == Direct::kUntried) {
    setUpDirect();
  }
  return direct_ == Direct::kReady;
}

void TcpCommunicator::warnDirect(const std::string& why) {
  if (!directWarned_) {
    directWarned_ = true;
    log::runtime().warn(
        "tcp: group '{}' rank {}: the direct all_reduce is off, the other algorithms stand in: {}",
        config_.groupName, globalRank(rank()), why);
  }
}

// Rank 0 creates the segment and offers its path; every rank maps it and answers; rank 0 unlinks
// it (both this and a failure on the way: nothing outlives the call) and gives the verdict. A
// rank whose peers are not all on shared memory (DTRUN_TRANSPORT=tcp, a pair that fell back)
// declines, and the whole group goes without.
void TcpCommunicator::setUpDirect() {
  const int n = size();
  const bool linked = linked_ == n - 1;
  const std::size_t total = kDirectSets * static_cast<std::size_t>(n) * slotBytes_;
  direct_ = Direct::kUnavailable;
  std::string error;
  char verdict = 0;
  Call call(*this, "all_reduce");
  if (rank() == 0) {
    static std::atomic<std::uint64_t> segments{0};
    struct Unlinked {
      std::string path;
      Unlinked() = default;
      Unlinked(const Unlinked&) = delete;
      Unlinked& operator=(const Unlinked&) = delete;
      Unlinked(Unlinked&&) = delete;
      Unlinked& operator=(Unlinked&&) = delete;
      ~Unlinked() {
        if (!path.empty()) {
          ::unlink(path.c_str());
        }
      }
    } created;
    std::string path;
    if (linked) {
      path = shm::shmDir() + "/dtrun-" + std::to_string(::getpid()) + "-direct-" +
             std::to_string(segments++);
      segment_ = shm::Segment::create(path, total, error);
      if (segment_) {
        created.path = path;
      } else {
        path.clear();
      }
    }
    const auto length = static_cast<std::uint32_t>(path.size());
    const auto pathBytes = std::as_bytes(std::span(path));
    std::vector<char> answers(static_cast<std::size_t>(n), 0);
    for (int q = 1; q < n; ++q) {
      call.send(q, kSetUpLength, reinterpret_cast<const std::byte*>(&length), sizeof length);
      call.send(q, kSetUpPath, pathBytes.data(), pathBytes.size());
      call.recv(q, kSetUpAnswer,
                reinterpret_cast<std::byte*>(&answers[static_cast<std::size_t>(q)]), 1);
    }
    call.waitAll();
    if (!created.path.empty()) {
      ::unlink(created.path.c_str());  // every rank answered: who maps it holds it now
      created.path.clear();
    }
    verdict = segment_ && std::count(answers.begin() + 1, answers.end(), 1) == n - 1 ? 1 : 0;
    for (int q = 1; q < n; ++q) {
      call.send(q, kSetUpVerdict, reinterpret_cast<const std::byte*>(&verdict), 1);
    }
    call.finish();
  } else {
    std::uint32_t length = 0;
    call.wait(call.recv(0, kSetUpLength, reinterpret_cast<std::byte*>(&length), sizeof length));
    if (length > kMaxPathBytes) {
      throw CommError("all_reduce: rank " + std::to_string(globalRank(0)) +
                      " offered a segment path of " + std::to_string(length) + " bytes");
    }
    std::string path(length, '\0');
    call.wait(call.recv(0, kSetUpPath, std::as_writable_bytes(std::span(path)).data(), length));
    char answer = 0;
    if (!path.empty() && linked) {
      segment_ = shm::Segment::open(path, total, error);
      answer = segment_ ? 1 : 0;
    }
    call.send(0, kSetUpAnswer, reinterpret_cast<const std::byte*>(&answer), 1);
    call.wait(call.recv(0, kSetUpVerdict, reinterpret_cast<std::byte*>(&verdict), 1));
    call.finish();
  }
  if (!error.empty()) {
    warnDirect(error + " (DTRUN_SHM_DIR names another tmpfs, DTRUN_SHM_SLOT_BYTES a smaller slot)");
  } else if (verdict == 0 && algo_ == AllReduceAlgo::kDirect) {
    warnDirect(linked ? "a peer could not map the segment (its log says why)"
                      : "some peers of this rank are not on shared memory (DTRUN_TRANSPORT=tcp, "
                        "or a pair stayed on TCP)");
  }
  if (verdict == 1) {
    direct_ = Direct::kReady;
    log::runtime().debug("tcp: group '{}' rank {}: direct all_reduce over {} KiB of slots",
                         config_.groupName, rank(), total >> 10U);
  } else {
    segment_.reset();
  }
}

void TcpCommunicator::allReduceDirect(const Buffer& buffer, ReduceOp op) {
  const int n = size();
  const int me = rank();
  const std::size_t esize = elementSize(buffer.dtype);
  const std::size_t pieceElements = slotBytes_ / esize;
  const std::size_t count = buffer.count;
  const std::size_t pieces = (count + pieceElements - 1) / pieceElements;
  std::byte* buf = bytePtr(buffer);
  // Sets rotate across calls too: a rank may start the next call while another still copies
  // this call's last piece out.
  const std::uint64_t firstEpoch = directEpoch_;
  directEpoch_ += pieces + 1;
  auto slot = [&](std::size_t piece, int r) {
    const std::uint64_t set = (firstEpoch + piece) % kDirectSets;
    return segment_->data() +
           (set * static_cast<std::size_t>(n) + static_cast<std::size_t>(r)) * slotBytes_;
  };
  auto input = [&](std::size_t piece) { return buf + piece * pieceElements * esize; };
  auto length = [&](std::size_t piece) {
    return std::min(pieceElements, count - piece * pieceElements);
  };
  // Where sub-range i of a piece of `elements` starts: whole cache lines, so that no two ranks
  // write one line of slot 0.
  const std::size_t unit = std::max<std::size_t>(1, kCacheLine / esize);
  auto bound = [&](std::size_t elements, int i) {
    const std::size_t units = (elements + unit - 1) / unit;
    return std::min(elements,
                    units * static_cast<std::size_t>(i) / static_cast<std::size_t>(n) * unit);
  };
  const std::size_t chunkElements = std::max<std::size_t>(1, kDirectChunkBytes / esize);
  std::uint32_t rounds = 0;
  for (int distance = 1; distance < n; distance <<= 1) {
    ++rounds;
  }
  Call call(*this, "all_reduce");
  // Step k: piece k goes in, then a barrier; piece k - 1's result goes out, piece k is reduced.
  // A rank writes piece k + 1 into set k + 1 (mod 3) only after barrier k, which every rank
  // passed after reading set k - 2 (the same set) for the last time; a call's last step, a
  // barrier without a piece, counts as a piece for this.
  for (std::size_t k = 0; k <= pieces; ++k) {
    if (k < pieces) {
      // All but the sub-range this rank reduces: that one it reads from its own buffer.
      const std::size_t elements = length(k);
      const std::size_t mineFirst = bound(elements, me);
      const std::size_t mineLast = bound(elements, me + 1);
      std::memcpy(slot(k, me), input(k), mineFirst * esize);
      std::memcpy(slot(k, me) + mineLast * esize, input(k) + mineLast * esize,
                  (elements - mineLast) * esize);
    }
    // Dissemination barrier (as barrier()), its steps numbered per piece.
    auto step = static_cast<std::uint32_t>(k * rounds);
    for (int distance = 1; distance < n; distance <<= 1, ++step) {
      Op& in = call.recv((me - distance + n) % n, step, nullptr, 0);
      call.send((me + distance) % n, step, nullptr, 0);
      call.wait(in);
    }
    if (k > 0) {
      const std::size_t elements = length(k - 1);
      const std::size_t mineFirst = bound(elements, me);
      const std::size_t mineLast = bound(elements, me + 1);
      std::memcpy(input(k - 1), slot(k - 1, 0), mineFirst * esize);
      std::memcpy(input(k - 1) + mineLast * esize, slot(k - 1, 0) + mineLast * esize,
                  (elements - mineLast) * esize);
    }
    if (k < pieces) {
      const std::size_t elements = length(k);
      const std::size_t first = bound(elements, me);
      const std::size_t mine = bound(elements, me + 1) - first;
      // In chunks that stay in L1 while every other slot is folded in: each source is read
      // once from memory, not the partial sum n - 1 times.
      // The sum goes to slot 0 (for the others) and to this rank's output, in rank order.
      for (std::size_t at = first; at < first + mine; at += chunkElements) {
        const std::size_t len = std::min(chunkElements, first + mine - at);
        std::byte* sum = slot(k, 0) + at * esize;
        std::byte* own = input(k) + at * esize;
        if (me == 0) {
          std::memcpy(sum, own, len * esize);
        }
        for (int r = 1; r < n; ++r) {
          reduceInto(sum, r == me ? own : slot(k, r) + at * esize, len, buffer.dtype, op);
        }
        std::memcpy(own, sum, len * esize);
      }
    }
  }
  call.finish();
}

void TcpCommunicator::ring(Call& call, const std::vector<int>& members, int me, std::byte* buf,
                           const std::vector<std::size_t>& offsets, int rsSteps, int agSteps,
                           int shift, DataType type, ReduceOp op) {
  const int n = static_cast<int>(members.size());
  const int r = me;
  const int steps = rsSteps + agSteps;
  if (steps == 0) {
    return;
  }
  const std::size_t esize = elementSize(type);
  const int right = members[static_cast<std::size_t>((r + 1) % n)];
  const int left = members[static_cast<std::size_t>((r - 1 + n) % n)];
  auto blockOf = [&](int s) { return (((r - s + shift) % n) + n) % n; };
  std::size_t maxBlock = 0;
  for (int c = 0; c < n; ++c) {
    maxBlock = std::max(
        maxBlock, offsets[static_cast<std::size_t>(c) + 1] - offsets[static_cast<std::size_t>(c)]);
  }
  const std::size_t segmentElements = std::max<std::size_t>(1, kSegmentBytes / esize);
  const std::size_t segments =
      std::max<std::size_t>(1, (maxBlock + segmentElements - 1) / segmentElements);
  // Segment j of block c: elements [first, last).
  auto segment = [&](int c, std::size_t j) {
    const std::size_t begin = offsets[static_cast<std::size_t>(c)];
    const std::size_t length = offsets[static_cast<std::size_t>(c) + 1] - begin;
    return std::pair{begin + length * j / segments, begin + length * (j + 1) / segments};
  };
  const int window = std::min(steps, kRingWindow);
  auto tagOf = [&](int s, std::size_t j) {
    return static_cast<std::uint32_t>(static_cast<std::size_t>(s) * segments + j);
  };
  ringRecvs_.assign(static_cast<std::size_t>(steps) * segments, nullptr);
  auto postReceives = [&](int s) {
    const int c = blockOf(s + 1);
    for (std::size_t j = 0; j < segments; ++j) {
      const auto [first, last] = segment(c, j);
      // Reduce-scatter steps combine the block into buf as it arrives (no scratch: the block is
      // not being sent meanwhile), all-gather steps copy it.
      std::byte* dst = buf + first * esize;
      const std::size_t bytes = (last - first) * esize;
      ringRecvs_[tagOf(s, j)] = s < rsSteps
                                    ? &call.recvReduce(left, tagOf(s, j), dst, bytes, type, op)
                                    : &call.recv(left, tagOf(s, j), dst, bytes);
    }
  };
  auto postSend = [&](int s, std::size_t j) {
    const auto [first, last] = segment(blockOf(s), j);
    call.send(right, tagOf(s, j), buf + first * esize, (last - first) * esize);
  };

  for (std::size_t j = 0; j < segments; ++j) {
    postSend(0, j);
  }
  for (int s = 0; s < window; ++s) {
    postReceives(s);
  }
  for (int s = 0; s < steps; ++s) {
    for (std::size_t j = 0; j < segments; ++j) {
      call.wait(*ringRecvs_[tagOf(s, j)]);
      if (s + 1 < steps) {
        postSend(s + 1, j);  // forward what just arrived while the next segment comes in
      }
    }
    if (s + window < steps) {
      postReceives(s + window);
    }
  }
  call.waitAll();
}

// ---- broadcast and reduce -------------------------------------------------------------------

void TcpCommunicator::broadcast(const Buffer& buffer, int root) {
  const int n = size();
  Call call(*this, "broadcast");
  const int vr = (rank() - root + n) % n;  // rank relative to the root
  auto real = [&](int v) { return (v + root) % n; };
  std::byte* buf = bytePtr(buffer);
  const std::size_t bytes = buffer.bytes();
  if (bytes <= kSmallBytes || n <= 2) {
    // Binomial tree: receive from the parent, then send to the children, farthest first.
    int mask = 1;
    while (mask < n) {
      if ((vr & mask) != 0) {
        call.wait(call.recv(real(vr - mask), 0, buf, bytes));
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (vr + mask < n) {
        call.send(real(vr + mask), 0, buf, bytes);
      }
    }
  } else {
    // Pipelined chain: each rank forwards a segment as soon as it has it, so the time is about
    // one transfer of the buffer, not log2(n) of them.
    const std::size_t segments = (bytes + kSegmentBytes - 1) / kSegmentBytes;
    auto range = [&](std::size_t j) {
      return std::pair{bytes * j / segments, bytes * (j + 1) / segments};
    };
    ringRecvs_.assign(segments, nullptr);
    if (vr > 0) {
      for (std::size_t j = 0; j < segments; ++j) {
        const auto [first, last] = range(j);
        ringRecvs_[j] =
            &call.recv(real(vr - 1), static_cast<std::uint32_t>(j), buf + first, last - first);
      }
    }
    for (std::size_t j = 0; j < segments; ++j) {
      if (vr > 0) {
        call.wait(*ringRecvs_[j]);
      }
      if (vr + 1 < n) {
        const auto [first, last] = range(j);
        call.send(real(vr + 1), static_cast<std::uint32_t>(j), buf + first, last - first);
      }
    }
  }
  call.finish();
}

void TcpCommunicator::reduce(const Buffer& buffer, int root, ReduceOp op) {
  const int n = size();
  const int r = rank();
  const std::size_t bytes = buffer.bytes();
  // Only the root's buffer receives the result; the others' stay as they were.
  std::byte* acc = bytePtr(buffer);
  if (r != root) {
    acc = work_.get(bytes);
    std::memcpy(acc, buffer.data, bytes);
  }
  {
    Call call(*this, "reduce");
    if (bytes <= kSmallBytes) {
      // Binomial tree towards the root; all the children's receives are posted at once.
      const int vr = (r - root + n) % n;
      auto real = [&](int v) { return (v + root) % n; };
      std::array<int, 32> children{};
      std::size_t childCount = 0;
      int parent = -1;
      for (int mask = 1; mask < n; mask <<= 1) {
        if ((vr & mask) != 0) {
          parent = real(vr - mask);
          break;
        }
        if (vr + mask < n) {
          children[childCount++] = real(vr + mask);
        }
      }
      std::byte* theirs = scratch_.get(std::max<std::size_t>(childCount, 1) * bytes);
      std::array<Op*, 32> fromChild{};
      for (std::size_t i = 0; i < childCount; ++i) {
        fromChild[i] = &call.recv(children[i], 0, theirs + i * bytes, bytes);
      }
      for (std::size_t i = 0; i < childCount; ++i) {
        call.wait(*fromChild[i]);
        reduceInto(acc, theirs + i * bytes, buffer.count, buffer.dtype, op);
      }
      if (parent >= 0) {
        call.send(parent, 0, acc, bytes);
      }
    } else {
      // Ring reduce-scatter leaves block r fully reduced on rank r; the blocks then go to the
      // root. Bandwidth-optimal: every rank sends about one buffer in all.
      const std::vector<std::size_t>& offsets = balancedOffsets(buffer.count);
      ring(call, acc, offsets, n - 1, 0, -1, buffer.dtype, op);
      const std::size_t esize = elementSize(buffer.dtype);
      auto blockOf = [&](int c) {
        const std::size_t first = offsets[static_cast<std::size_t>(c)];
        return std::pair{first * esize, (offsets[static_cast<std::size_t>(c) + 1] - first) * esize};
      };
      if (r == root) {
        for (int q = 0; q < n; ++q) {
          if (q != root) {
            const auto [offset, length] = blockOf(q);
            call.recv(q, 1U << 31, acc + offset, length);
          }
        }
      } else {
        const auto [offset, length] = blockOf(r);
        call.send(root, 1U << 31, acc + offset, length);
      }
    }
    call.finish();
  }
  if (r == root && op == ReduceOp::kAvg) {
    finishAverage(buffer.data, buffer.count, buffer.dtype, n);
  }
}

// ---- gather, scatter, all_gather, reduce_scatter, all_to_all --------------------------------

void TcpCommunicator::allGather(const Buffer& in, const Buffer& out) {
  const int n = size();
  const std::size_t bytes = in.bytes();
  // Own block first: afterwards `in` is never read, so it may alias any part of `out`.
  copyBytes(bytePtr(out) + static_cast<std::size_t>(rank()) * bytes, in.data, bytes);
  Call call(*this, "all_gather");
  offsets_.resize(static_cast<std::size_t>(n) + 1);
  for (std::size_t c = 0; c <= static_cast<std::size_t>(n); ++c) {
    offsets_[c] = c * in.count;
  }
  ring(call, bytePtr(out), offsets_, 0, n - 1, 0, in.dtype, ReduceOp::kSum);
  call.finish();
}

void TcpCommunicator::gather(const Buffer& in, const Buffer& out, int root) {
  const int n = size();
  const int r = rank();
  const std::size_t bytes = in.bytes();
  if (r == root) {
    copyBytes(bytePtr(out) + static_cast<std::size_t>(r) * bytes, in.data, bytes);
  }
  Call call(*this, "gather");
  if (r == root) {
    for (int q = 0; q < n; ++q) {
      if (q != r) {
        call.recv(q, 0, bytePtr(out) + static_cast<std::size_t>(q) * bytes, bytes);
      }
    }
  } else {
    call.send(root, 0, bytePtr(in), bytes);
  }
  call.finish();
}

void TcpCommunicator::scatter(const Buffer& in, const Buffer& out, int root) {
  const int n = size();
  const int r = rank();
  const std::size_t bytes = out.bytes();
  {
    Call call(*this, "scatter");
    if (r == root) {
      for (int q = 0; q < n; ++q) {
        if (q != r) {
          call.send(q, 0, bytePtr(in) + static_cast<std::size_t>(q) * bytes, bytes);
        }
      }
    } else {
      call.recv(root, 0, bytePtr(out), bytes);
    }
    call.finish();
  }
  // After the sends: `out` may alias another rank's block of `in`.
  if (r == root) {
    copyBytes(out.data, bytePtr(in) + static_cast<std::size_t>(r) * bytes, bytes);
  }
}

void TcpCommunicator::reduceScatter(const Buffer& in, const Buffer& out, ReduceOp op) {
  const int n = size();
  const std::size_t bytes = out.bytes();
  // The ring reduces in place, and the caller's input must stay as it was.
  std::byte* work = work_.get(in.bytes());
  std::memcpy(work, in.data, in.bytes());
  {
    Call call(*this, "reduce_scatter");
    offsets_.resize(static_cast<std::size_t>(n) + 1);
    for (std::size_t c = 0; c <= static_cast<std::size_t>(n); ++c) {
      offsets_[c] = c * out.count;
    }
    ring(call, work, offsets_, n - 1, 0, -1, in.dtype, op);
    call.finish();
  }
  std::memcpy(out.data, work + static_cast<std::size_t>(rank()) * bytes, bytes);
  if (op == ReduceOp::kAvg) {
    finishAverage(out.data, out.count, out.dtype, n);
  }
}

void TcpCommunicator::allToAll(const Buffer& in, const Buffer& out) {
  const int n = size();
  const int r = rank();
  const std::size_t total = in.bytes();
  const std::size_t block = total / static_cast<std::size_t>(n);
  const std::byte* source = bytePtr(in);
  if (overlaps(in.data, total, out.data, total)) {
    std::byte* copy = work_.get(total);
    std::memcpy(copy, in.data, total);
    source = copy;
  }
  copyBytes(bytePtr(out) + static_cast<std::size_t>(r) * block,
            source + static_cast<std::size_t>(r) * block, block);
  Call call(*this, "all_to_all");
  // Pairwise exchange: in step i, send to r + i and receive from r - i. Every message is posted
  // at once; each peer's stream still carries them in step order.
  for (int i = 1; i < n; ++i) {
    const int to = (r + i) % n;
    const int from = (r - i + n) % n;
    call.recv(from, 0, bytePtr(out) + static_cast<std::size_t>(from) * block, block);
    call.send(to, 0, source + static_cast<std::size_t>(to) * block, block);
  }
  call.finish();
}

// ---- groups ---------------------------------------------------------------------------------

std::unique_ptr<Communicator> TcpCommunicator::split(const std::vector<int>& ranks,
                                                     const std::string& groupName) {
  ensureUsable("new_group");
  return std::make_unique<TcpCommunicator>(subGroupConfig(config_, ranks, rank(), groupName));
}

}  // namespace

std::unique_ptr<Communicator> makeTcpCommunicator(const CommunicatorConfig& config) {
  return std::make_unique<TcpCommunicator>(config);
}

}  // namespace dtrun::runtime::detail
