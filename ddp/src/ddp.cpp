// DistributedDataParallel and DistributedSampler (see dtrun/ddp.h).
//
// Gradients as bucket views: every parameter's grad is a view of its slot in a flat bucket
// (torch's gradient_as_bucket_view), so backward accumulates straight into the buckets, the
// all_reduce (ReduceOp::kAvg) averages them in place, and the optimizer reads the means there:
// no copy into the buckets, no copy back. zero_grad() zeroes the views in place; a grad that
// was reset to undefined (or replaced) is copied into its slot once and the view put back.
//
// Overlap: every trainable parameter's grad accumulator (the autograd node that writes .grad)
// gets a post hook, which runs on the engine's thread once this backward's gradient is in the
// slot. When a bucket's last slot is filled, the bucket (and any later ones already complete)
// is queued for the communication thread, which all-reduces it on a group of its own while
// backward goes on computing earlier layers. Buckets are queued strictly in index order, so
// every rank issues the same sequence of collectives whatever order its hooks fire in.
// synchronizeGradients() fills the slots of parameters that got no gradient, queues the rest
// and waits.
//
// On a GPU the hooks run when backward has queued a gradient, not when the GPU has computed it.
// Built with DTRUN_TORCH_CUDA (scripts/gpu/build_resnet_ddp.sh, where torch has CUDA), a bucket
// records a CUDA event on the stream backward runs on when it fills, and the communication
// thread waits for that event alone before libdtrt's all_reduce reads the bucket. Without it
// (Debian's CPU-only libtorch), the thread waits for the whole device. libdtrt's allReduce
// returns when its NCCL stream has finished, so the means are in place for every stream when
// synchronizeGradients() returns.
#include "dtrun/ddp.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <c10/util/strides.h>

#ifdef DTRUN_TORCH_CUDA
#include <cuda_runtime_api.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrun::ddp {

namespace rt = dtrun::runtime;

namespace {

// Waits for everything queued on `device` (a no-op on the CPU): libdtrt's NCCL calls read
// memory from their own stream, which is ordered after the legacy default stream's work but
// not after that of the non-blocking stream a program may train on.
void syncDevice(const torch::Device& device) {
  if (device.is_cuda()) {
    torch::cuda::synchronize(device.index());
  }
}

#ifdef DTRUN_TORCH_CUDA
void checkCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    // A failed call leaves CUDA's last-error slot set; later calls need it clear.
    static_cast<void>(cudaGetLastError());
    throw std::runtime_error(std::string("dtrun::ddp: ") + what + ": " +
                             cudaGetErrorString(status));
  }
}

// "This bucket's gradients are computed": recorded on the stream backward queued them on (the
// hook's thread's current stream), waited for by the communication thread.
class ReadyEvent {
 public:
  explicit ReadyEvent(c10::DeviceIndex device) : device_(device) {
    const c10::cuda::CUDAGuard guard(device_);
    checkCuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming),
              "cudaEventCreateWithFlags");
  }
  ~ReadyEvent() { static_cast<void>(cudaEventDestroy(event_)); }
  ReadyEvent(const ReadyEvent&) = delete;
  ReadyEvent& operator=(const ReadyEvent&) = delete;
  ReadyEvent(ReadyEvent&&) = delete;
  ReadyEvent& operator=(ReadyEvent&&) = delete;

  void record() {
    const c10::cuda::CUDAGuard guard(device_);  // cudaEventRecord wants the event's device current
    checkCuda(cudaEventRecord(event_, c10::cuda::getCurrentCUDAStream(device_).stream()),
              "cudaEventRecord");
  }
  void wait() const { checkCuda(cudaEventSynchronize(event_), "cudaEventSynchronize"); }

 private:
  c10::DeviceIndex device_;
  cudaEvent_t event_ = nullptr;
};
#endif

}  // namespace

