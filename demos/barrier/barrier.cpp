// barrier: the seeds' barrier ablation. Every rank does some uneven work (rank r sleeps
// r * --delay-ms), logs that it reached the checkpoint, waits in ProcessGroup::barrier(), and
// logs its results. With the barrier no rank leaves before every rank has entered, so every
// rank's "WAITING" line precedes every rank's "Results" line; with --no-barrier the fast ranks
// print their results while the slow ones are still working.
//
// Usage:
//   build/launcher/dtrun --nproc_per_node=4 --tee=3 --no_python build/demos/barrier/barrier
//       [--no-barrier] [--delay-ms=100] [--backend=tcp|gloo]
// Output (with --tee=3; each rank's stdout also goes to <log_dir>/<run_id>/attempt_0/<rank>/):
//   [default0]:2026-11-21 23:47:17.114087 [INFO] rank 0/4: I HAVE BARRIER DUDE! WAITING FOR ALL
//       PROCESSES TO SYNCHRONIZE... (monotonic_ns=11348863883140)
//   ... ranks 1 and 2, 100 and 200 ms later ...
//   [default3]:2026-11-21 23:47:17.414448 [INFO] rank 3/4: I HAVE BARRIER DUDE! WAITING FOR ALL
//       PROCESSES TO SYNCHRONIZE... (monotonic_ns=11349164243544)
//   [default3]:2026-11-21 23:47:17.414725 [INFO] rank 3/4: Results: [[1, 2, 3]]
//       (monotonic_ns=11349164520660)
//   ... and the other three Results lines, all after rank 3's WAITING line.
// The seed does no work before its checkpoint, so its disorder without a barrier shows only
// sometimes; the per-rank delay makes it show every time, and makes a barrier that does not
// wait fail tests/integration/demos_test.sh every time.
// The wall-clock time is for people; monotonic_ns is CLOCK_MONOTONIC, one clock for every
// process of the host, so a test can order lines of different ranks. Each line is taken
// (clock first) and flushed before the next step: the WAITING stamp before entering the
// barrier, the Results stamp after leaving it.
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

#include "dtrun/runtime.h"

namespace rt = dtrun::runtime;

namespace {

struct Options {
  bool barrier = true;
  int delayMs = 100;
  rt::Backend backend = rt::Backend::kTcp;
};

constexpr std::string_view kUsage =
    "usage: barrier [--no-barrier] [--delay-ms=N] [--backend=tcp|gloo]\n"
    "  run under dtrun: dtrun --nproc_per_node=4 --no_python build/demos/barrier/barrier\n";

// Parses argv; returns false (after printing why) on a bad argument.
bool parseArgs(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--no-barrier") {
      options->barrier = false;
    } else if (arg.starts_with("--delay-ms=")) {
      const std::string_view value = arg.substr(std::string_view("--delay-ms=").size());
      const auto [end, ec] =
          std::from_chars(value.data(), value.data() + value.size(), options->delayMs);
      if (ec != std::errc() || end != value.data() + value.size() || options->delayMs < 0 ||
          options->delayMs > 60000) {
        (void)std::fprintf(stderr, "barrier: --delay-ms: expected 0..60000, got '%s'\n%s",
                           std::string(value).c_str(), kUsage.data());
        return false;
      }
    } else if (arg == "--backend=tcp") {
      options->backend = rt::Backend::kTcp;
    } else if (arg == "--backend=gloo") {
      options->backend = rt::Backend::kGloo;
    } else {
      (void)std::fprintf(stderr, "barrier: unknown argument '%s'\n%s", argv[i], kUsage.data());
      return false;
    }
  }
  return true;
}

// "2025-01-01 12:00:00.412345 [INFO] rank 3/4: <message> (monotonic_ns=...)", flushed.
void logLine(const rt::Context& ctx, std::string_view message) {
  timespec mono{};
  timespec wall{};
  (void)clock_gettime(CLOCK_MONOTONIC, &mono);
  (void)clock_gettime(CLOCK_REALTIME, &wall);
  tm local{};
  (void)localtime_r(&wall.tv_sec, &local);
  char date[32] = {};
  (void)std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", &local);
  const std::int64_t monoNs =
      static_cast<std::int64_t>(mono.tv_sec) * 1000000000 + static_cast<std::int64_t>(mono.tv_nsec);
  std::printf("%s.%06ld [INFO] rank %d/%d: %.*s (monotonic_ns=%lld)\n", date, wall.tv_nsec / 1000,
              ctx.rank, ctx.worldSize, static_cast<int>(message.size()), message.data(),
              static_cast<long long>(monoNs));
  (void)std::fflush(stdout);
}

int run(const Options& options) {
  const rt::Context ctx = rt::init();
  const auto group = rt::ProcessGroup::create(ctx, options.backend);

  // Uneven work before the checkpoint: rank r is r * delay behind rank 0.
  std::this_thread::sleep_for(std::chrono::milliseconds(options.delayMs) * ctx.rank);

  if (options.barrier) {
    // A barrier is a checkpoint: no rank passes it until every rank has reached it.
    logLine(ctx, "I HAVE BARRIER DUDE! WAITING FOR ALL PROCESSES TO SYNCHRONIZE...");
    group->barrier();
  } else {
    logLine(ctx, "I HAVE NO BARRIER DUDE!");
  }
  logLine(ctx, "Results: [[1, 2, 3]]");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parseArgs(argc, argv, &options)) {
    return 2;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    (void)std::fprintf(stderr, "barrier: %s\n", e.what());
    return 1;
  }
}
