// ProcessGroup: argument checks shared by every backend, then dispatch to the Communicator.
#include <algorithm>
#include <cstring>
#include <set>

#include "dtrun/runtime.h"

#include "communicator.h"
#include "progress.h"

namespace dtrun::runtime {
namespace {

void require(bool condition, const std::string& what) {
  if (!condition) {
    throw ConfigError(what);
  }
}

std::string describe(const Buffer& b) {
  return std::to_string(b.count) + " x " + dataTypeName(b.dtype);
}

}  // namespace

ProcessGroup::ProcessGroup(std::unique_ptr<detail::Communicator> communicator, std::string name)
    : communicator_(std::move(communicator)), name_(std::move(name)) {
  detail::markCommunicatorReady();
}

ProcessGroup::~ProcessGroup() = default;

std::unique_ptr<ProcessGroup> ProcessGroup::create(const Context& context, Backend backend,
                                                   const GroupOptions& options) {
  require(context.store != nullptr, "ProcessGroup::create: the context has no store; use init()");
  require(backendAvailable(backend), std::string("the ") + backendName(backend) +
                                         " backend is not built into this libdtrt (no CUDA "
                                         "toolkit or NCCL was found at build time)");
  detail::CommunicatorConfig config;
  config.store = context.store;
  // Every rank creates its world groups in the same order, so the count names them alike.
  config.groupName = std::string("dtrt/") + backendName(backend) + "/world" +
                     std::to_string(context.worldGroupsCreated->fetch_add(1));
  config.rank = context.rank;
  config.size = context.worldSize;
  for (int r = 0; r < context.worldSize; ++r) {
    config.globalRanks.push_back(r);
  }
  config.timeout = options.timeout.count() > 0 ? options.timeout : context.timeout;
  config.cudaDevice = options.cudaDevice >= 0 ? options.cudaDevice : context.localRank;
  switch (backend) {
    case Backend::kTcp:
      return std::unique_ptr<ProcessGroup>(
          new ProcessGroup(detail::makeTcpCommunicator(config), "world"));
    case Backend::kGloo:
      return std::unique_ptr<ProcessGroup>(
          new ProcessGroup(detail::makeGlooCommunicator(config), "world"));
    case Backend::kNccl:
#ifdef DTRUN_HAVE_NCCL
      return std::unique_ptr<ProcessGroup>(
          new ProcessGroup(detail::makeNcclCommunicator(config), "world"));
#else
      break;
#endif
  }
  throw ConfigError("unknown backend");
}

int ProcessGroup::rank() const { return communicator_->rank(); }
int ProcessGroup::size() const { return communicator_->size(); }
Backend ProcessGroup::backend() const { return communicator_->backend(); }

namespace {

void checkBuffer(const Buffer& b, Backend backend, const char* op) {
  require(b.data != nullptr || b.count == 0, std::string(op) + ": buffer data is null");
  const bool wantsCuda = backend == Backend::kNccl;
  require((b.device == Device::kCuda) == wantsCuda, std::string(op) + ": the " +
                                                        backendName(backend) + " backend takes " +
                                                        (wantsCuda ? "CUDA" : "CPU") + " buffers");
}

void checkPeer(int peer, int self, int size, const char* op) {
  require(peer >= 0 && peer < size, std::string(op) + ": rank " + std::to_string(peer) +
                                        " is not in this group of " + std::to_string(size));
  require(peer != self, std::string(op) + ": rank " + std::to_string(peer) + " is this rank");
}

void checkRoot(int root, int size, const char* op) {
  require(root >= 0 && root < size, std::string(op) + ": root " + std::to_string(root) +
                                        " is not in this group of " + std::to_string(size));
}

void checkSameType(const Buffer& a, const Buffer& b, const char* op) {
  require(a.dtype == b.dtype, std::string(op) + ": input is " + dataTypeName(a.dtype) +
                                  " but output is " + dataTypeName(b.dtype));
}

// Whether a collective moves no data between ranks (a group of one, or `count` 0) on a CPU
// backend, which is then answered here, once for tcp and gloo (they never see such a call, see
// communicator.h): the group must still be usable, as for a real call, and the caller copies
// its input to its output with copyLocal. NCCL answers these itself, in order on its stream.
bool answeredLocally(const detail::Communicator& c, const char* op, std::size_t count) {
  if (c.backend() == Backend::kNccl || (c.size() > 1 && count > 0)) {
    return false;
  }
  c.ensureUsable(op);
  return true;
}

// A group of one's result: the input itself (memmove: the two may alias).
void copyLocal(void* to, const void* from, std::size_t bytes) {
  if (bytes > 0 && to != from) {
    std::memmove(to, from, bytes);
  }
}

}  // namespace

void ProcessGroup::barrier() {
  if (answeredLocally(*communicator_, "barrier", 1)) {
    return;
  }
  const detail::OpProgress progress("barrier", name_, 0);
  communicator_->barrier();
}

void ProcessGroup::send(const Buffer& buffer, int dst, int tag) {
  checkBuffer(buffer, backend(), "send");
  checkPeer(dst, rank(), size(), "send");
  const detail::OpProgress progress("send", name_, buffer.bytes());
  communicator_->send(buffer, dst, tag);
}

void ProcessGroup::recv(const Buffer& buffer, int src, int tag) {
  checkBuffer(buffer, backend(), "recv");
  checkPeer(src, rank(), size(), "recv");
  const detail::OpProgress progress("recv", name_, buffer.bytes());
  communicator_->recv(buffer, src, tag);
}

Work ProcessGroup::isend(const Buffer& buffer, int dst, int tag) {
  checkBuffer(buffer, backend(), "isend");
  checkPeer(dst, rank(), size(), "isend");
  return Work(communicator_->isend(buffer, dst, tag));
}

Work ProcessGroup::irecv(const Buffer& buffer, int src, int tag) {
  checkBuffer(buffer, backend(), "irecv");
  checkPeer(src, rank(), size(), "irecv");
  return Work(communicator_->irecv(buffer, src, tag));
}

void ProcessGroup::broadcast(const Buffer& buffer, int root) {
  checkBuffer(buffer, backend(), "broadcast");
  checkRoot(root, size(), "broadcast");
  if (answeredLocally(*communicator_, "broadcast", buffer.count)) {
    return;
  }
  const detail::OpProgress progress("broadcast", name_, buffer.bytes());
  communicator_->broadcast(buffer, root);
}

void ProcessGroup::reduce(const Buffer& buffer, int root, ReduceOp op) {
  checkBuffer(buffer, backend(), "reduce");
  checkRoot(root, size(), "reduce");
  if (answeredLocally(*communicator_, "reduce", buffer.count)) {
    return;
  }
  const detail::OpProgress progress("reduce", name_, buffer.bytes());
  communicator_->reduce(buffer, root, op);
}

void ProcessGroup::allReduce(const Buffer& buffer, ReduceOp op) {
  checkBuffer(buffer, backend(), "all_reduce");
  if (answeredLocally(*communicator_, "all_reduce", buffer.count)) {
    return;
  }
  const detail::OpProgress progress("all_reduce", name_, buffer.bytes());
  communicator_->allReduce(buffer, op);
}

void ProcessGroup::allGather(const Buffer& in, const Buffer& out) {
  checkBuffer(in, backend(), "all_gather");
  checkBuffer(out, backend(), "all_gather");
  checkSameType(in, out, "all_gather");
  require(out.count == in.count * static_cast<std::size_t>(size()),
          "all_gather: output holds " + describe(out) + ", expected size() x input = " +
              std::to_string(in.count * static_cast<std::size_t>(size())));
  if (answeredLocally(*communicator_, "all_gather", in.count)) {
    copyLocal(out.data, in.data, in.bytes());
    return;
  }
  const detail::OpProgress progress("all_gather", name_, in.bytes());
  communicator_->allGather(in, out);
}

void ProcessGroup::gather(const Buffer& in, const Buffer& out, int root) {
  checkBuffer(in, backend(), "gather");
  checkRoot(root, size(), "gather");
  if (rank() == root) {
    checkBuffer(out, backend(), "gather");
    checkSameType(in, out, "gather");
    require(out.count == in.count * static_cast<std::size_t>(size()),
            "gather: the root's output holds " + describe(out) + ", expected size() x input");
  }
  if (answeredLocally(*communicator_, "gather", in.count)) {
    copyLocal(out.data, in.data, in.bytes());
    return;
  }
  const detail::OpProgress progress("gather", name_, in.bytes());
  communicator_->gather(in, out, root);
}

void ProcessGroup::scatter(const Buffer& in, const Buffer& out, int root) {
  checkBuffer(out, backend(), "scatter");
  checkRoot(root, size(), "scatter");
  if (rank() == root) {
    checkBuffer(in, backend(), "scatter");
    checkSameType(in, out, "scatter");
    require(in.count == out.count * static_cast<std::size_t>(size()),
            "scatter: the root's input holds " + describe(in) + ", expected size() x output");
  }
  if (answeredLocally(*communicator_, "scatter", out.count)) {
    copyLocal(out.data, in.data, out.bytes());
    return;
  }
  const detail::OpProgress progress("scatter", name_, out.bytes());
  communicator_->scatter(in, out, root);
}

void ProcessGroup::reduceScatter(const Buffer& in, const Buffer& out, ReduceOp op) {
  checkBuffer(in, backend(), "reduce_scatter");
  checkBuffer(out, backend(), "reduce_scatter");
  checkSameType(in, out, "reduce_scatter");
  require(in.count == out.count * static_cast<std::size_t>(size()),
          "reduce_scatter: input holds " + describe(in) + ", expected size() x output");
  if (answeredLocally(*communicator_, "reduce_scatter", out.count)) {
    copyLocal(out.data, in.data, out.bytes());
    return;
  }
  const detail::OpProgress progress("reduce_scatter", name_, in.bytes());
  communicator_->reduceScatter(in, out, op);
}

void ProcessGroup::allToAll(const Buffer& in, const Buffer& out) {
  checkBuffer(in, backend(), "all_to_all");
  checkBuffer(out, backend(), "all_to_all");
  checkSameType(in, out, "all_to_all");
  require(in.count == out.count && in.count % static_cast<std::size_t>(size()) == 0,
          "all_to_all: input and output must hold the same count, a multiple of size()");
  if (answeredLocally(*communicator_, "all_to_all", in.count)) {
    copyLocal(out.data, in.data, in.bytes());
    return;
  }
  const detail::OpProgress progress("all_to_all", name_, in.bytes());
  communicator_->allToAll(in, out);
}

std::unique_ptr<ProcessGroup> ProcessGroup::newGroup(const std::vector<int>& ranks) {
  const std::set<int> unique(ranks.begin(), ranks.end());
  require(!ranks.empty() && unique.size() == ranks.size(),
          "new_group: ranks must be a non-empty list without duplicates");
  for (const int r : ranks) {
    require(r >= 0 && r < size(), "new_group: rank " + std::to_string(r) +
                                      " is not in this group of " + std::to_string(size()));
  }
  // Every rank counts every new_group call, members or not, so names agree across ranks.
  const std::string name = "sub" + std::to_string(groupsCreated_++);
  if (unique.count(rank()) == 0) {
    return nullptr;
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(communicator_->split(ranks, name), name));
}

}  // namespace dtrun::runtime
