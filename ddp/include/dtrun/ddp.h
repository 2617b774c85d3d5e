// dtrun::ddp: data-parallel training of a libtorch module over libdtrt, the C++ counterpart of
// torch.nn.parallel.DistributedDataParallel and torch.utils.data.DistributedSampler (libtorch
// 1.13 has neither in C++). Not thread-safe: one DistributedDataParallel is driven by the
// training thread; it owns one communication thread of its own.
//
// Usage (every rank runs the same code, launched by dtrun or torchrun):
//
//   auto ctx = dtrun::runtime::init();
//   auto group = dtrun::runtime::ProcessGroup::create(ctx);  // kTcp; kNccl for CUDA models
//   auto model = std::make_shared<Net>();                    // same architecture everywhere
//   dtrun::ddp::DistributedDataParallel ddp(*group, model);  // rank 0's parameters and buffers
//   torch::optim::SGD opt(model->parameters(), 0.1);         //   are now on every rank
//   dtrun::ddp::DistributedSampler sampler(n, ctx.rank, ctx.worldSize, /*seed=*/0);
//   for (int epoch = 0; ...; ++epoch) {
//     sampler.setEpoch(epoch);
//     for (batch of sampler.indices()) {
//       ddp.prepareForward();          // rank 0's buffers (BatchNorm statistics), as DDP does
//       opt.zero_grad();
//       model->forward(x) ... loss.backward();   // buckets are all-reduced while this runs
//       ddp.synchronizeGradients();    // waits for the last bucket: grads are the mean
//       opt.step();
//     }
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "dtrun/runtime.h"

namespace dtrun::ddp {

struct Options {
  // Gradients are packed, in reverse parameter order (roughly the order backward produces
  // them), into flat buckets of about this size; each bucket is one all_reduce. The default is
  // PyTorch DDP's bucket_cap_mb.
  std::size_t bucketBytes = std::size_t{25} << 20;
  // Start a bucket's all_reduce from the autograd hooks as soon as its last gradient arrived,
  // on a communication thread, while backward still runs. false: everything after backward.
  bool overlap = true;
  // Broadcast rank 0's buffers (BatchNorm running statistics) in prepareForward(), as DDP's
  // broadcast_buffers=True does before each forward: one broadcast per dtype, all buffers of
  // that dtype packed together.
  bool broadcastBuffers = true;
};

// Wraps `module` (shared with the caller, who keeps calling its forward()). The constructor is
// collective over `group` (which must outlive this object): every rank constructs it with a
// module of the same architecture; it broadcasts rank 0's parameters and buffers on `group` and
// derives from it (newGroup) the group its communication thread all-reduces on. `group` stays
// the caller's, for the training thread: the broadcasts in the constructor, prepareForward()
// and broadcastState() use it there. All parameters must live on one device: the CPU with a
// kTcp or kGloo group, or one GPU with a kNccl group.
//
// Gradient semantics: after backward() and synchronizeGradients(), each parameter's grad is the
// mean over ranks of the gradient this backward pass produced, which is what DDP gives after
// zero_grad(); gradients accumulated over several backward passes without zero_grad() are not
// supported. A parameter that received no gradient contributes zeros (find_unused_parameters).
// With more than one rank the grads share memory with the buckets (torch's
// gradient_as_bucket_view=True): backward accumulates into the buckets and the means land in
// the grads, with no copy either way; the constructor gives every parameter such a grad (zeros,
// or its current grad's values). Optimizer::zero_grad() keeps them; a grad reset to undefined
// or replaced is copied in once and shares the bucket again after synchronizeGradients().
// Grads take their parameter's layout (channels-last weights get channels-last grads).
//
// On a GPU, construct it and train on one CUDA stream: the gradient hooks run on the stream
// current at construction. A bucket's all_reduce starts once its gradients are computed (a CUDA
// event where built with DTRUN_TORCH_CUDA, else a device-wide synchronize) and runs on libdtrt's
// NCCL stream. That stream is a blocking one, so it overlaps backward only when training runs on
// a non-default stream (a c10::cuda::CUDAStreamGuard around a pool stream, as demos/resnet_ddp
// does); on the legacy default stream it queues behind the work already there. libdtrt returns
// when NCCL has finished, so after synchronizeGradients() every stream sees the means; the
// broadcasts synchronize the device first. Nothing here can be captured in a CUDA graph with
// more than one rank: libdtrt's NCCL calls run on its own stream and are waited for on the host.
class DistributedDataParallel {
 public:
  DistributedDataParallel(runtime::ProcessGroup& group, std::shared_ptr<torch::nn::Module> module,
                          Options options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;
  DistributedDataParallel(DistributedDataParallel&&) = delete;
  DistributedDataParallel& operator=(DistributedDataParallel&&) = delete;

  // Rank 0's buffers to every rank when options.broadcastBuffers and the module is training.
  void prepareForward();
  // Waits until every bucket is all-reduced and writes the means into the parameters' grads.
  // Call once after each backward(). Throws runtime::CommError/TimeoutError from the group.
  void synchronizeGradients();
  // Rank 0's parameters and buffers to every rank (the constructor does this once).
  void broadcastState();

  [[nodiscard]] int rank() const;
  [[nodiscard]] int size() const;
  [[nodiscard]] std::size_t bucketCount() const;
  // Seconds the training thread waited in synchronizeGradients() for communication, in total
  // (the part of the all_reduce that backward did not hide).
  [[nodiscard]] double exposedCommSeconds() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Indices of this rank's shard of a dataset of `datasetSize` samples, as DistributedSampler
// computes them: a permutation seeded by seed + epoch (identical on every rank), padded by
// repeating its head to a multiple of worldSize (or cut, with dropLast), then every
// worldSize-th index starting at rank. Every rank gets the same number of samples, so every
// rank runs the same number of steps (and collectives).
class DistributedSampler {
 public:
  DistributedSampler(std::size_t datasetSize, int rank, int worldSize, std::uint64_t seed = 0,
                     bool shuffle = true, bool dropLast = false);
  void setEpoch(std::int64_t epoch) { epoch_ = epoch; }
  [[nodiscard]] std::vector<std::int64_t> indices() const;
  [[nodiscard]] std::size_t numSamples() const { return numSamples_; }  // per rank

 private:
  std::size_t datasetSize_;
  int rank_;
  int worldSize_;
  std::uint64_t seed_;
  bool shuffle_;
  bool dropLast_;
  std::int64_t epoch_ = 0;
  std::size_t numSamples_;
};

// A libdtrt view of a dense tensor (float32/64, int32/64, uint8, float16, bfloat16; CPU or
// CUDA): its numel() elements in memory order, which is its logical order when it is contiguous
// and, for another dense layout such as channels-last, the same on every rank that shares the
// layout. Throws std::invalid_argument for other dtypes or tensors with gaps or overlaps.
runtime::Buffer bufferOf(const torch::Tensor& tensor);

}  // namespace dtrun::ddp
