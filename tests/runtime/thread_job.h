// An in-process job of libdtrt's check worker: every rank a thread of this process.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dtrun/runtime.h"

#include "support/test_form.h"
#include "support/test_support.h"
#include "thread_rank.h"
#include "worker_runtime/ops_checks.h"

namespace dtrun::testing {

using Check = std::function<int(dtrt_check::Reporter&, const runtime::Context&)>;

// The check worker's matrix in this tree's form (support/test_form.h).
inline dtrt_check::Form checkForm() {
  return longForm() ? dtrt_check::Form::kLong : dtrt_check::Form::kShort;
}

// Runs `check` on `world` threads of one in-process store; the number of ranks that failed.
inline int failingRanks(int world, const Check& check) {
  static std::atomic<int> jobs{0};
  const auto server = startServer();
  const std::string prefix = "/job" + std::to_string(jobs++);
  std::vector<int> codes(static_cast<std::size_t>(world), 1);
  std::vector<std::thread> ranks;
  ranks.reserve(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      dtrt_check::Reporter report(/*quiet=*/true);
      try {
        codes[static_cast<std::size_t>(r)] =
            check(report, joinAsThread(r, world, server->port(), prefix));
      } catch (const std::exception& e) {
        report.fail("rank " + std::to_string(r), e.what());
      }
    });
  }
  for (auto& t : ranks) {
    t.join();
  }
  int failing = 0;
  for (const int code : codes) {
    failing += code != 0 ? 1 : 0;
  }
  return failing;
}

}  // namespace dtrun::testing
