// collectives_bench: libdtrt's all_reduce, barrier and send/recv figures, one process per rank
// under dtrun. Prints figures, asserts nothing; bench/collectives/run.sh runs it next to torch
// 1.13's gloo (torch_collectives.py, the same measurements) and prints one table.
// Usage:
//   dtrun --nproc_per_node=2 --no_python build/bench/collectives/collectives_bench --backend tcp
//     [--label shm] [--min-bytes 4096] [--max-bytes 67108864] [--factor 4] [--no-p2p]
//     [--algo-sweep [--sweep-op all_reduce|all_gather]]
// --label names the implementation in the output (run.sh: "shm" for the tcp backend with its
// default transport, "tcp" under DTRUN_TRANSPORT=tcp). --algo-sweep measures all_reduce once per
// algorithm the tcp backend has (DTRUN_ALLREDUCE_ALGO=doubling, ring, hier, and direct unless
// DTRUN_TRANSPORT=tcp: one group each), printed as impl=<label>/<algo>: the thresholds in
// tcp_algorithm_choice.cpp come from these; then all_gather once per algorithm
// (DTRUN_ALLGATHER_ALGO=ring, doubling), bytes being the output's size (every rank's block: the
// per-rank block is bytes / n, rounded down to whole floats; the line gives the bytes moved).
// --sweep-op limits the sweep to one of the two. Rank 0 prints one line per measurement:
//   result impl=tcp n=2 op=all_reduce bytes=4096 iters=200 median_us=21.4 algbw_GBps=0.191
//   busbw_GBps=0.191
// all_reduce is sum over f32; each iteration is timed on every rank and the iteration's time is
// the slowest rank's; median over iterations after warm-up. algbw = bytes / time, busbw = algbw x
// 2(n-1)/n (nccl-tests). barrier: median per barrier. sendrecv_lat: half a ping-pong round trip
// of 8 bytes between ranks 0 and 1. sendrecv_bw: 64 MiB from rank 0 to rank 1 plus a 4-byte
// acknowledgement, bytes / time.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "dtrun/runtime.h"

namespace rt = dtrun::runtime;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  rt::Backend backend = rt::Backend::kTcp;
  std::string name = "tcp";
  std::size_t minBytes = 4096;
  std::size_t maxBytes = std::size_t{64} << 20U;
  std::size_t factor = 4;
  bool p2p = true;
  bool algoSweep = false;
  std::string sweepOp;  // --sweep-op: all_reduce or all_gather; empty: both
};

// The same schedule as torch_collectives.py: more iterations for small messages.
int iterationsFor(std::size_t bytes) {
  const auto byVolume =
      static_cast<long long>((std::size_t{1} << 30U) / std::max<std::size_t>(bytes, 1));
  return static_cast<int>(std::clamp<long long>(byVolume, 10, 200));
}
int warmupFor(std::size_t bytes) { return bytes >= (std::size_t{16} << 20U) ? 2 : 10; }

double microsecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Per-iteration times of every rank -> per-iteration maximum -> median.
double slowestRankMedian(rt::ProcessGroup& pg, const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * static_cast<std::size_t>(pg.size()));
  pg.allGather(rt::view(std::span<const double>(mine)), rt::view(std::span<double>(all)));
  std::vector<double> worst(mine.size(), 0);
  for (std::size_t r = 0; r < static_cast<std::size_t>(pg.size()); ++r) {
    for (std::size_t i = 0; i < mine.size(); ++i) {
      worst[i] = std::max(worst[i], all[r * mine.size() + i]);
    }
  }
  std::nth_element(worst.begin(), worst.begin() + static_cast<std::ptrdiff_t>(worst.size() / 2),
                   worst.end());
  return worst[worst.size() / 2];
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void print(const Options& o, int n, const char* op, std::size_t bytes, int iters, double us,
           double busFactor) {
  const double algbw = us > 0 ? static_cast<double>(bytes) / (us * 1e3) : 0;  // GB/s
  std::printf(
      "result impl=%s n=%d op=%s bytes=%zu iters=%d median_us=%.3f algbw_GBps=%.4f "
      "busbw_GBps=%.4f\n",
      o.name.c_str(), n, op, bytes, iters, us, algbw, algbw * busFactor);
  (void)std::fflush(stdout);
}

