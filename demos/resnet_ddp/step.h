// resnet_ddp's training step, the parts that run on any device: bf16 autocast across libtorch
// versions, the channels-last layout, gradient zeroing, and the batch made on the device (crop,
// flip and normalisation as a few whole-batch kernels). Nothing here waits for the device, so
// the host can queue steps ahead of the GPU, and the same code can be captured in a CUDA graph
// (cuda_step.h). Header-only: the demo is one translation unit for CMake and for
// scripts/gpu/build_resnet_ddp.sh alike.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

namespace resnet_ddp {

// ---- bf16 autocast ---------------------------------------------------------------------------

// libtorch 2.4 made the autocast state per device type; 1.13 to 2.3 have one set of calls for
// CUDA (set_enabled, set_autocast_gpu_dtype) and one for the CPU (set_cpu_enabled, ...), which
// 2.4 and later keep only as deprecated wrappers that warn.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline bool autocastEnabled(c10::DeviceType device) {
  return at::autocast::is_autocast_enabled(device);
}
inline void setAutocastEnabled(c10::DeviceType device, bool enabled) {
  at::autocast::set_autocast_enabled(device, enabled);
}
inline at::ScalarType autocastDtype(c10::DeviceType device) {
  return at::autocast::get_autocast_dtype(device);
}
inline void setAutocastDtype(c10::DeviceType device, at::ScalarType dtype) {
  at::autocast::set_autocast_dtype(device, dtype);
}
#else
inline bool autocastEnabled(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
}
inline void setAutocastEnabled(c10::DeviceType device, bool enabled) {
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
}
inline at::ScalarType autocastDtype(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
}
inline void setAutocastDtype(c10::DeviceType device, at::ScalarType dtype) {
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
}
#endif

