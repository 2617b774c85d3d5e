// The Tcp backend's data path: one connected, non-blocking socket per peer, carrying framed
// messages (16-byte header: tag, length) in order. A peer on the same host may have a
// shared-memory link (shm_link.h) instead: the same frames then go through its ring, and the
// socket stays open only for doorbells (wake-ups) and to notice the peer's death (EOF). Sends and
// receives are posted as Ops and matched per peer by tag in posting order (MPI's rule), so
// point-to-point traffic and collectives (which use tags with the top bit set) never mix up.
//
// Progress: whichever thread waits drives the sockets with poll() (the "driver"), so a blocking
// collective costs no thread hand-off. A background thread drives only while isend/irecv work is
// pending and no caller is waiting; a caller that starts to wait takes the driver role over
// (kicking the background thread out of poll through an eventfd).
//
// Thread-safety: every public method is thread-safe (one mutex); the mutex is released only
// around poll(). Ops are owned by the caller (or, for async ops, shared with the transport) and
// must stay valid, with their buffers, until they are done or cancelled.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>

#include "dtrun/common.h"
#include "dtrun/runtime.h"

#include "shm_link.h"

namespace dtrun::runtime::detail::tcp {

using Clock = std::chrono::steady_clock;

// Collective traffic uses tags with this bit set; user tags are 32-bit, so they cannot collide.
inline constexpr std::uint64_t kCollectiveTagBit = std::uint64_t{1} << 63;

enum class OpKind : std::uint8_t { kSend, kRecv };
enum class OpState : std::uint8_t { kIdle, kPosted, kDone, kFailed };

struct FrameHeader {
  std::uint64_t tag = 0;
  std::uint64_t length = 0;
};

// One framed message to send or receive. Fields other than the parameters below are the
// transport's (guarded by its mutex once posted).
struct Op {
  // Parameters, set before post().
  OpKind kind = OpKind::kSend;
  int peer = -1;  // group rank
  std::uint64_t tag = 0;
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  const char* opName = "";  // "all_reduce", "irecv": prefixes error messages
  bool async = false;       // an isend/irecv: the background thread drives it
  // A receive that combines: data[i] = reduceOp(data[i], incoming[i]), element by element as
  // the bytes arrive (straight from a ring or the socket's stage, no scratch copy). Set after
  // reset(), before post().
  bool reduce = false;
  DataType reduceType = DataType::kFloat32;
  ReduceOp reduceOp = ReduceOp::kSum;

  // Progress and outcome.
  OpState state = OpState::kIdle;
  std::size_t moved = 0;  // send: header + payload bytes written; recv: payload bytes read
  bool matched = false;   // recv: its message's header was read (it owns the stream now)
  FrameHeader header{};   // send: the frame header, written from here
  std::string error;      // why it failed (state == kFailed)
  std::array<std::byte, 8> carry{};  // reduce: an element split between two arrivals
  bool remote = false;  // send over shm: the peer reads the payload from `data` (one copy)

  // Resets everything for reuse (keeps the error string's capacity).
  void reset(OpKind k, int p, std::uint64_t t, std::byte* d, std::size_t n, const char* name) {
    kind = k;
    peer = p;
    tag = t;
    data = d;
    bytes = n;
    opName = name;
    async = false;
    reduce = false;
    state = OpState::kIdle;
    moved = 0;
    matched = false;
    remote = false;
    header = {};
    error.clear();
  }
  [[nodiscard]] bool finished() const {
    return state == OpState::kDone || state == OpState::kFailed;
  }
};

enum class WaitResult : std::uint8_t { kFinished, kTimedOut, kPeerCrashed };

class Transport {
 public:
  // fds[r] is the connected socket to group rank r (invalid for this rank); links[r], where set
  // (links may be empty), carries r's data instead of fds[r]. globalRanks name peers in
  // messages. A waiting caller busy-polls for up to `spin` before it sleeps in poll().
  Transport(std::vector<UniqueFd> fds, std::vector<std::unique_ptr<shm::Link>> links,
            std::vector<int> globalRanks, std::chrono::microseconds spin);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  Transport(Transport&&) = delete;
  Transport& operator=(Transport&&) = delete;

