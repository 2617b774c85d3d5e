// resnet_ddp's GPU-only machinery: the compute stream, per-step GPU times from CUDA events, and
// a CUDA graph of the whole training step. Its CUDA code is compiled only with
// DTRUN_TORCH_CUDA, which scripts/gpu/build_resnet_ddp.sh defines where torch has CUDA and its
// headers (Debian's libtorch has neither); without it the same names stand in, doing nothing, so
// the training loop has no #ifdef. Only c10/cuda's stream headers, ATen/cuda/CUDAGraph.h and the
// CUDA runtime are used: ATen/cuda/CUDAEvent.h would pull in cuBLAS, cuSPARSE and cuSOLVER
// headers through CUDAContext.h, which a machine with only torch's wheels may lack.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#ifdef DTRUN_TORCH_CUDA
#include <cuda_runtime_api.h>
// CUDA_VERSION before torch's CUDA headers: CUDAGraph's members depend on it, and without it this
// file would see a smaller CUDAGraph than libtorch_cuda was built with. cuda.h defines it; where
// only the runtime's headers came with torch's wheels, the runtime's version is the same number.
#if __has_include(<cuda.h>)
#include <cuda.h>
#elif !defined(CUDA_VERSION)
#define CUDA_VERSION CUDART_VERSION
#endif
#ifdef DTRUN_TORCH_CUDA_VERSION  // torch.version.cuda as a number, from build_resnet_ddp.sh
static_assert(CUDA_VERSION / 1000 == DTRUN_TORCH_CUDA_VERSION / 1000 &&
                  (CUDA_VERSION >= 12040) == (DTRUN_TORCH_CUDA_VERSION >= 12040),
              "these CUDA headers and torch's CUDA differ where at::cuda::CUDAGraph's layout "
              "depends on the version");
#endif
// Torch's CUDA headers, after CUDA_VERSION:
#include <ATen/cuda/CUDAGraph.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "step.h"

namespace resnet_ddp {

// The step as the training loop runs it; autocastCache is false under graph capture.
using StepFunction = std::function<void(const StepInputs& inputs, bool autocastCache)>;

// The first line of an exception's text: libtorch's messages go on with a C++ backtrace.
inline std::string firstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

#ifdef DTRUN_TORCH_CUDA

inline constexpr bool kCudaGraphsBuilt = true;

inline void checkCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    // A failed call leaves CUDA's last-error slot set; later calls need it clear.
    static_cast<void>(cudaGetLastError());
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// For the run's lifetime, a stream from torch's pool (non-blocking) instead of the legacy
// default stream, as current stream of the training thread: CUDA graphs capture only on a
// non-default stream, and libdtrt's NCCL stream is a blocking one, which work on the legacy
// default stream would serialise with (no overlap of the all-reduce with backward).
class ComputeStream {
 public:
  explicit ComputeStream(const torch::Device& device) {
    if (device.is_cuda()) {
      guard_.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
    }
  }

 private:
  std::optional<c10::cuda::CUDAStreamGuard> guard_;
};

// One CUDA event with timing, on the device current at construction.
class TimingEvent {
 public:
  TimingEvent() { checkCuda(cudaEventCreate(&event_), "cudaEventCreate"); }
  ~TimingEvent() { static_cast<void>(cudaEventDestroy(event_)); }
  TimingEvent(const TimingEvent&) = delete;
  TimingEvent& operator=(const TimingEvent&) = delete;
  TimingEvent(TimingEvent&&) = delete;
  TimingEvent& operator=(TimingEvent&&) = delete;

