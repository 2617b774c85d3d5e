// The Gloo backend: every collective runs one of Gloo's own algorithms (ring allreduce and reduce,
// binomial broadcast, ring allgather, ...), so it serves as an independent oracle for the Tcp
// backend. Gloo reduces f32/f64/i32/i64/u8 with its own functions. f16 and bf16 go through
// reduce.h: this Gloo has no bfloat16, and its gloo::float16 cannot be used either, because its
// operator= skips the store when the target's bits equal half(float(rhs.x)) (operator!= compares
// with the raw bits read as an integer), so results depend on what the output held before.
// kAvg is a sum followed by reduce.h's finishAverage.
//
// Failure model (Gloo's): after a gloo::IoException (a peer closed its connection, or a wait
// timed out, which makes Gloo close every pair) the context is unusable, so the group remembers
// the first failure and every later call fails fast with it.
#include <algorithm>
#include <bit>
#include <cctype>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/scatter.h>
#include <gloo/transport/unbound_buffer.h>

#include "communicator.h"
#include "gloo_device.h"
#include "gloo_store_adapter.h"
#include "reduce.h"

namespace dtrun::runtime::detail {
namespace {

using ReduceFunction = std::function<void(void*, const void*, const void*, std::size_t)>;
using RawReduceFunction = void (*)(void*, const void*, const void*, std::size_t);

// Point-to-point slots: Gloo's collectives use slots >= 2^56 (an 8-bit prefix per collective), so
// user tags placed at 2^40 + tag never meet them.
constexpr std::uint64_t kP2pSlotBase = std::uint64_t{1} << 40U;

std::uint64_t p2pSlot(int tag) { return kP2pSlotBase + static_cast<std::uint32_t>(tag); }

// Gloo's math.h overloads each function (2 and 4 arguments), hence the casts.
template <typename T>
ReduceFunction glooReduceFunction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<RawReduceFunction>(&gloo::sum<T>);
    case ReduceOp::kProd:
      return static_cast<RawReduceFunction>(&gloo::product<T>);
    case ReduceOp::kMin:
      return static_cast<RawReduceFunction>(&gloo::min<T>);
    case ReduceOp::kMax:
      return static_cast<RawReduceFunction>(&gloo::max<T>);
  }
  throw ConfigError("gloo: unknown reduce op");
}

// Gloo calls f(out, a, b, n) meaning out = a op b, where out is usually a but need not be.
ReduceFunction ownReduceFunction(DataType type, ReduceOp op) {
  return [type, op](void* out, const void* a, const void* b, std::size_t n) {
    if (out == a) {
      reduceInto(out, b, n, type, op);
    } else if (out == b) {
      reduceInto(out, a, n, type, op);  // every ReduceOp is commutative
    } else {
      std::memmove(out, a, n * elementSize(type));
      reduceInto(out, b, n, type, op);
    }
  };
}

// Calls fn(T{}) with the element type Gloo's templates are instantiated for; f16 and bf16 travel
// as their 16-bit storage and are reduced by ownReduceFunction.
template <typename Fn>
void withGlooType(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::kFloat32:
      return fn(float{});
    case DataType::kFloat64:
      return fn(double{});
    case DataType::kInt32:
      return fn(std::int32_t{});
    case DataType::kInt64:
      return fn(std::int64_t{});
    case DataType::kUInt8:
      return fn(std::uint8_t{});
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return fn(std::uint16_t{});
  }
  throw ConfigError("gloo: unknown data type");
}

ReduceFunction reduceFunction(DataType type, ReduceOp op) {
  if (type == DataType::kFloat16 || type == DataType::kBFloat16) {
    return ownReduceFunction(type, op);
  }
  ReduceFunction result;
  withGlooType(type, [&](auto tag) { result = glooReduceFunction<decltype(tag)>(op); });
  return result;
}

std::uint8_t* bytesOf(const Buffer& buffer) { return static_cast<std::uint8_t*>(buffer.data); }

// Scratch memory that is written before it is read, so it is not zeroed.
std::unique_ptr<std::uint8_t[]> scratch(std::size_t bytes) {
  return std::make_unique_for_overwrite<std::uint8_t[]>(bytes);
}

bool mentionsTimeout(const std::string& message) {
  return message.find("Timed out") != std::string::npos ||
         message.find("timeout") != std::string::npos ||
         message.find("timed out") != std::string::npos;
}

