// dtrt_hang_worker: a libdtrt worker that deadlocks on purpose, for dtrun's hang detection
// (tests/integration/hang_report_test.sh). Every rank runs `--steps` all_reduces on the world;
// then rank `--stuck` (default 1) enters an all_reduce on the sub-group {0, stuck} that rank 0
// never joins, inside stuckInAllReduce(), while every other rank enters the next world
// all_reduce and waits for it. Nothing returns until DTRUN_TIMEOUT; dtrun's --hang_timeout must
// find it first. With `--ok` every rank runs its steps and exits 0 (the report's success case);
// `--slow=R:S` makes rank R sleep S seconds before each of its steps (a straggler, for
// tests/integration/straggler_test.sh).
//   dtrun --nproc_per_node=4 --hang_timeout=3 --no_python
//   build/tests/worker_runtime/dtrt_hang_worker
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "dtrun/runtime.h"

namespace rt = dtrun::runtime;

namespace {

// Kept out of line so that the stack dump names it.
[[gnu::noinline]] void stuckInAllReduce(rt::ProcessGroup& group, std::vector<float>& data) {
  group.allReduce(rt::view(std::span(data)));
  std::cout << "unreachable: the sub-group all_reduce completed" << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5;
  int stuck = 1;
  bool ok = false;
  int slowRank = -1;
  double slowSeconds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("--steps=")) {
      steps = std::stoi(arg.substr(8));
    } else if (arg.starts_with("--stuck=")) {
      stuck = std::stoi(arg.substr(8));
    } else if (arg.starts_with("--slow=") && arg.find(':') != std::string::npos) {
      slowRank = std::stoi(arg.substr(7, arg.find(':') - 7));
      slowSeconds = std::stod(arg.substr(arg.find(':') + 1));
    } else if (arg == "--ok") {
      ok = true;
    } else {
      std::cerr << "dtrt_hang_worker: unknown argument " << arg
                << " (expected --steps=N, --stuck=R, --slow=R:SECONDS, --ok)\n";
      return 2;
    }
  }
  try {
    auto ctx = rt::init();
    auto world = rt::ProcessGroup::create(ctx);
    auto pair = world->newGroup({0, stuck});  // nullptr on the other ranks
    std::vector<float> data(256, 1.0F);
    for (int step = 0; step < steps; ++step) {
      if (ctx.rank == slowRank) {
        std::this_thread::sleep_for(std::chrono::duration<double>(slowSeconds));
      }
      world->allReduce(rt::view(std::span(data)));
    }
    if (ok) {
      std::cout << "rank " << ctx.rank << ": " << steps << " steps done" << std::endl;
      return 0;
    }
    std::cout << "rank " << ctx.rank << ": entering the deadlock" << std::endl;
    if (ctx.rank == stuck) {
      stuckInAllReduce(*pair, data);
    } else {
      world->allReduce(rt::view(std::span(data)));
    }
    return 0;
  } catch (const rt::Error& e) {
    std::cerr << "rank error: " << e.what() << "\n";
    return 1;
  }
}
