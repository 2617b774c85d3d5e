#include <algorithm>

#include "dtrun/common.h"

namespace dtrun {

Backoff::Backoff(Options options)
    : options_(options),
      currentMs_(static_cast<double>(options.initialInterval.count())),
      rng_(std::random_device{}()) {}

std::chrono::milliseconds Backoff::nextDelay() {
  const double r = std::clamp(options_.randomization, 0.0, 1.0);
  std::uniform_real_distribution<double> factor(1.0 - r, 1.0 + r);
  const double delay = r == 0.0 ? currentMs_ : currentMs_ * factor(rng_);
  currentMs_ =
      std::min(currentMs_ * options_.multiplier, static_cast<double>(options_.maxInterval.count()));
  return std::chrono::milliseconds(static_cast<std::int64_t>(delay));
}

}  // namespace dtrun
