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
// the first failure and every later call fails fast with it. Gloo has no abort: the group then
// records why in the store and closes every pair itself (gloo_group.h), so a peer blocked on
// this rank fails at once and names the first failure, not this rank.
//
// gloo_group.h: the context and the failure model; gloo_work.h: isend/irecv; this file: the
// collectives and point-to-point.
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
#include "gloo_group.h"
#include "gloo_work.h"
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