// Python's `with torch.autocast(device, dtype=torch.bfloat16, cache_enabled=cache):` for one
// scope: the previous state comes back afterwards, and leaving the outermost autocast scope
// clears the cast cache, whose bf16 copies of the weights would be stale once the optimizer has
// stepped. A CUDA graph capture passes cache = false, as PyTorch asks for graphed autocast: a
// cached cast made during capture would be a graph-pool tensor that later replays overwrite.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, bool cache)
      : device_(device),
        wasEnabled_(autocastEnabled(device)),
        previousDtype_(autocastDtype(device)),
        previousCache_(at::autocast::is_autocast_cache_enabled()) {
    setAutocastEnabled(device_, true);
    setAutocastDtype(device_, at::kBFloat16);
    at::autocast::set_autocast_cache_enabled(cache);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (at::autocast::decrement_nesting() == 0) {
      at::autocast::clear_cache();
    }
    setAutocastEnabled(device_, wasEnabled_);
    setAutocastDtype(device_, previousDtype_);
    at::autocast::set_autocast_cache_enabled(previousCache_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  AutocastGuard(AutocastGuard&&) = delete;
  AutocastGuard& operator=(AutocastGuard&&) = delete;

 private:
  c10::DeviceType device_;
  bool wasEnabled_;
  at::ScalarType previousDtype_;
  bool previousCache_;
};

// ---- layouts and gradients -------------------------------------------------------------------

// Python's model.to(memory_format=torch.channels_last): the 4-D parameters and buffers (the
// convolution weights) in NHWC order, the layout cuDNN's tensor-core convolutions take; NCHW
// weights cost a transposition per convolution. set_data keeps each tensor's identity, so the
// optimizer (which holds them) and autograd see the same parameters.
inline void toChannelsLast(torch::nn::Module& model) {
  const torch::NoGradGuard noGrad;
  for (auto& p : model.parameters()) {
    if (p.dim() == 4) {
      p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  for (auto& b : model.buffers()) {
    if (b.dim() == 4) {
      b.set_data(b.data().contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
}

// A checkpoint's momentum buffers in their parameters' layout (they are read back contiguous),
// so the optimizer's element-wise updates do not mix layouts. The state map's key type changed
// across libtorch versions; only its values are read here.
inline void momentumToChannelsLast(torch::optim::SGD& optimizer) {
  const torch::NoGradGuard noGrad;
  for (auto& entry : optimizer.state()) {
    auto& state = static_cast<torch::optim::SGDParamState&>(*entry.second);
    if (state.momentum_buffer().defined() && state.momentum_buffer().dim() == 4) {
      state.momentum_buffer(state.momentum_buffer().contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
}

// Optimizer::zero_grad as the step needs it. setToNone: backward then stores fresh gradients
// instead of adding them to zeros (Python's zero_grad(set_to_none=True), one kernel less per
// parameter); otherwise the grads keep their memory, which DDP's bucket views and a CUDA graph's
// fixed addresses need. libtorch >= 2.0 takes the flag (default true); 1.13 always zeroes.
inline void zeroGrads(torch::optim::Optimizer& optimizer, bool setToNone) {
#if TORCH_VERSION_MAJOR >= 2
  optimizer.zero_grad(setToNone);
#else
  if (!setToNone) {
    optimizer.zero_grad();
    return;
  }
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      p.mutable_grad().reset();
    }
  }
#endif
}

// Waits for everything queued on the device (a no-op on the CPU).
inline void syncDevice(const torch::Device& device) {
  if (device.is_cuda()) {
    torch::cuda::synchronize(device.index());
  }
}

// ---- the batch -------------------------------------------------------------------------------

// What one step reads besides the model and the data set: tensors on the device, which a CUDA
// graph copies into its own (cuda_step.h).
struct StepInputs {
  torch::Tensor indices;  // int64 [n]: this step's samples, a slice of the epoch's shard
  torch::Tensor crop;     // int64 [2, n, 32]: source rows, then columns; undefined: no augment
};

// RandomCrop(32, padding=4) + RandomHorizontalFlip as gather indices into the zero-padded 40x40
// image: rows top..top+31, columns left..left+31 (reversed when mirrored). The host draws the
// numbers in the seed's order (top, left, flip per image), so runs reproduce; one pinned,
// non-blocking copy takes them to the device without waiting for it.
inline torch::Tensor cropIndices(std::int64_t n, std::mt19937_64& rng,
                                 const torch::Device& device) {
  std::uniform_int_distribution<std::int64_t> offset(0, 8);
  std::bernoulli_distribution flip(0.5);
  auto host =
      torch::empty({2, n, 32}, torch::TensorOptions(torch::kLong).pinned_memory(device.is_cuda()));
  auto* rows = host.data_ptr<std::int64_t>();
  auto* cols = rows + n * 32;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto top = offset(rng);
    const auto left = offset(rng);
    const bool mirror = flip(rng);
    for (std::int64_t k = 0; k < 32; ++k) {
      rows[i * 32 + k] = top + k;
      cols[i * 32 + k] = mirror ? left + 31 - k : left + k;
    }
  }
  return host.to(torch::TensorOptions().device(device), /*non_blocking=*/true);
}

// Applies cropIndices' indices to a uint8 batch: two gathers for the whole batch (the seed's
// per-image loop queues two small copies per image).
inline torch::Tensor cropAndFlip(const torch::Tensor& images, const torch::Tensor& crop) {
  const auto n = images.size(0);
  const auto padded = torch::constant_pad_nd(images, {4, 4, 4, 4}, 0);
  const auto rows = crop[0].view({n, 1, 32, 1}).expand({n, 3, 32, 40});
  const auto cols = crop[1].view({n, 1, 1, 32}).expand({n, 3, 32, 32});
  return padded.gather(2, rows).gather(3, cols);
}

// uint8 images -> the seed's Normalize: (x / 255 - mean) / std, the same operations in the same
// order as torchvision's ToTensor and Normalize (so the numbers match theirs), with constants
// made once on the device: constants copied per call would each cost the host a wait.
class Normaliser {
 public:
  Normaliser(const torch::Device& device, bool channelsLast)
      : mean_(constant({0.4914F, 0.4822F, 0.4465F}, device)),
        std_(constant({0.2023F, 0.1994F, 0.2010F}, device)),
        channelsLast_(channelsLast) {}

  torch::Tensor operator()(const torch::Tensor& images) const {
    if (!channelsLast_) {
      return (images.to(torch::kFloat).div(255.0F) - mean_) / std_;
    }
    // Transposed while still uint8 (a quarter of the bytes); the element-wise ops keep the
    // layout, and contiguous() then costs nothing.
    const auto nhwc = images.contiguous(torch::MemoryFormat::ChannelsLast);
    return ((nhwc.to(torch::kFloat).div(255.0F) - mean_) / std_)
        .contiguous(torch::MemoryFormat::ChannelsLast);
  }

 private:
  static torch::Tensor constant(const std::vector<float>& values, const torch::Device& device) {
    return torch::tensor(values).view({1, 3, 1, 1}).to(device);
  }

  torch::Tensor mean_;
  torch::Tensor std_;
  bool channelsLast_;
};

}  // namespace resnet_ddp
