// resnet_ddp's step timing: host time between the points where the loop waits for the device
// anyway, and GPU time per step from CUDA events where the build has them (cuda_step.h).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <numeric>

#include <torch/torch.h>

#include "cuda_step.h"
#include "step.h"

namespace resnet_ddp {

// The timed part of the run: steps after the warm-up.
struct Measured {
  double seconds = 0;  // host time between device synchronisations
  std::int64_t steps = 0;
  std::int64_t images = 0;
  double gpuMs = 0;  // the same steps' GPU time from CUDA events (GPU builds only)
  std::int64_t gpuSteps = 0;
};

// One window's figures, from its start to a log point.
struct Window {
  double seconds = 0;
  std::int64_t steps = 0;
  std::int64_t images = 0;
  double gpuMsPerStep = 0;  // 0: not measured
};

// Host time of training steps without a wait per step: the device is synchronised only where
// the host reads results anyway (a log point ends a window) and once where the warm-up ends.
// Evaluation, checkpoints and barriers between windows are outside every window.
class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;

  StepTimer(const torch::Device& device, std::int64_t warmupSteps)
      : device_(device), warmupSteps_(warmupSteps), clock_(device) {}

  void startWindow() {
    syncDevice(device_);
    window_ = Window{};
    measuredInWindow_ = 0;
    windowStart_ = Clock::now();
    measureFrom_ = windowStart_;
    clock_.start();
  }
  void beforeStep(std::int64_t stepsDone) {
    if (stepsDone == warmupSteps_) {
      syncDevice(device_);
      measureFrom_ = Clock::now();
    }
  }
  void afterStep(std::int64_t images, std::int64_t stepsDone) {
    clock_.mark();
    ++window_.steps;
    window_.images += images;
    if (stepsDone > warmupSteps_) {
      ++measuredInWindow_;
      ++measured_.steps;
      measured_.images += images;
    }
  }
  // Waits for the device and closes the window.
  Window endWindow() {
    syncDevice(device_);
    const auto now = Clock::now();
    window_.seconds = std::chrono::duration<double>(now - windowStart_).count();
    if (measuredInWindow_ > 0) {
      measured_.seconds += std::chrono::duration<double>(now - measureFrom_).count();
    }
    const auto ms = clock_.stepMilliseconds();
    if (!ms.empty()) {
      window_.gpuMsPerStep =
          std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
      const auto measuredMs = std::min<std::size_t>(ms.size(), measuredInWindow_);
      measured_.gpuMs +=
          std::accumulate(ms.end() - static_cast<std::ptrdiff_t>(measuredMs), ms.end(), 0.0);
      measured_.gpuSteps += static_cast<std::int64_t>(measuredMs);
    }
    return window_;
  }
  [[nodiscard]] const Measured& measured() const { return measured_; }

 private:
  torch::Device device_;
  std::int64_t warmupSteps_;
  StepClock clock_;
  Clock::time_point windowStart_;
  Clock::time_point measureFrom_;  // the window's start, or the end of the warm-up within it
  Window window_;
  std::size_t measuredInWindow_ = 0;
  Measured measured_;
};

}  // namespace resnet_ddp