runtime::Buffer bufferOf(const torch::Tensor& tensor) {
  // Dense is enough: a channels-last weight also fills one block of memory, from data_ptr() on
  // (torch has no negative strides), and ranks with the same layout agree element by element.
  if (!tensor.is_non_overlapping_and_dense()) {
    throw std::invalid_argument(
        "dtrun::ddp::bufferOf: tensor is not dense (a strided view with gaps or overlaps)");
  }
  rt::Buffer buffer;
  buffer.data = tensor.data_ptr();
  buffer.count = static_cast<std::size_t>(tensor.numel());
  switch (tensor.scalar_type()) {
    case torch::kFloat:
      buffer.dtype = rt::DataType::kFloat32;
      break;
    case torch::kDouble:
      buffer.dtype = rt::DataType::kFloat64;
      break;
    case torch::kInt:
      buffer.dtype = rt::DataType::kInt32;
      break;
    case torch::kLong:
      buffer.dtype = rt::DataType::kInt64;
      break;
    case torch::kByte:
      buffer.dtype = rt::DataType::kUInt8;
      break;
    case torch::kHalf:
      buffer.dtype = rt::DataType::kFloat16;
      break;
    case torch::kBFloat16:
      buffer.dtype = rt::DataType::kBFloat16;
      break;
    default:
      throw std::invalid_argument(std::string("dtrun::ddp::bufferOf: unsupported dtype ") +
                                  std::string(c10::toString(tensor.scalar_type())));
  }
  if (tensor.is_cuda()) {
    buffer.device = rt::Device::kCuda;
    buffer.deviceIndex = static_cast<int>(tensor.get_device());
  }
  return buffer;
}

