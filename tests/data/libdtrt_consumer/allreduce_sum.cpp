// A program built outside dtrun's tree against the installed libdtrt (CMakeLists.txt here, or the
// Makefile through pkg-config): each rank joins the job, all-reduces {rank + 1, 10 * (rank + 1),
// 100 * (rank + 1)} with the Tcp backend and prints the sums. Under
//   dtrun --nproc_per_node=2 --no_python ./allreduce_sum
// each rank prints "allreduce_sum: rank R of 2: 3 30 300".
#include <cstdio>
#include <exception>
#include <span>
#include <vector>

#include "dtrun/runtime.h"

namespace rt = dtrun::runtime;

int main() {
  try {
    const rt::Context ctx = rt::init();
    auto group = rt::ProcessGroup::create(ctx, rt::Backend::kTcp);
    const auto mine = static_cast<double>(ctx.rank + 1);
    std::vector<double> values{mine, 10 * mine, 100 * mine};
    group->allReduce(rt::view(std::span(values)), rt::ReduceOp::kSum);
    std::printf("allreduce_sum: rank %d of %d: %g %g %g\n", ctx.rank, ctx.worldSize, values[0],
                values[1], values[2]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_sum: %s\n", e.what());
    return 1;
  }
}
