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

#include "support/test_form.h"
#include "support/test_support.h"
#include "thread_job.h"
#include "thread_rank.h"
#include "worker_runtime/compare_checks.h"
#include "worker_runtime/ops_checks.h"

namespace {

namespace rt = dtrun::runtime;

using dtrun::testing::Check;
using dtrun::testing::checkForm;
using dtrun::testing::failingRanks;

}  // namespace

TEST_CASE("the check worker's group checks pass on tcp and gloo, world sizes 1 to 4",
          "[runtime][checks]") {
  // Short form (support/test_form.h): each world size on one backend, tcp the odd ones.
  const bool all = dtrun::testing::longForm();
  for (const rt::Backend backend : {rt::Backend::kTcp, rt::Backend::kGloo}) {
    const int first = all || backend == rt::Backend::kTcp ? 1 : 2;
    for (int world = first; world <= 4; world += all ? 1 : 2) {
      INFO(rt::backendName(backend) << " world " << world << " (FAIL lines above name the check)");
      CHECK(failingRanks(world, [backend](dtrt_check::Reporter& report, const rt::Context& ctx) {
              return dtrt_check::checkGroup(report, ctx, backend, checkForm());
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