// What a communicator and its pending isend/irecv works share: the Gloo context, and turning
// Gloo's exceptions into ours with the operation and the peer named.
class GlooGroup {
 public:
  GlooGroup(CommunicatorConfig config, std::shared_ptr<gloo::transport::Device> device)
      : config_(std::move(config)), device_(std::move(device)) {}

  // connectFullMesh through the store; throws TimeoutError naming a rank that never arrived.
  void connect(const std::string& op) {
    auto context = std::make_shared<gloo::rendezvous::Context>(config_.rank, config_.size);
    context->setTimeout(config_.timeout);
    GlooStoreAdapter store(config_.store, config_.groupName, config_.globalRanks, config_.timeout);
    auto device = device_;  // connectFullMesh takes a non-const reference
    try {
      context->connectFullMesh(store, device);
    } catch (const gloo::IoException& e) {
      if (const auto storeError = store.takeError(); storeError != nullptr) {
        rethrowWithContext(op, storeError);
      }
      raise(op, otherRanks(), e.what(), config_.timeout);
    } catch (const gloo::Exception& e) {
      raise(op, otherRanks(), e.what(), config_.timeout);
    } catch (const gloo::EnforceNotMet& e) {
      raise(op, otherRanks(), e.what(), config_.timeout);
    }
    learnPeerAddresses(*context, op);
    context_ = std::move(context);
  }

  [[nodiscard]] const CommunicatorConfig& config() const { return config_; }
  [[nodiscard]] const std::shared_ptr<gloo::transport::Device>& device() const { return device_; }
  [[nodiscard]] const std::shared_ptr<gloo::Context>& context() const { return context_; }

  // Runs fn (Gloo calls), translating Gloo's exceptions. `peers`: the ranks fn talks to, for the
  // message when Gloo's text does not name one; `timeout`: the limit fn waits with (0: the
  // group's).
  template <typename Fn>
  void run(const std::string& op, const std::vector<int>& peers, Fn&& fn,
           std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
    failIfBroken(op);
    try {
      std::forward<Fn>(fn)();
    } catch (const gloo::IoException& e) {
      raise(op, peers, e.what(), timeout);
    } catch (const gloo::Exception& e) {
      raise(op, peers, e.what(), timeout);
    } catch (const gloo::EnforceNotMet& e) {
      raise(op, peers, e.what(), timeout);
    }
  }

  [[nodiscard]] std::vector<int> otherRanks() const {
    std::vector<int> ranks;
    for (int r = 0; r < config_.size; ++r) {
      if (r != config_.rank) {
        ranks.push_back(r);
      }
    }
    return ranks;
  }

