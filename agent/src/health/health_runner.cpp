#include "health/health_runner.h"

#include <thread>

#include <boost/asio/post.hpp>

namespace dtrun::agent::detail {

HealthRunner::HealthRunner(boost::asio::io_context& io, std::shared_ptr<HealthProbe> probe)
    : io_(io), probe_(std::move(probe)) {}

HealthRunner::~HealthRunner() {
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  shared_->alive = false;
}

void HealthRunner::run(HealthPlan plan, Done done) {
  // The thread owns everything it touches but the io_context, which it posts to only while the
  // runner (declared after the io_context by its owner) is alive.
  std::thread([shared = shared_, io = &io_, probe = probe_, plan = std::move(plan),
               done = std::move(done)]() mutable {
    auto results = runHealthChecks(plan, probe);
    const std::lock_guard<std::mutex> lock(shared->mutex);
    if (shared->alive) {
      boost::asio::post(*io, [done = std::move(done), results = std::move(results)]() mutable {
        done(std::move(results));
      });
    }
  }).detach();
}

std::vector<CheckResult> HealthRunner::runHere(const HealthPlan& plan) const {
  return runHealthChecks(plan, probe_);
}

}  // namespace dtrun::agent::detail