class DistributedDataParallel::Impl {
 public:
  Impl(rt::ProcessGroup& group, std::shared_ptr<torch::nn::Module> module, Options options)
      : module_(std::move(module)), options_(options), group_(&group) {
    if (!module_) {
      throw std::invalid_argument("DistributedDataParallel: module is null");
    }
    for (const auto& p : module_->parameters(/*recurse=*/true)) {
      if (p.requires_grad()) {
        params_.push_back(p);
      }
    }
    buffers_ = module_->buffers(/*recurse=*/true);
    device_ = params_.empty() ? torch::Device(torch::kCPU) : params_.front().device();
    for (const auto& p : params_) {
      if (p.device() != device_) {
        throw std::invalid_argument("DistributedDataParallel: parameters on several devices (" +
                                    device_.str() + ", " + p.device().str() +
                                    "); put the module on one device");
      }
    }
    const bool wantNccl = device_.is_cuda();
    if ((group_->backend() == rt::Backend::kNccl) != wantNccl) {
      throw std::invalid_argument(std::string("DistributedDataParallel: parameters on ") +
                                  device_.str() + " need a " +
                                  (wantNccl ? "kNccl" : "kTcp or kGloo") + " group, not " +
                                  rt::backendName(group_->backend()));
    }
    // The communication thread's own group (a group serves one thread at a time): every rank
    // derives it here, in the same order, from the caller's group.
    std::vector<int> all(static_cast<std::size_t>(group_->size()));
    std::iota(all.begin(), all.end(), 0);
    commGroup_ = group_->newGroup(all);
    buildBuckets();
    broadcastState();
    if (group_->size() > 1) {
      const torch::NoGradGuard noGrad;
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        adoptGrad(i);
      }
    }
    if (options_.overlap && group_->size() > 1) {
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
        const auto key =
            accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
                [this, i](const torch::autograd::variable_list& outputs,
                          const torch::autograd::variable_list&) {
                  onGradient(i);
                  return outputs;
                }));
        // The variable holds its accumulator weakly: keep it (and so the hook) alive.
        hooks_.emplace_back(std::move(accumulator), key);
      }
    }
    thread_ = std::thread([this] { commLoop(); });
  }

  ~Impl() {
    for (auto& [accumulator, key] : hooks_) {
      accumulator->del_post_hook(key);
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  Impl(Impl&&) = delete;
  Impl& operator=(Impl&&) = delete;

  void broadcastState() {
    if (group_->size() == 1) {
      return;
    }
    const torch::NoGradGuard noGrad;
    syncDevice(device_);
    for (const auto& p : module_->parameters(/*recurse=*/true)) {
      group_->broadcast(bufferOf(p), 0);
    }
    broadcastBuffers();
  }

  void prepareForward() {
    if (options_.broadcastBuffers && module_->is_training() && group_->size() > 1) {
      broadcastBuffers();
    }
  }

  void synchronizeGradients() {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    if (group_->size() > 1) {
      // backward() has returned, so no hook runs now: every slot still empty belongs to a
      // parameter that got no gradient in this pass (or overlap is off). Its zeros and copies
      // are queued on this thread's stream, where the bucket's ready event is recorded.
      const torch::NoGradGuard noGrad;
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        if (!slots_[i].ready) {
          if (!params_[i].grad().defined()) {
            slots_[i].view.zero_();
          }
          adoptGrad(i);
          markReadyLocked(i);
        }
      }
      cv_.wait(lock, [this] { return completed_ == buckets_.size(); });
    }
    completed_ = 0;
    nextLaunch_ = 0;
    for (auto& bucket : buckets_) {
      bucket.pending = bucket.slots.size();
    }
    for (auto& slot : slots_) {
      slot.ready = false;
    }
    if (error_) {
      std::rethrow_exception(std::exchange(error_, nullptr));
    }
    lock.unlock();
    exposedSeconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Every grad is its slot's view now: it holds the mean.
  }

  [[nodiscard]] int rank() const { return group_->rank(); }
  [[nodiscard]] int size() const { return group_->size(); }
  [[nodiscard]] std::size_t bucketCount() const { return buckets_.size(); }
  [[nodiscard]] double exposedCommSeconds() const { return exposedSeconds_; }

 private:
  struct Slot {
    std::size_t bucket = 0;
    torch::Tensor view;  // this parameter's part of its bucket's flat tensor (and its grad)
    bool ready = false;
  };
  struct Bucket {
    torch::Tensor flat;
    std::vector<std::size_t> slots;
    std::size_t pending = 0;  // slots still waiting for their gradient in this step
#ifdef DTRUN_TORCH_CUDA
    std::unique_ptr<ReadyEvent> ready;  // CUDA buckets only
#endif
  };

  // Buckets in reverse parameter order, split by dtype and by options_.bucketBytes.
  void buildBuckets() {
    slots_.resize(params_.size());
    std::vector<std::vector<std::size_t>> groups;
    std::size_t bytes = 0;
    for (std::size_t k = params_.size(); k-- > 0;) {
      const auto& p = params_[k];
      const std::size_t pBytes = static_cast<std::size_t>(p.numel()) * p.element_size();
      const bool newBucket = groups.empty() || bytes + pBytes > options_.bucketBytes ||
                             params_[groups.back().front()].scalar_type() != p.scalar_type();
      if (newBucket) {
        groups.emplace_back();
        bytes = 0;
      }
      groups.back().push_back(k);
      bytes += pBytes;
    }
    for (const auto& members : groups) {
      std::int64_t total = 0;
      for (const auto k : members) {
        total += params_[k].numel();
      }
      Bucket bucket;
      bucket.flat = torch::zeros({total}, params_[members.front()].options().requires_grad(false));
      std::int64_t offset = 0;
      for (const auto k : members) {
        slots_[k].bucket = buckets_.size();
        slots_[k].view = bucket.flat.narrow(0, offset, params_[k].numel());
        offset += params_[k].numel();
      }
      bucket.slots = members;
      bucket.pending = members.size();
#ifdef DTRUN_TORCH_CUDA
      if (device_.is_cuda()) {
        bucket.ready = std::make_unique<ReadyEvent>(device_.index());
      }
#endif
      buckets_.push_back(std::move(bucket));
    }
  }

  // One broadcast per dtype, not one per buffer (as DDP's coalesced broadcast): ResNet-18 has
  // 60 BatchNorm buffers, and every collective is a round trip that waits for the other ranks.
  void broadcastBuffers() {
    const torch::NoGradGuard noGrad;
    std::vector<std::vector<torch::Tensor>> byType;
    for (const auto& b : buffers_) {
      if (!b.defined() || b.numel() == 0) {
        continue;
      }
      auto group = std::find_if(byType.begin(), byType.end(), [&](const auto& g) {
        return g.front().scalar_type() == b.scalar_type() && g.front().device() == b.device();
      });
      if (group == byType.end()) {
        byType.emplace_back();
        group = std::prev(byType.end());
      }
      group->push_back(b);
    }
    for (const auto& group : byType) {
      std::vector<torch::Tensor> flat;
      flat.reserve(group.size());
      for (const auto& b : group) {
        flat.push_back(b.reshape(-1));
      }
      auto packed = torch::cat(flat);
      syncDevice(device_);
      group_->broadcast(bufferOf(packed), 0);
      if (group_->rank() != 0) {
        std::int64_t offset = 0;
        for (const auto& b : group) {
          const auto n = b.numel();
          b.copy_(packed.narrow(0, offset, n).view(b.sizes()));
          offset += n;
        }
      }
    }
  }

  // Makes parameter i's grad the view of its slot; a grad that is not that view (reset to
  // undefined and recreated by backward, or replaced) is copied into the slot first.
  void adoptGrad(std::size_t i) {
    auto& param = params_[i];
    const auto& grad = param.grad();
    const auto& view = slots_[i].view;
    if (grad.defined() && grad.data_ptr() == view.data_ptr()) {
      return;
    }
    // The slot's memory, but not an autograd view of the bucket: Optimizer::zero_grad()
    // calls detach_() on every grad, which a view refuses.
    const auto& flat = buckets_[slots_[i].bucket].flat;
    auto slotGrad =
        torch::empty({0}, flat.options())
            .set_(flat.storage(), view.storage_offset(), param.sizes(), gradStrides(param));
    if (grad.defined()) {
      slotGrad.copy_(grad);
    }
    param.mutable_grad() = slotGrad;
  }

  // A grad laid out as its parameter (channels-last weights get channels-last grads, which
  // backward adds into without a transposition, as torch's DDP does for its bucket views); the
  // slot holds numel() consecutive elements, so only a dense layout fits it.
  static std::vector<std::int64_t> gradStrides(const torch::Tensor& param) {
    if (param.is_non_overlapping_and_dense()) {
      return param.strides().vec();
    }
    const auto contiguous = c10::contiguous_strides(param.sizes());
    return {contiguous.begin(), contiguous.end()};
  }

  // Post hook of parameter i's grad accumulator: runs on the engine's thread, once per backward
  // pass, after this pass's gradient was added to .grad (in place: the slot, after zero_grad()).
  void onGradient(std::size_t i) {
    {
      const torch::NoGradGuard noGrad;
      adoptGrad(i);
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!slots_[i].ready) {
      markReadyLocked(i);
    }
  }

  void markReadyLocked(std::size_t i) {
    slots_[i].ready = true;
    auto& bucket = buckets_[slots_[i].bucket];
    if (--bucket.pending == 0) {
      recordReady(bucket);
    }
    bool queued = false;
    while (nextLaunch_ < buckets_.size() && buckets_[nextLaunch_].pending == 0) {
      queue_.push_back(nextLaunch_++);
      queued = true;
    }
    if (queued) {
      cv_.notify_all();
    }
  }

  // Marks, on the current stream, the point where the bucket's last gradient has been queued.
  static void recordReady([[maybe_unused]] Bucket& bucket) {
#ifdef DTRUN_TORCH_CUDA
    if (bucket.ready) {
      bucket.ready->record();
    }
#endif
  }

  // Returns once bucket b's gradients are computed: its ready event, or the whole device.
  void waitUntilReady([[maybe_unused]] std::size_t b) const {
#ifdef DTRUN_TORCH_CUDA
    if (buckets_[b].ready) {
      buckets_[b].ready->wait();
      return;
    }
#endif
    syncDevice(device_);
  }

  void commLoop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) {
        return;
      }
      const std::size_t b = queue_.front();
      queue_.pop_front();
      const bool broken = error_ != nullptr;
      lock.unlock();
      std::exception_ptr error;
      if (!broken) {
        try {
          waitUntilReady(b);
          commGroup_->allReduce(bufferOf(buckets_[b].flat), rt::ReduceOp::kAvg);
        } catch (...) {
          error = std::current_exception();
        }
      }
      lock.lock();
      if (error && !error_) {
        error_ = error;
      }
      ++completed_;
      cv_.notify_all();
    }
  }

  std::shared_ptr<torch::nn::Module> module_;
  Options options_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> buffers_;
  torch::Device device_{torch::kCPU};
  rt::ProcessGroup* group_;                      // the caller's: training thread only
  std::unique_ptr<rt::ProcessGroup> commGroup_;  // thread_ only
  std::vector<Slot> slots_;                      // one per params_ entry
  std::vector<Bucket> buckets_;
  // Each parameter's grad accumulator with the key of the post hook added to it.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, std::uintptr_t>> hooks_;
  double exposedSeconds_ = 0;

  std::mutex mutex_;  // guards everything below and slots_[].ready, buckets_[].pending
  std::condition_variable cv_;
  std::deque<std::size_t> queue_;  // buckets for the communication thread
  std::size_t nextLaunch_ = 0;     // the next bucket to queue, in index order
  std::size_t completed_ = 0;      // buckets all-reduced (or failed) in this step
  std::exception_ptr error_;       // the first failure; the group is unusable afterwards
  bool stop_ = false;
  std::thread thread_;
};

