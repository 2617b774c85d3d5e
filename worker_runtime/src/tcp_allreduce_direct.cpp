// all_reduce through one group-wide shared-memory segment (every rank on one host; see below).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <span>

#include <unistd.h>

#include "log.h"
#include "reduce.h"
#include "shm_setup.h"
#include "tcp_call.h"
#include "tcp_communicator.h"

namespace dtrun::runtime::detail::tcp {
namespace {

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

}  // namespace

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

std::size_t TcpCommunicator::directSlotBytes() { return shm::slotBytes(kDirectSlotBytes); }

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
}  // namespace dtrun::runtime::detail::tcp
