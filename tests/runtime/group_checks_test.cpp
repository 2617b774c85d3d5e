// The check worker's full per-group checks (tests/worker_runtime/ops_checks.h: every collective
// x dtype x ReduceOp at lengths 1, 7, 1001 and 100003 against its own oracle, p2p with tags out of
// order, sub-groups, Work::wait timeouts, SIGPIPE after a gloo group) with ranks as threads of
// this process, through init(Membership); and compare_checks.h: tcp against gloo on seeded random
// data. Real processes (tests/integration/runtime_test.sh)
// remain for what needs them: early exits, restarts, error files, a missing environment, NCCL.
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "dtrun/runtime.h"

#include "support/test_support.h"
#include "thread_rank.h"
#include "worker_runtime/compare_checks.h"
#include "worker_runtime/ops_checks.h"

namespace {

namespace rt = dtrun::runtime;

using Check = std::function<int(dtrt_check::Reporter&, const rt::Context&)>;

// Runs `check` on `world` threads of one in-process store; the number of ranks that failed.
int failingRanks(int world, const Check& check) {
  static std::atomic<int> jobs{0};
  const auto server = dtrun::testing::startServer();
  const std::string prefix = "/checks" + std::to_string(jobs++);
  std::vector<int> codes(static_cast<std::size_t>(world), 1);
  std::vector<std::thread> ranks;
  ranks.reserve(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      dtrt_check::Reporter report(/*quiet=*/true);
      try {
        codes[static_cast<std::size_t>(r)] =
            check(report, dtrun::testing::joinAsThread(r, world, server->port(), prefix));
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

}  // namespace

TEST_CASE("the check worker's group checks pass on tcp and gloo, world sizes 1 to 4",
          "[runtime][checks]") {
  for (const rt::Backend backend : {rt::Backend::kTcp, rt::Backend::kGloo}) {
    for (int world = 1; world <= 4; ++world) {
      INFO(rt::backendName(backend) << " world " << world << " (FAIL lines above name the check)");
      CHECK(failingRanks(world, [backend](dtrt_check::Reporter& report, const rt::Context& ctx) {
              return dtrt_check::checkGroup(report, ctx, backend);
            }) == 0);
    }
  }
}

TEST_CASE("tcp and gloo agree on seeded random data, world sizes 2 and 3", "[runtime][checks]") {
  for (int world = 2; world <= 3; ++world) {
    INFO("world " << world << " (FAIL lines above name the check)");
    CHECK(failingRanks(world, dtrt_check::checkCompare) == 0);
  }
}
