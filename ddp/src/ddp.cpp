// DistributedDataParallel and DistributedSampler (see dtrun/ddp.h).
//
// Overlap: every trainable parameter gets a tensor hook (Tensor::register_hook). On a leaf the
// hook runs in the autograd engine right before AccumulateGrad, with this backward's complete
// gradient for that parameter, so it copies the gradient into its slot of a flat bucket. When a
// bucket's last slot is filled, the bucket (and any later ones already complete) is queued for
// the communication thread, which all-reduces it (ReduceOp::kAvg) on a group of its own while
// backward goes on computing earlier layers. Buckets are queued strictly in index order, so every
// rank issues the same sequence of collectives whatever order its hooks fire in.
// synchronizeGradients() fills the slots of parameters that got no gradient, queues the rest,
// waits, and copies the means back into the grads (the grads are not views of the buckets, so
// optimizers and zero_grad() see ordinary tensors).
#include "dtrun/ddp.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <torch/cuda.h>
#include <torch/torch.h>

namespace dtrun::ddp {

namespace rt = dtrun::runtime;

runtime::Buffer bufferOf(const torch::Tensor& tensor) {
  if (!tensor.is_contiguous()) {
    throw std::invalid_argument("dtrun::ddp::bufferOf: tensor is not contiguous");
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
    if (options_.overlap && group_->size() > 1) {
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        hooks_.push_back(params_[i].register_hook(
            [this, i](const torch::Tensor& grad) { onGradient(i, grad); }));
      }
    }
    thread_ = std::thread([this] { commLoop(); });
  }

  ~Impl() {
    for (std::size_t i = 0; i < hooks_.size(); ++i) {
      params_[i].remove_hook(hooks_[i]);
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
      // parameter that got no gradient in this pass (or overlap is off).
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        if (!slots_[i].ready) {
          const auto& grad = params_[i].grad();
          if (grad.defined()) {
            slots_[i].view.copy_(grad.reshape(-1));
          } else {
            slots_[i].view.zero_();
          }
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
    if (group_->size() == 1) {
      return;
    }
    const torch::NoGradGuard noGrad;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      auto& param = params_[i];
      auto mean = slots_[i].view.view(param.sizes());
      if (param.grad().defined()) {
        param.mutable_grad().copy_(mean);
      } else {
        param.mutable_grad() = mean.clone();
      }
    }
  }

  [[nodiscard]] int rank() const { return group_->rank(); }
  [[nodiscard]] int size() const { return group_->size(); }
  [[nodiscard]] std::size_t bucketCount() const { return buckets_.size(); }
  [[nodiscard]] double exposedCommSeconds() const { return exposedSeconds_; }

 private:
  struct Slot {
    std::size_t bucket = 0;
    torch::Tensor view;  // this parameter's part of its bucket's flat tensor
    bool ready = false;
  };
  struct Bucket {
    torch::Tensor flat;
    std::vector<std::size_t> slots;
    std::size_t pending = 0;  // slots still waiting for their gradient in this step
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
      buckets_.push_back(std::move(bucket));
    }
  }

  void broadcastBuffers() {
    const torch::NoGradGuard noGrad;
    for (const auto& b : buffers_) {
      if (b.defined() && b.numel() > 0) {
        group_->broadcast(bufferOf(b), 0);
      }
    }
  }

  // Autograd hook: runs on the engine's thread, once per backward pass for a leaf parameter.
  void onGradient(std::size_t i, const torch::Tensor& grad) {
    {
      const torch::NoGradGuard noGrad;
      slots_[i].view.copy_(grad.reshape(-1));
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!slots_[i].ready) {
      markReadyLocked(i);
    }
  }

  void markReadyLocked(std::size_t i) {
    slots_[i].ready = true;
    --buckets_[slots_[i].bucket].pending;
    bool queued = false;
    while (nextLaunch_ < buckets_.size() && buckets_[nextLaunch_].pending == 0) {
      queue_.push_back(nextLaunch_++);
      queued = true;
    }
    if (queued) {
      cv_.notify_all();
    }
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
          const auto& flat = buckets_[b].flat;
          if (flat.is_cuda()) {
            // The hooks' copies were issued on the training stream; NCCL's stream must see them.
            torch::cuda::synchronize(flat.get_device());
          }
          commGroup_->allReduce(bufferOf(flat), rt::ReduceOp::kAvg);
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
  std::vector<unsigned> hooks_;
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