  // Starts the background thread (not in the constructor: it must see a complete object).
  void start();
  // Says goodbye to peers (so they know this exit was orderly), fails pending ops, joins the
  // background thread and shuts the sockets down. Idempotent; never blocks on a peer.
  void stop();
  // Tells every peer this rank leaves in order (exit() without stop(): see the registry).
  void sayGoodbye();

  // Posts `op` (may complete it at once). A failed post leaves op.state == kFailed.
  void post(Op& op);
  // Posts an isend/irecv; the transport keeps `op` alive until it finishes.
  void postAsync(const std::shared_ptr<Op>& op);

  // Drives progress until `op` finished or `deadline`. With `abortOnCrash`, also returns
  // kPeerCrashed as soon as any peer died without saying goodbye (a collective cannot finish
  // then); see crashReasons().
  WaitResult wait(Op& op, Clock::time_point deadline, bool abortOnCrash);
  [[nodiscard]] bool isFinished(const Op& op);

  // Withdraws a posted op that did not finish (a blocking call timed out: its buffer is about
  // to go away). A receive that already owns the stream has the rest of its message dropped; a
  // send that is half written cannot be taken back, so that peer's connection is closed.
  void cancel(Op& op);
  // After a collective failed: fails every pending op, tells every peer why (so they fail fast
  // instead of timing out) and closes every connection.
  void abort(const std::string& reason);

  // Every peer that died without a goodbye, first noticed first, after a look (without waiting)
  // at every live connection. Peers that die together are all named, not only the one noticed
  // first: a survivor that closes its connections after its own failure resets ours, and which
  // of the two this rank sees first is chance.
  [[nodiscard]] std::vector<std::string> crashReasons();
  // The group ranks of peers that died without saying why (no abort frame reached this rank:
  // one cannot pass a frame half on the wire, and a closing socket may drop it).
  [[nodiscard]] std::vector<int> crashedWithoutReason();
  // "rank 3" in messages: the job rank of group rank r.
  [[nodiscard]] int globalRank(int r) const { return globalRanks_[static_cast<std::size_t>(r)]; }

 private:
  enum class RxState : std::uint8_t { kHeader, kIntoOp, kIntoChunk, kDiscard, kRemoteAddress };

  // A message that arrived before its receive was posted (or is being dropped).
  struct Chunk {
    std::unique_ptr<std::byte[]> data;
    std::size_t capacity = 0;
    std::size_t size = 0;
    std::uint64_t tag = 0;
  };

  struct Peer {
    UniqueFd fd;
    std::unique_ptr<shm::Link> shm;  // set: data goes through it, fd carries doorbells
    int globalRank = -1;
    bool dead = false;     // no more traffic; ops fail with deadReason
    bool crashed = false;  // dead without an orderly goodbye (aborts collectives)
    bool leaving = false;  // said goodbye: EOF is expected
    bool byeSent = false;
    bool saidWhy = false;  // its abort frame came: deadReason carries its cause
    std::string deadReason;
    std::deque<Op*> sendQueue;
    std::deque<Op*> posted;  // receives, in posting order
    std::deque<Chunk> unexpected;

    // Receive state machine.
    RxState rx = RxState::kHeader;
    FrameHeader header{};
    std::size_t headerGot = 0;
    Op* rxOp = nullptr;
    Chunk rxChunk;
    bool rxChunkDiscard = false;  // the chunk is dropped when complete (size mismatch, abort)
    bool rxAbortFrame = false;    // the chunk carries a peer's abort reason
    std::size_t rxLeft = 0;       // payload bytes still to come
    std::unique_ptr<std::byte[]> stage;  // small reads land here and are parsed from here