  void record(cudaStream_t stream) {
    checkCuda(cudaEventRecord(event_, stream), "cudaEventRecord");
  }
  // Milliseconds from `earlier` to this event; both must have completed.
  [[nodiscard]] double millisecondsSince(const TimingEvent& earlier) const {
    float ms = 0;
    checkCuda(cudaEventElapsedTime(&ms, earlier.event_, event_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// GPU time per step without waiting for it: an event on the compute stream at the start of a
// window and after each step, read when the host waits for the device anyway (a log point).
class StepClock {
 public:
  explicit StepClock(const torch::Device& device) : device_(device) {}

  void start() {
    used_ = 0;
    mark();
  }
  void mark() {
    if (!device_.is_cuda()) {
      return;
    }
    if (used_ == events_.size()) {
      events_.push_back(std::make_unique<TimingEvent>());
    }
    events_[used_++]->record(c10::cuda::getCurrentCUDAStream(device_.index()).stream());
  }
  // The window's step times in milliseconds; call after the device finished them.
  [[nodiscard]] std::vector<double> stepMilliseconds() const {
    std::vector<double> ms;
    for (std::size_t i = 1; i < used_; ++i) {
      ms.push_back(events_[i]->millisecondsSince(*events_[i - 1]));
    }
    return ms;
  }

 private:
  torch::Device device_;
  std::vector<std::unique_ptr<TimingEvent>> events_;  // reused window after window
  std::size_t used_ = 0;
};

// The whole training step as one CUDA graph (PyTorch's "whole network capture"): captured once,
// after eager warm-up steps on the same stream (so cuDNN's algorithm search, cuBLAS workspaces
// and the optimizer's momentum buffers exist before capture), then replayed per step. A graph
// reads fixed addresses, so the step's inputs are copied into tensors of its own first.
class GraphStep {
 public:
  // Captures step() on the current stream. Returns why not where the capture failed; then
  // nothing ran (a capture does not execute), and the caller runs the step eagerly.
  [[nodiscard]] std::optional<std::string> capture(const StepFunction& step,
                                                   const StepInputs& inputs) {
    inputs_.indices = inputs.indices.clone();
    inputs_.crop = inputs.crop.defined() ? inputs.crop.clone() : torch::Tensor();
    // Capture from an idle device, as torch.cuda.graph does (its __enter__ synchronizes).
    syncDevice(inputs.indices.device());
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    try {
      graph->capture_begin();
      try {
        step(inputs_, /*autocastCache=*/false);
      } catch (...) {
        endFailedCapture(*graph);
        throw;
      }
      graph->capture_end();
    } catch (const std::exception& e) {
      // Kept, not destroyed: an older libtorch's capture_end() throws before it stops routing
      // allocations to the graph's pool, which destroying the graph would then release.
      failed_ = std::move(graph);
      return firstLine(e.what());
    }
    graph_ = std::move(graph);
    return std::nullopt;
  }

  [[nodiscard]] bool ready() const { return graph_ != nullptr; }

  // One step on new inputs: copies them into the captured tensors, then launches the graph
  // (both queued on the current stream, in order).
  void replay(const StepInputs& inputs) {
    inputs_.indices.copy_(inputs.indices, /*non_blocking=*/true);
    if (inputs_.crop.defined()) {
      inputs_.crop.copy_(inputs.crop, /*non_blocking=*/true);
    }
    graph_->replay();
  }

 private:
  // Ends a capture the step broke off, so the stream leaves capture mode; capture_end()
  // reports the broken capture, which the step's own exception already explains.
  static void endFailedCapture(at::cuda::CUDAGraph& graph) noexcept {
    try {
      graph.capture_end();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the step's exception is the one to report
    }
  }

  StepInputs inputs_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  std::unique_ptr<at::cuda::CUDAGraph> failed_;
};

#else  // !DTRUN_TORCH_CUDA: stand-ins

inline constexpr bool kCudaGraphsBuilt = false;

class ComputeStream {
 public:
  explicit ComputeStream(const torch::Device& /*device*/) {}
};

class StepClock {
 public:
  explicit StepClock(const torch::Device& /*device*/) {}
  void start() {}
  void mark() {}
  [[nodiscard]] std::vector<double> stepMilliseconds() const { return {}; }
};

class GraphStep {
 public:
  [[nodiscard]] std::optional<std::string> capture(const StepFunction& /*step*/,
                                                   const StepInputs& /*inputs*/) {
    return "this build has no CUDA graph support";
  }
  [[nodiscard]] bool ready() const { return false; }
  void replay(const StepInputs& /*inputs*/) {}
};

#endif  // DTRUN_TORCH_CUDA

}  // namespace resnet_ddp