  // Throws CommError when an earlier failure (of this thread's call or a work's) broke the group.
  void failIfBroken(const std::string& op) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!brokenBy_.empty()) {
      throw CommError(op + ": the gloo group '" + config_.groupName +
                      "' is unusable after an earlier failure (" + brokenBy_ + ")");
    }
  }

  [[nodiscard]] std::string describeRank(int rank) const {
    std::string text = "rank " + std::to_string(rank);
    const auto index = static_cast<std::size_t>(rank);
    if (index < config_.globalRanks.size() && config_.globalRanks[index] != rank) {
      text += " (job rank " + std::to_string(config_.globalRanks[index]) + ")";
    }
    return text;
  }

  // Ring algorithms talk to the neighbours only (and `extra`, e.g. a root that gathers).
  [[nodiscard]] std::vector<int> ringNeighbours(int extra = -1) const {
    const int n = config_.size;
    std::vector<int> ranks{(config_.rank + n - 1) % n, (config_.rank + 1) % n};
    if (extra >= 0 && extra != config_.rank) {
      ranks.push_back(extra);
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    return ranks;
  }

  // Gloo's broadcast is a binomial tree over ranks renumbered so the root is 0: a non-root
  // receives from the virtual rank with its highest set bit cleared.
  [[nodiscard]] int broadcastParent(int root) const {
    const auto size = static_cast<unsigned>(config_.size);
    const auto virtualRank =
        (static_cast<unsigned>(config_.rank) + size - static_cast<unsigned>(root)) % size;
    const unsigned parent = virtualRank & ~std::bit_floor(virtualRank);
    return static_cast<int>((parent + static_cast<unsigned>(root)) % size);
  }

 private:
  [[nodiscard]] std::string describePeers(const std::vector<int>& peers) const {
    if (peers.size() == 1) {
      return describeRank(peers.front());
    }
    return "one of " + rankList(peers);  // "one of ranks 0, 2"
  }

  // Gloo names a peer by "[ip]:port", never by rank; map it back where it is one we know.
  [[nodiscard]] std::string peerNamedIn(const std::string& glooMessage) const {
    for (const auto& [address, rank] : peerAddresses_) {
      for (auto at = glooMessage.find(address); at != std::string::npos;
           at = glooMessage.find(address, at + 1)) {
        const auto after = at + address.size();  // ":1259" must not match ":12590"
        if (after == glooMessage.size() || std::isdigit(glooMessage[after]) == 0) {
          return describeRank(rank);
        }
      }
    }
    return {};
  }

  [[noreturn]] void raise(const std::string& op, const std::vector<int>& peers,
                          const std::string& glooMessage, std::chrono::milliseconds timeout) {
    std::string who = peerNamedIn(glooMessage);
    if (who.empty()) {
      who = describePeers(peers);
    }
    const bool timedOut = mentionsTimeout(glooMessage);
    const auto limit = timeout.count() > 0 ? timeout : config_.timeout;
    const std::string what = timedOut ? op + ": timed out after " + std::to_string(limit.count()) +
                                            " ms waiting for " + who
                                      : op + ": connection to " + who + " failed";
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (brokenBy_.empty()) {
        brokenBy_ = what;
      }
    }
    const std::string where = " [gloo group '" + config_.groupName + "' of " +
                              std::to_string(config_.size) + ", this is rank " +
                              std::to_string(config_.rank) + "; gloo: " + glooMessage + "]";
    if (timedOut) {
      throw TimeoutError(what + where);
    }
    throw CommError(what + where);
  }

  // Gloo's errors name a peer by the remote "[ip]:port" of that pair's connection, which is
  // usually the address the peer listens on for this rank (Pair::address()). Only the peer knows
  // it, so every rank publishes its list. (Sometimes Gloo names an address no rank published;
  // messages then list the ranks the operation talks to.)
  void learnPeerAddresses(gloo::Context& context, const std::string& op) {
    std::string mine;
    for (int r = 0; r < config_.size; ++r) {
      if (r != config_.rank) {
        mine += context.getPair(r)->address().str();
      }
      mine += '\n';
    }
    const std::string prefix = config_.groupName + "/gloo/peer_addresses/";
    try {
      config_.store->set(prefix + std::to_string(config_.rank), mine);
      for (const int peer : otherRanks()) {
        const std::string key = prefix + std::to_string(peer);
        config_.store->wait({key}, config_.timeout, describeRank(peer) + " to finish joining");
        std::istringstream theirs(config_.store->get(key));
        std::string address;  // line `config_.rank` of theirs: its address for this rank
        for (int r = 0; r <= config_.rank; ++r) {
          if (!std::getline(theirs, address)) {
            address.clear();
            break;
          }
        }
        if (!address.empty()) {
          peerAddresses_.emplace(address, peer);
        }
      }
    } catch (const TimeoutError& e) {
      throw TimeoutError(op + ": " + e.what());
    } catch (const Error& e) {
      throw CommError(op + ": " + e.what());
    }
  }

  [[noreturn]] void rethrowWithContext(const std::string& op, const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const TimeoutError& e) {
      throw TimeoutError(op + ": " + e.what());
    } catch (const std::exception& e) {
      throw CommError(op + ": " + e.what());
    }
  }

  const CommunicatorConfig config_;
  const std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::map<std::string, int> peerAddresses_;
  mutable std::mutex mutex_;  // works may fail on other threads than the group's
  std::string brokenBy_;      // guarded by mutex_: the first failure, empty while healthy
};

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

  void wait(std::chrono::milliseconds timeout) override {
    const auto limit = timeout.count() > 0 ? timeout : pending_->group->config().timeout;
    std::unique_lock<std::mutex> lock(pending_->mutex);
    if (pending_->phase == Phase::kPosted) {
      pending_->phase = Phase::kWaiting;
      lock.unlock();
      pending_->complete(limit);
      lock.lock();
    } else if (!pending_->changed.wait_for(lock, limit,
                                           [&] { return pending_->phase == Phase::kFinished; })) {
      // The Gloo wait goes on in the watcher thread, up to the group's timeout.
      throw TimeoutError(pending_->op + ": timed out after " + std::to_string(limit.count()) +
                         " ms waiting for " + pending_->group->describeRank(pending_->peer));
    }
    if (pending_->error != nullptr) {
      std::rethrow_exception(pending_->error);
    }
  }

  [[nodiscard]] bool isCompleted() const override {
    const std::lock_guard<std::mutex> lock(pending_->mutex);
    if (pending_->phase == Phase::kPosted) {
      // Detached: the thread owns what it uses, so dropping an unfinished Work does not block;
      // Gloo's own timeout bounds the thread's life. It sets kFinished only after this returns
      // the lock.
      std::thread watcher(
          [pending = pending_] { pending->complete(pending->group->config().timeout); });
      pending_->phase = Phase::kWaiting;
      watcher.detach();
    }
    return pending_->phase == Phase::kFinished;
  }

 private:
  enum class Phase : std::uint8_t { kPosted, kWaiting, kFinished };

  struct Pending {
    Pending(std::shared_ptr<GlooGroup> g, std::unique_ptr<gloo::transport::UnboundBuffer> b, bool s,
            int p, std::string o)
        : group(std::move(g)), buffer(std::move(b)), isSend(s), peer(p), op(std::move(o)) {}

    // Blocks in Gloo until the operation finished; exactly one thread calls this.
    void complete(std::chrono::milliseconds limit) {
      std::exception_ptr failure;
      try {
        group->run(
            op, {peer},
            [&] {
              const bool completed = isSend ? buffer->waitSend(limit) : buffer->waitRecv(limit);
              if (!completed) {
                throw gloo::IoException("the operation was aborted");
              }
            },
            limit);
      } catch (...) {
        failure = std::current_exception();
      }
      {
        const std::lock_guard<std::mutex> lock(mutex);
        phase = Phase::kFinished;
        error = failure;
      }
      changed.notify_all();
    }

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

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const CommunicatorConfig& config,
                   std::shared_ptr<gloo::transport::Device> device, const std::string& op)
      : group_(std::make_shared<GlooGroup>(config, std::move(device))) {
    group_->connect(op);
  }

  [[nodiscard]] int rank() const override { return config().rank; }
  [[nodiscard]] int size() const override { return config().size; }
  [[nodiscard]] Backend backend() const override { return Backend::kGloo; }
  [[nodiscard]] std::chrono::milliseconds timeout() const override { return config().timeout; }

  void ensureUsable(const char* op) const override { group_->failIfBroken(op); }

  void barrier() override {
    group_->run("barrier", group_->otherRanks(), [&] {
      gloo::BarrierOptions options(context());
      options.setTag(nextTag());
      options.setTimeout(timeout());
      gloo::barrier(options);
    });
  }

  void send(const Buffer& buffer, int dst, int tag) override {
    const std::string op =
        "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
    auto work = post(buffer, dst, tag, true, op);
    work->wait(timeout());
  }

  void recv(const Buffer& buffer, int src, int tag) override {
    const std::string op =
        "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")";
    auto work = post(buffer, src, tag, false, op);
    work->wait(timeout());
  }

  std::shared_ptr<WorkState> isend(const Buffer& buffer, int dst, int tag) override {
    return post(buffer, dst, tag, true,
                "isend to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")");
  }

  std::shared_ptr<WorkState> irecv(const Buffer& buffer, int src, int tag) override {
    return post(buffer, src, tag, false,
                "irecv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")");
  }

  void broadcast(const Buffer& buffer, int root) override {
    const std::vector<int> peers =
        rank() == root ? group_->otherRanks() : std::vector<int>{group_->broadcastParent(root)};
    group_->run("broadcast", peers, [&] {
      gloo::BroadcastOptions options(context());
      options.setOutput(bytesOf(buffer), buffer.bytes());
      options.setRoot(root);
      options.setTag(nextTag());
      options.setTimeout(timeout());
      gloo::broadcast(options);
    });
  }

  void reduce(const Buffer& buffer, int root, ReduceOp op) override {
    // Non-roots reduce into scratch so their buffer keeps its contents, as with NCCL and MPI.
    std::unique_ptr<std::uint8_t[]> partial;
    if (rank() != root) {
      partial = scratch(buffer.bytes());
    }
    const std::vector<int> peers =
        rank() == root ? group_->otherRanks() : group_->ringNeighbours(root);
    group_->run("reduce", peers, [&] {
      withGlooType(buffer.dtype, [&](auto tag) {
        using T = decltype(tag);
        gloo::ReduceOptions options(context());
        if (partial != nullptr) {
          options.setInput(static_cast<T*>(buffer.data), buffer.count);
          options.setOutput(static_cast<T*>(static_cast<void*>(partial.get())), buffer.count);
        } else {
          options.setOutput(static_cast<T*>(buffer.data), buffer.count);
        }
        options.setRoot(root);
        options.setReduceFunction(reduceFunction(buffer.dtype, op));
        options.setTag(nextTag());
        options.setTimeout(timeout());
        gloo::reduce(options);
      });
    });
    if (op == ReduceOp::kAvg && rank() == root) {
      finishAverage(buffer.data, buffer.count, buffer.dtype, size());
    }
  }

  void allReduce(const Buffer& buffer, ReduceOp op) override {
    group_->run("all_reduce", group_->ringNeighbours(), [&] {
      withGlooType(buffer.dtype, [&](auto tag) {
        using T = decltype(tag);
        gloo::AllreduceOptions options(context());
        options.setOutput(static_cast<T*>(buffer.data), buffer.count);
        options.setReduceFunction(reduceFunction(buffer.dtype, op));
        options.setTag(nextTag());
        options.setTimeout(timeout());
        gloo::allreduce(options);
      });
    });
    if (op == ReduceOp::kAvg) {
      finishAverage(buffer.data, buffer.count, buffer.dtype, size());
    }
  }

  void allGather(const Buffer& in, const Buffer& out) override {
    const std::size_t block = in.bytes();
    std::uint8_t* own = bytesOf(out) + static_cast<std::size_t>(rank()) * block;
    // In place when the input already is this rank's block; any other overlap needs a copy.
    const bool inPlace = in.data == own;
    std::unique_ptr<std::uint8_t[]> copy;
    const void* input = in.data;
    if (!inPlace && overlaps(in.data, block, out.data, out.bytes())) {
      copy = scratch(block);
      std::memcpy(copy.get(), in.data, block);
      input = copy.get();
    }
    group_->run("all_gather", group_->ringNeighbours(), [&] {
      gloo::AllgatherOptions options(context());
      if (!inPlace) {
        options.setInput(const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(input)), block);
      }
      options.setOutput(bytesOf(out), out.bytes());
      options.setTag(nextTag());
      options.setTimeout(timeout());
      gloo::allgather(options);
    });
  }

  void gather(const Buffer& in, const Buffer& out, int root) override {
    const std::size_t block = in.bytes();
    const bool isRoot = rank() == root;
    std::unique_ptr<std::uint8_t[]> copy;
    const void* input = in.data;
    if (isRoot && overlaps(in.data, block, out.data, out.bytes())) {
      copy = scratch(block);
      std::memcpy(copy.get(), in.data, block);
      input = copy.get();
    }
    const std::vector<int> peers = isRoot ? group_->otherRanks() : std::vector<int>{root};
    group_->run("gather", peers, [&] {
      gloo::GatherOptions options(context());
      options.setInput(const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(input)), block);
      if (isRoot) {
        options.setOutput(bytesOf(out), out.bytes());
      }
      options.setRoot(root);
      options.setTag(nextTag());
      options.setTimeout(timeout());
      gloo::gather(options);
    });
  }

  void scatter(const Buffer& in, const Buffer& out, int root) override {
    const std::size_t block = out.bytes();
    const bool isRoot = rank() == root;
    // The root must not overwrite blocks it still has to send: receive into scratch then.
    std::unique_ptr<std::uint8_t[]> landing;
    std::uint8_t* output = bytesOf(out);
    if (isRoot && overlaps(in.data, in.bytes(), out.data, block)) {
      landing = scratch(block);
      output = landing.get();
    }
    const std::vector<int> peers = isRoot ? group_->otherRanks() : std::vector<int>{root};
    group_->run("scatter", peers, [&] {
      gloo::ScatterOptions options(context());
      if (isRoot) {
        std::vector<std::uint8_t*> blocks;
        blocks.reserve(static_cast<std::size_t>(size()));
        for (int r = 0; r < size(); ++r) {
          blocks.push_back(bytesOf(in) + static_cast<std::size_t>(r) * block);
        }
        options.setInputs(blocks, block);
      }
      options.setOutput(output, block);
      options.setRoot(root);
      options.setTag(nextTag());
      options.setTimeout(timeout());
      gloo::scatter(options);
    });
    if (landing != nullptr) {
      std::memcpy(out.data, landing.get(), block);
    }
  }

  void reduceScatter(const Buffer& in, const Buffer& out, ReduceOp op) override {
    const std::size_t own = static_cast<std::size_t>(rank()) * out.bytes();
    // This Gloo has no new-style reduce_scatter; like torch's ProcessGroupGloo, allreduce the
    // whole input (into scratch: the input is read-only) and keep this rank's block.
    auto reduced = scratch(in.bytes());
    group_->run("reduce_scatter", group_->ringNeighbours(), [&] {
      withGlooType(in.dtype, [&](auto tag) {
        using T = decltype(tag);
        gloo::AllreduceOptions options(context());
        options.setInput(static_cast<T*>(in.data), in.count);
        options.setOutput(static_cast<T*>(static_cast<void*>(reduced.get())), in.count);
        options.setReduceFunction(reduceFunction(in.dtype, op));
        options.setTag(nextTag());
        options.setTimeout(timeout());
        gloo::allreduce(options);
      });
    });
    std::memcpy(out.data, reduced.get() + own, out.bytes());
    if (op == ReduceOp::kAvg) {
      finishAverage(out.data, out.count, out.dtype, size());
    }
  }

  void allToAll(const Buffer& in, const Buffer& out) override {
    std::unique_ptr<std::uint8_t[]> copy;
    const void* input = in.data;
    if (overlaps(in.data, in.bytes(), out.data, out.bytes())) {
      copy = scratch(in.bytes());
      std::memcpy(copy.get(), in.data, in.bytes());
      input = copy.get();
    }
    group_->run("all_to_all", group_->otherRanks(), [&] {
      gloo::AlltoallOptions options(context());
      options.setInput(const_cast<std::uint8_t*>(static_cast<const std::uint8_t*>(input)),
                       in.bytes());
      options.setOutput(bytesOf(out), out.bytes());
      options.setTag(nextTag());
      options.setTimeout(timeout());
      gloo::alltoall(options);
    });
  }

  std::unique_ptr<Communicator> split(const std::vector<int>& ranks,
                                      const std::string& groupName) override {
    const CommunicatorConfig child = subGroupConfig(config(), ranks, rank(), groupName);
    // The device (one listening thread) is shared; the new context gets its own full mesh.
    return std::make_unique<GlooCommunicator>(child, group_->device(), "new_group");
  }

 private:
  [[nodiscard]] const CommunicatorConfig& config() const { return group_->config(); }
  [[nodiscard]] const std::shared_ptr<gloo::Context>& context() const { return group_->context(); }

  // Every member runs the group's collectives in the same order, so counting them gives matching
  // tags; distinct tags keep a rank that ran ahead from mixing two collectives' messages.
  std::uint32_t nextTag() { return collectiveTag_++; }

  std::shared_ptr<GlooWork> post(const Buffer& buffer, int peer, int tag, bool isSend,
                                 const std::string& op) {
    std::shared_ptr<GlooWork> work;
    group_->run(op, {peer}, [&] {
      auto unbound = context()->createUnboundBuffer(buffer.data, buffer.bytes());
      if (isSend) {
        unbound->send(peer, p2pSlot(tag));
      } else {
        unbound->recv(peer, p2pSlot(tag));
      }
      work = std::make_shared<GlooWork>(group_, std::move(unbound), isSend, peer, op);
    });
    return work;
  }

  std::shared_ptr<GlooGroup> group_;
  std::uint32_t collectiveTag_ = 0;
};

// Gloo writes with writev(2), which raises SIGPIPE once a peer has died. Python ignores SIGPIPE
// (so torch's Gloo never sees it); a C++ worker would be killed by it instead of getting the
// CommError that names the dead peer. A handler the program installed itself is kept.
void ignoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    static_cast<void>(::signal(SIGPIPE, SIG_IGN));
  }
}

}  // namespace

std::unique_ptr<Communicator> makeGlooCommunicator(const CommunicatorConfig& config) {
  ignoreSigpipeUnlessHandled();
  return std::make_unique<GlooCommunicator>(config, makeGlooDevice(), "ProcessGroup::create");
}

}  // namespace dtrun::runtime::detail