void benchAllReduce(const Options& o, rt::ProcessGroup& pg) {
  const int n = pg.size();
  for (std::size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= o.factor) {
    std::vector<float> data(bytes / sizeof(float), 1.0F);
    const rt::Buffer buf = rt::view(std::span<float>(data));
    const int iters = iterationsFor(bytes);
    for (int i = 0; i < warmupFor(bytes); ++i) {
      pg.allReduce(buf);
      std::fill(data.begin(), data.end(), 1.0F);  // keep values finite
    }
    std::vector<double> times;
    pg.barrier();
    for (int i = 0; i < iters; ++i) {
      const auto start = Clock::now();
      pg.allReduce(buf);
      times.push_back(microsecondsSince(start));
      if (i % 16 == 15) {
        std::fill(data.begin(), data.end(), 1.0F);
      }
    }
    const double us = slowestRankMedian(pg, times);
    if (pg.rank() == 0) {
      print(o, n, "all_reduce", bytes, iters, us, 2.0 * (n - 1) / n);
    }
  }
}

// all_gather of `bytes` in all (bytes / n per rank, whole floats); busbw = algbw x (n-1)/n.
void benchAllGather(const Options& o, rt::ProcessGroup& pg) {
  const int n = pg.size();
  for (std::size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= o.factor) {
    const std::size_t block = bytes / sizeof(float) / static_cast<std::size_t>(n);
    std::vector<float> in(block, 1.0F);
    std::vector<float> out(block * static_cast<std::size_t>(n));
    const rt::Buffer src = rt::view(std::span<const float>(in));
    const rt::Buffer dst = rt::view(std::span<float>(out));
    const int iters = iterationsFor(bytes);
    for (int i = 0; i < warmupFor(bytes); ++i) {
      pg.allGather(src, dst);
    }
    std::vector<double> times;
    pg.barrier();
    for (int i = 0; i < iters; ++i) {
      const auto start = Clock::now();
      pg.allGather(src, dst);
      times.push_back(microsecondsSince(start));
    }
    const double us = slowestRankMedian(pg, times);
    if (pg.rank() == 0) {
      print(o, n, "all_gather", dst.bytes(), iters, us, static_cast<double>(n - 1) / n);
    }
  }
}

void benchBarrier(const Options& o, rt::ProcessGroup& pg) {
  constexpr int kIters = 1000;
  for (int i = 0; i < 50; ++i) {
    pg.barrier();
  }
  std::vector<double> times;
  for (int i = 0; i < kIters; ++i) {
    const auto start = Clock::now();
    pg.barrier();
    times.push_back(microsecondsSince(start));
  }
  const double us = slowestRankMedian(pg, times);
  if (pg.rank() == 0) {
    print(o, pg.size(), "barrier", 0, kIters, us, 0);
  }
}

void benchSendRecv(const Options& o, rt::ProcessGroup& pg) {
  const int me = pg.rank();
  if (me <= 1) {
    // Latency: ping-pong of 8 bytes; one-way = round trip / 2.
    constexpr int kIters = 1000;
    std::vector<float> small(2, 1.0F);
    const rt::Buffer s = rt::view(std::span<float>(small));
    std::vector<double> rtts;
    for (int i = 0; i < 100 + kIters; ++i) {
      const auto start = Clock::now();
      if (me == 0) {
        pg.send(s, 1);
        pg.recv(s, 1);
      } else {
        pg.recv(s, 0);
        pg.send(s, 0);
      }
      if (i >= 100) {
        rtts.push_back(microsecondsSince(start) / 2);
      }
    }
    // Bandwidth: 64 MiB one way, 4-byte acknowledgement back.
    const std::size_t bytes = std::size_t{64} << 20U;
    std::vector<float> big(bytes / sizeof(float), 1.0F);
    const rt::Buffer b = rt::view(std::span<float>(big));
    std::vector<float> ack(1, 0.0F);
    const rt::Buffer a = rt::view(std::span<float>(ack));
    constexpr int kBwIters = 10;
    std::vector<double> times;
    for (int i = 0; i < 2 + kBwIters; ++i) {
      const auto start = Clock::now();
      if (me == 0) {
        pg.send(b, 1, 5);
        pg.recv(a, 1, 6);
      } else {
        pg.recv(b, 0, 5);
        pg.send(a, 0, 6);
      }
      if (i >= 2) {
        times.push_back(microsecondsSince(start));
      }
    }
    if (me == 0) {
      print(o, pg.size(), "sendrecv_lat", 8, kIters, median(rtts), 0);
      print(o, pg.size(), "sendrecv_bw", bytes, kBwIters, median(times), 1);
    }
  }
  pg.barrier();
}