DistributedDataParallel::DistributedDataParallel(runtime::ProcessGroup& group,
                                                 std::shared_ptr<torch::nn::Module> module,
                                                 Options options)
    : impl_(std::make_unique<Impl>(group, std::move(module), options)) {}
DistributedDataParallel::~DistributedDataParallel() = default;
void DistributedDataParallel::prepareForward() { impl_->prepareForward(); }
void DistributedDataParallel::synchronizeGradients() { impl_->synchronizeGradients(); }
void DistributedDataParallel::broadcastState() { impl_->broadcastState(); }
int DistributedDataParallel::rank() const { return impl_->rank(); }
int DistributedDataParallel::size() const { return impl_->size(); }
std::size_t DistributedDataParallel::bucketCount() const { return impl_->bucketCount(); }
double DistributedDataParallel::exposedCommSeconds() const { return impl_->exposedCommSeconds(); }

// ---- DistributedSampler -----------------------------------------------------------------------

DistributedSampler::DistributedSampler(std::size_t datasetSize, int rank, int worldSize,
                                       std::uint64_t seed, bool shuffle, bool dropLast)
    : datasetSize_(datasetSize),
      rank_(rank),
      worldSize_(worldSize),
      seed_(seed),
      shuffle_(shuffle),
      dropLast_(dropLast),
      numSamples_(0) {
  if (worldSize < 1 || rank < 0 || rank >= worldSize) {
    throw std::invalid_argument("DistributedSampler: rank " + std::to_string(rank) +
                                " is not in [0, " + std::to_string(worldSize) + ")");
  }
  const auto w = static_cast<std::size_t>(worldSize);
  // torch: ceil((n - w) / w) with drop_last and an uneven split, else ceil(n / w).
  if (dropLast_ && datasetSize_ % w != 0) {
    numSamples_ = datasetSize_ >= w ? (datasetSize_ - w + w - 1) / w : 0;
  } else {
    numSamples_ = (datasetSize_ + w - 1) / w;
  }
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  const auto n = static_cast<std::int64_t>(datasetSize_);
  std::vector<std::int64_t> all(datasetSize_);
  if (shuffle_) {
    // The same generator and algorithm as torch.randperm(n, generator=g) after
    // g.manual_seed(seed + epoch), so the shards match PyTorch's DistributedSampler.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<std::uint64_t>(epoch_));
    const auto perm = torch::randperm(n, gen, torch::TensorOptions().dtype(torch::kLong));
    const auto* p = perm.data_ptr<std::int64_t>();
    std::copy(p, p + n, all.begin());
  } else {
    std::iota(all.begin(), all.end(), std::int64_t{0});
  }
  const std::size_t total = numSamples_ * static_cast<std::size_t>(worldSize_);
  if (total > all.size() && !all.empty()) {  // pad by repeating the head (several times if needed)
    const std::size_t n0 = all.size();
    for (std::size_t i = n0; i < total; ++i) {
      all.push_back(all[(i - n0) % n0]);
    }
  }
  all.resize(std::min(total, all.size()));
  std::vector<std::int64_t> mine;
  mine.reserve(numSamples_);
  for (std::size_t i = static_cast<std::size_t>(rank_); i < all.size();
       i += static_cast<std::size_t>(worldSize_)) {
    mine.push_back(all[i]);
  }
  return mine;
}

}  // namespace dtrun::ddp