    // Remote reads (shm only). Sending: our sends whose address went out, oldest first, and how
    // many of them the peer has read. Receiving: the announced message's length and address.
    std::deque<Op*> awaitingRead;
    std::uint64_t readsCompleted = 0;
    std::size_t remoteLength = 0;
    std::array<std::byte, sizeof(std::uint64_t)> remoteAddress{};
  };

  template <typename Pred>
  bool driveUntil(std::unique_lock<std::mutex>& lock, Pred done, Clock::time_point deadline,
                  bool background);
  void pollOnce(std::unique_lock<std::mutex>& lock, Clock::time_point deadline, bool spin);
  void backgroundLoop();
  void kick();

  void postLocked(Op& op);
  void pumpWrite(Peer& p);
  void pumpRead(Peer& p);
  void pumpWriteShm(Peer& p);
  void pumpReadShm(Peer& p);
  bool drainRing(Peer& p);
  void readRemoteMessage(Peer& p);
  bool readFromPeer(Peer& p, std::uint64_t from, std::byte* to, std::size_t n, std::string& error);
  void completeRemoteReads(Peer& p);
  void ringDoorbell(Peer& p);
  [[nodiscard]] bool shmReady() const;
  void consume(Peer& p, const std::byte* src, std::size_t len);
  void beginMessage(Peer& p);
  void finishMessage(Peer& p);
  void complete(Op& op);
  void fail(Op& op, const std::string& reason);
  void peerFailed(Peer& p, const std::string& reason, bool crashed);
  // The peer's connection reached its end: a peer that said goodbye left, any other crashed.
  void peerClosed(Peer& p);
  void sendControl(Peer& p, std::uint64_t tag, const std::string& payload);
  bool matchUnexpected(Peer& p, Op& op);
  Chunk takeChunk(std::size_t size);
  void returnChunk(Chunk chunk);
  void sweepAsync();
  [[nodiscard]] std::string peerName(const Peer& p) const;

  const std::vector<int> globalRanks_;
  const std::chrono::microseconds spin_;
  std::vector<Peer> peers_;
  UniqueFd wakeFd_;  // eventfd: kicks the driver out of poll()

  std::mutex mutex_;
  std::condition_variable waitersCv_;     // callers waiting for the driver role or their op
  std::condition_variable backgroundCv_;  // the background thread waiting for async work
  bool driving_ = false;                  // a thread is (about to be) in poll()
  bool handoff_ = false;                  // a caller wants the driver role from the background
  bool stopping_ = false;
  int waiters_ = 0;
  bool asyncFinished_ = false;
  std::uint64_t completions_ = 0;
  std::vector<std::string> crashReasons_;  // peers that died without a goodbye, in order
  std::string abortReason_;                // set by abort(): later posts fail with it
  std::vector<std::shared_ptr<Op>> async_;
  std::vector<Chunk> chunkPool_;
  std::vector<pollfd> pollFds_;  // the driver's scratch
  std::vector<int> pollPeers_;
  std::vector<int> shmPeers_;         // the driver's scratch: peers with a link
  std::vector<shm::Link*> shmWatch_;  // their links, read without the mutex while spinning
  std::vector<char> shmWantSpace_;    // whether each has sends waiting for ring space
  // Per link, the peer's count of remote reads that completes none of our sends yet, or
  // kNoReadsAwaited: a change means a send of ours is done.
  std::vector<std::uint64_t> shmReadsSeen_;
  static constexpr std::uint64_t kNoReadsAwaited = ~std::uint64_t{0};
  std::chrono::microseconds spinBudget_;  // the adaptive spin (pollOnce), at most spin_
  unsigned spinProbe_ = 0;                // waits since the budget dropped to zero
  bool tcpPeers_ = false;                 // some peer is on a socket: spin with poll()
  std::thread background_;
};

}  // namespace dtrun::runtime::detail::tcp