bool parse(int argc, char** argv, Options& o) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool hasValue = i + 1 < args.size();
    if (a == "--backend" && hasValue) {
      o.name = args[++i];
      if (o.name == "tcp") {
        o.backend = rt::Backend::kTcp;
      } else if (o.name == "gloo") {
        o.backend = rt::Backend::kGloo;
      } else {
        (void)std::fprintf(stderr, "collectives_bench: --backend: expected tcp or gloo, got '%s'\n",
                           o.name.c_str());
        return false;
      }
    } else if ((a == "--min-bytes" || a == "--max-bytes" || a == "--factor") && hasValue) {
      const std::size_t v = std::strtoull(args[++i].c_str(), nullptr, 10);
      if (v < (a == "--factor" ? 2U : 4U)) {
        (void)std::fprintf(stderr, "collectives_bench: %s: expected a number >= %s\n", a.c_str(),
                           a == "--factor" ? "2" : "4");
        return false;
      }
      (a == "--min-bytes" ? o.minBytes : a == "--max-bytes" ? o.maxBytes : o.factor) = v;
    } else if (a == "--no-p2p") {
      o.p2p = false;
    } else if (a == "--label" && hasValue) {
      o.name = args[++i];
    } else if (a == "--algo-sweep") {
      o.algoSweep = true;
    } else if (a == "--sweep-op" && hasValue &&
               (args[i + 1] == "all_reduce" || args[i + 1] == "all_gather")) {
      o.sweepOp = args[++i];
    } else {
      (void)std::fprintf(
          stderr,
          "usage: collectives_bench --backend tcp|gloo [--label NAME] [--min-bytes B] "
          "[--max-bytes B] [--factor F] [--no-p2p] [--algo-sweep [--sweep-op "
          "all_reduce|all_gather]]"
          "   (run under dtrun)\n");
      return false;
    }
  }
  return true;
}

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    return 2;
  }
  const rt::Context ctx = rt::init();
  if (o.algoSweep) {
    const std::string label = o.name;
    // NOLINTNEXTLINE(concurrency-mt-unsafe): this program has one thread
    const char* transport = std::getenv("DTRUN_TRANSPORT");
    const bool sockets = transport != nullptr && std::string(transport) == "tcp";
    for (const char* algo : {"doubling", "ring", "hier", "direct"}) {
      if (o.sweepOp == "all_gather" || (sockets && std::string(algo) == "direct")) {
        continue;  // shared memory only: it would fall back to the others
      }
      // Read when a group is created; this program has one thread.
      ::setenv("DTRUN_ALLREDUCE_ALGO", algo, 1);  // NOLINT(concurrency-mt-unsafe)
      auto pg = rt::ProcessGroup::create(ctx, o.backend);
      o.name = label + "/" + algo;
      benchAllReduce(o, *pg);
      pg->barrier();
    }
    ::unsetenv("DTRUN_ALLREDUCE_ALGO");  // NOLINT(concurrency-mt-unsafe): as above
    for (const char* algo : {"ring", "doubling"}) {
      if (o.sweepOp == "all_reduce") {
        break;
      }
      ::setenv("DTRUN_ALLGATHER_ALGO", algo, 1);  // NOLINT(concurrency-mt-unsafe): as above
      auto pg = rt::ProcessGroup::create(ctx, o.backend);
      o.name = label + "/" + algo;
      benchAllGather(o, *pg);
      pg->barrier();
    }
    return 0;
  }
  auto pg = rt::ProcessGroup::create(ctx, o.backend);
  benchAllReduce(o, *pg);
  benchBarrier(o, *pg);
  if (o.p2p && pg->size() >= 2) {
    benchSendRecv(o, *pg);
  }
  pg->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    (void)std::fprintf(stderr, "collectives_bench: %s\n", e.what());
    return 1;
  }
}
