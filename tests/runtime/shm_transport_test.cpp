// The tcp backend's transports, ranks as threads of this process: shared memory between ranks
// of one host (the default), sockets only (DTRUN_TRANSPORT=tcp), mixed jobs (DTRUN_HOST_ID makes
// "hosts" out of this one: ranks on one of them share memory, the others use sockets), small
// rings (every frame wraps, writers wait for room) and a tmpfs that cannot be used (fallback to
// TCP). Each runs the check worker's full group checks (ops_checks.h: every collective and
// p2p against exact oracles) and tcp-vs-gloo comparisons (compare_checks.h); which transport
// carried the data is read from /proc/self/maps (the rings are mappings of DTRUN_SHM_DIR files).
// Real processes (a peer killed mid-operation) are in tests/integration/runtime_test.sh.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "dtrun/runtime.h"

#include "support/scoped.h"
#include "support/test_form.h"
#include "support/test_support.h"
#include "thread_job.h"
#include "thread_rank.h"
#include "worker_runtime/compare_checks.h"
#include "worker_runtime/ops_checks.h"

namespace {

namespace rt = dtrun::runtime;
using dtrun::testing::ScopedEnv;
using dtrun::testing::TempDir;

using dtrun::testing::Check;
using dtrun::testing::failingRanks;

// Mappings of files under `dir` in this process (the rings of every rank-thread's groups).
int ringMappings(const std::string& dir) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    count += line.find(dir + "/dtrun-") != std::string::npos ? 1 : 0;
  }
  return count;
}

// Bytes ever published through the rings of the segments under `dir` mapped in this process: each
// segment starts with a 64-byte header, then the two rings' control words (256 bytes each), whose
// first word is the ring's head (shm_link.cpp's layout).
std::uint64_t ringBytesPublished(const std::string& dir) {
  std::ifstream maps("/proc/self/maps");
  std::uint64_t total = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(dir + "/dtrun-") == std::string::npos) {
      continue;
    }
    const std::uintptr_t start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    for (const std::uintptr_t control : {start + 64, start + 64 + 256}) {
      // NOLINTNEXTLINE(performance-no-int-to-ptr): an address read from /proc/self/maps
      total += reinterpret_cast<const std::atomic<std::uint64_t>*>(control)->load();
    }
  }
  return total;
}

// A transport set-up: the environment the ranks see.
struct Setup {
  const char* name;
  std::optional<std::string> transport;  // DTRUN_TRANSPORT
  std::optional<std::string> hosts;      // DTRUN_HOST_ID
  std::optional<std::string> ring;       // DTRUN_SHM_RING_BYTES
  std::optional<std::string> algo;       // DTRUN_ALLREDUCE_ALGO
  std::optional<std::string> slot;       // DTRUN_SHM_SLOT_BYTES
  std::optional<std::string> oneCopy;    // DTRUN_SHM_ONE_COPY_BYTES
};

// The ring mappings a world of `world` ranks makes under `setup` (both ends of each pair live in
// this process): pairs on one host x 2.
int expectedMappings(const Setup& s, int world) {
  if (s.transport == "tcp") {
    return 0;
  }
  if (!s.hosts) {
    return world * (world - 1);
  }
  // Hosts "a,a,b,b,...": ranks 2k and 2k+1 share one.
  int pairs = 0;
  for (int r = 0; r < world; ++r) {
    for (int q = r + 1; q < world; ++q) {
      pairs += r / 2 == q / 2 ? 1 : 0;
    }
  }
  return 2 * pairs;
}

std::string hostList(int world) {
  std::string text;
  for (int r = 0; r < world; ++r) {
    text += (r > 0 ? "," : "") + std::string(1, static_cast<char>('a' + r / 2));
  }
  return text;
}

const std::vector<Setup>& setups() {
  static const std::vector<Setup> all = {
      {"shm", std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt},
      {"tcp", "tcp", std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt},
      {"mixed (hierarchical all_reduce)", std::nullopt, "mixed", std::nullopt, std::nullopt,
       std::nullopt, std::nullopt},
      {"mixed, ring all_reduce", std::nullopt, "mixed", std::nullopt, "ring", std::nullopt,
       std::nullopt},
      {"shm, 64 KiB rings", std::nullopt, std::nullopt, "65536", std::nullopt, std::nullopt,
       std::nullopt},
      {"shm, hierarchical all_reduce on one host", std::nullopt, std::nullopt, std::nullopt, "hier",
       std::nullopt, std::nullopt},
      // The direct all_reduce: one piece for most check lengths, then many pieces and
      // remainders (64 KiB slots: the checks' 100003 elements are 2 to 13 pieces).
      {"shm, direct all_reduce", std::nullopt, std::nullopt, std::nullopt, "direct", std::nullopt,
       std::nullopt},
      {"shm, direct all_reduce, 64 KiB slots", std::nullopt, std::nullopt, std::nullopt, "direct",
       "65536", std::nullopt},
      // Forced where it cannot run: the other algorithms stand in.
      {"tcp, direct all_reduce asked for", "tcp", std::nullopt, std::nullopt, "direct",
       std::nullopt, std::nullopt},
      {"mixed, direct all_reduce asked for", std::nullopt, "mixed", std::nullopt, "direct",
       std::nullopt, std::nullopt},
      // Remote reads (one copy) for p2p from 64 KiB: the checks' long messages take that path,
      // posted before and after they arrive; from 1 MiB: the large checks' 12 MiB messages are
      // shared reads (both sides copy chunks).
      {"shm, one copy from 64 KiB", std::nullopt, std::nullopt, std::nullopt, std::nullopt,
       std::nullopt, "65536"},
      {"shm, one copy from 1 MiB", std::nullopt, std::nullopt, std::nullopt, std::nullopt,
       std::nullopt, "1048576"},
  };
  return all;
}

// Large messages through every collective and p2p (ring wrap-around, full rings, pipelined
// segments): values known exactly.
int checkLarge(dtrt_check::Reporter& report, const rt::Context& ctx) {
  const auto pg = rt::ProcessGroup::create(ctx, rt::Backend::kTcp);
  const int n = pg->size();
  const int r = pg->rank();
  constexpr std::size_t kCount = 3 * 1024 * 1024 + 13;  // 12 MiB of f32, odd
  std::vector<float> data(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    data[i] = static_cast<float>((i + static_cast<std::size_t>(r)) % 7);
  }
  pg->allReduce(rt::view(std::span<float>(data)));
  bool ok = true;
  for (std::size_t i = 0; i < kCount && ok; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) {
      want += static_cast<float>((i + static_cast<std::size_t>(q)) % 7);
    }
    ok = data[i] == want;
  }
  report.expect(ok, "large all_reduce", "wrong sum");
  std::vector<float> out(kCount, -1);
  std::vector<float> in(kCount, -1);
  for (std::size_t i = 0; i < kCount; ++i) {
    out[i] = static_cast<float>((i * 3 + static_cast<std::size_t>(r)) % 11);
  }
  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  rt::Work receiving = pg->irecv(rt::view(std::span<float>(in)), prev, 9);
  pg->send(rt::view(std::span<const float>(out)), next, 9);
  receiving.wait();
  ok = true;
  for (std::size_t i = 0; i < kCount && ok; ++i) {
    ok = in[i] == static_cast<float>((i * 3 + static_cast<std::size_t>(prev)) % 11);
  }
  report.expect(ok, "large send/recv", "wrong data from rank " + std::to_string(prev));
  std::vector<float> all(kCount / 4 * static_cast<std::size_t>(n));
  pg->allGather(rt::view(std::span<const float>(out.data(), kCount / 4)),
                rt::view(std::span<float>(all)));
  ok = true;
  for (std::size_t k = 0; k < all.size() && ok; ++k) {
    const std::size_t q = k / (kCount / 4);
    const std::size_t i = k % (kCount / 4);
    ok = all[k] == static_cast<float>((i * 3 + q) % 11);
  }
  report.expect(ok, "large all_gather", "wrong data");
  pg->barrier();
  return report.exitCode();
}

// Seeded random floats through all_reduce at sizes around the algorithm thresholds: rank 0's
// result bits, to compare between transports.
std::vector<std::uint32_t> allReduceBits(int world) {
  std::vector<std::uint32_t> bits;
  std::mutex mutex;
  const int failing = failingRanks(world, [&](dtrt_check::Reporter& report, const rt::Context& c) {
    const auto pg = rt::ProcessGroup::create(c, rt::Backend::kTcp);
    std::vector<std::uint32_t> mine;
    for (const std::size_t count : {1UL, 1000UL, 16384UL, 16385UL, 300000UL, 1100000UL}) {
      std::mt19937 gen(static_cast<unsigned>(count * 31 + static_cast<std::size_t>(c.rank)));
      std::uniform_real_distribution<float> dist(-1, 1);
      std::vector<float> v(count);
      for (auto& x : v) {
        x = dist(gen);
      }
      pg->allReduce(rt::view(std::span<float>(v)));
      for (const float x : v) {
        std::uint32_t b = 0;
        std::memcpy(&b, &x, 4);
        mine.push_back(b);
      }
    }
    if (c.rank == 0) {
      const std::lock_guard<std::mutex> lock(mutex);
      bits = std::move(mine);
    }
    return report.exitCode();
  });
  CHECK(failing == 0);
  return bits;
}

// The worlds a setup runs at: 2 to 4, or in the short form (support/test_form.h) 3 or 4 by turns,
// so that the setups of one case meet an odd and an even world.
std::vector<int> worldsOf(std::size_t setupIndex) {
  if (dtrun::testing::longForm()) {
    return {2, 3, 4};
  }
  return {3 + static_cast<int>(setupIndex % 2)};
}

// Every setup's group checks; in four test cases of a few setups each, so that ctest runs them
// beside each other and the rest (under a sanitizer one case of all the setups took 1150 s of a
// loaded CI stage, most of its length).
void checkSetups(std::size_t first, std::size_t last) {
  const TempDir dir;
  const ScopedEnv shmDir("DTRUN_SHM_DIR", dir.path().string());
  for (std::size_t i = first; i < last && i < setups().size(); ++i) {
    const Setup& s = setups()[i];
    for (const int world : worldsOf(i)) {
      const ScopedEnv transport("DTRUN_TRANSPORT", s.transport);
      const ScopedEnv hosts("DTRUN_HOST_ID",
                            s.hosts ? std::optional<std::string>(hostList(world)) : std::nullopt);
      const ScopedEnv ring("DTRUN_SHM_RING_BYTES", s.ring);
      const ScopedEnv algo("DTRUN_ALLREDUCE_ALGO", s.algo);
      const ScopedEnv slot("DTRUN_SHM_SLOT_BYTES", s.slot);
      const ScopedEnv oneCopy("DTRUN_SHM_ONE_COPY_BYTES", s.oneCopy);
      INFO(s.name << " world " << world << " (FAIL lines above name the check)");
      std::atomic<int> mapped{-1};
      CHECK(failingRanks(world, [&](dtrt_check::Reporter& report, const rt::Context& ctx) {
              int code = dtrt_check::checkGroup(report, ctx, rt::Backend::kTcp,
                                                dtrun::testing::checkForm());
              const auto pg = rt::ProcessGroup::create(ctx, rt::Backend::kTcp);
              pg->barrier();  // every rank's group is up: count the mappings of this one
              if (ctx.rank == 0) {
                mapped = ringMappings(dir.path().string());
              }
              pg->barrier();
              code |= checkLarge(report, ctx);
              return code;
            }) == 0);
      CHECK(mapped == expectedMappings(s, world));
      CHECK(ringMappings(dir.path().string()) == 0);  // groups gone: rings unmapped
    }
  }
}

}  // namespace

TEST_CASE("the group checks pass over shm and tcp, worlds 2 to 4", "[runtime][shm]") {
  checkSetups(0, 2);
}

TEST_CASE("the group checks pass over mixed hosts and small rings, worlds 2 to 4",
          "[runtime][shm]") {
  checkSetups(2, 5);
}

TEST_CASE("the group checks pass with the hierarchical and direct all_reduce, worlds 2 to 4",
          "[runtime][shm]") {
  checkSetups(5, 8);
}

TEST_CASE("the group checks pass with direct all_reduce asked for where it cannot run",
          "[runtime][shm]") {
  checkSetups(8, 10);
}

TEST_CASE("the group checks pass with p2p by remote reads", "[runtime][shm]") {
  checkSetups(10, 12);
  CHECK(setups().size() == 12);  // a setup added past these five cases needs a case of its own
}

TEST_CASE("with DTRUN_SHM_ONE_COPY_BYTES large p2p messages move once, skipping the ring",
          "[runtime][shm]") {
  constexpr std::size_t kCount = 2 * 1024 * 1024;  // 8 MiB of f32
  constexpr int kMessages = 3;
  for (const bool oneCopy : {true, false}) {
    const TempDir dir;
    const ScopedEnv shmDir("DTRUN_SHM_DIR", dir.path().string());
    const ScopedEnv transport("DTRUN_TRANSPORT", std::nullopt);
    const ScopedEnv setting("DTRUN_SHM_ONE_COPY_BYTES",
                            oneCopy ? std::optional<std::string>("1048576") : std::nullopt);
    INFO((oneCopy ? "DTRUN_SHM_ONE_COPY_BYTES=1048576" : "the default: through the rings"));
    std::atomic<std::uint64_t> ringBytes{0};
    CHECK(failingRanks(2, [&](dtrt_check::Reporter& report, const rt::Context& ctx) {
            const auto pg = rt::ProcessGroup::create(ctx, rt::Backend::kTcp);
            std::vector<float> data(kCount);
            bool ok = true;
            for (int m = 0; m < kMessages; ++m) {
              if (ctx.rank == 0) {
                for (std::size_t i = 0; i < kCount; ++i) {
                  data[i] = static_cast<float>((i + static_cast<std::size_t>(m)) % 1009);
                }
                pg->send(rt::view(std::span<float>(data)), 1, m);
              } else {
                std::fill(data.begin(), data.end(), -1.0F);
                pg->recv(rt::view(std::span<float>(data)), 0, m);
                for (std::size_t i = 0; i < kCount && ok; ++i) {
                  ok = data[i] == static_cast<float>((i + static_cast<std::size_t>(m)) % 1009);
                }
              }
            }
            report.expect(ok, "8 MiB p2p", "wrong data");
            pg->barrier();
            if (ctx.rank == 0) {
              ringBytes = ringBytesPublished(dir.path().string());
            }
            pg->barrier();
            return report.exitCode();
          }) == 0);
    // Both ends of the pair's segment are mapped here: every ring byte is counted twice.
    const std::uint64_t messages = 2ULL * kMessages * kCount * sizeof(float);
    if (oneCopy) {
      CHECK(ringBytes < std::uint64_t{1} << 20U);
    } else {
      CHECK(ringBytes >= messages);
    }
  }
}

TEST_CASE("over shm and mixed hosts, tcp agrees with gloo on random data", "[runtime][shm]") {
  // World 2 of "mixed" hosts is one host, as shm: the short form keeps world 4 only.
  const std::vector<int> worlds =
      dtrun::testing::longForm() ? std::vector<int>{2, 4} : std::vector<int>{4};
  for (const bool mixed : {false, true}) {
    for (const int world : worlds) {
      const ScopedEnv hosts("DTRUN_HOST_ID",
                            mixed ? std::optional<std::string>(hostList(world)) : std::nullopt);
      INFO((mixed ? "mixed" : "shm") << " world " << world);
      CHECK(failingRanks(world, dtrt_check::checkCompare) == 0);
    }
  }
}

TEST_CASE("all_reduce gives the same bits over shm, tcp and mixed hosts, per algorithm",
          "[runtime][shm]") {
  // The transport must not change a result; the algorithm may (another summation order), so
  // each is compared with itself. Mixed hosts' default, hierarchical, is compared with the
  // hierarchical algorithm over sockets with the same hosts; against gloo above. Not "auto": on
  // one host it picks the direct all_reduce for large messages over shared memory only.
  for (const char* algorithm : {"doubling", "ring", "hier"}) {
    const ScopedEnv algo("DTRUN_ALLREDUCE_ALGO", algorithm);
    for (int world = 3; world <= 4; ++world) {
      INFO(algorithm << " world " << world);
      std::vector<std::uint32_t> overTcp;
      std::vector<std::uint32_t> overShm;
      {
        const ScopedEnv transport("DTRUN_TRANSPORT", "tcp");
        overTcp = allReduceBits(world);
      }
      overShm = allReduceBits(world);
      CHECK(!overTcp.empty());
      CHECK(overShm == overTcp);
      const ScopedEnv hosts("DTRUN_HOST_ID", hostList(world));
      std::vector<std::uint32_t> mixedTcp;
      {
        const ScopedEnv transport("DTRUN_TRANSPORT", "tcp");
        mixedTcp = allReduceBits(world);
      }
      CHECK(allReduceBits(world) == mixedTcp);
      if (std::string(algorithm) == "doubling" || std::string(algorithm) == "ring") {
        CHECK(mixedTcp == overTcp);  // flat algorithms ignore the hosts
      }
    }
  }
}

TEST_CASE("the direct all_reduce sums in rank order: exact bits on every rank, any size",
          "[runtime][shm]") {
  // Rank r's data is generated from r, so each rank can compute the expected result itself:
  // ((x0 + x1) + x2) + x3 in float, which is the direct all_reduce's order. In place, in pieces
  // (64 KiB slots: 16384 floats), with remainders and sizes not divisible by the rank count.
  const ScopedEnv algo("DTRUN_ALLREDUCE_ALGO", "direct");
  const ScopedEnv slot("DTRUN_SHM_SLOT_BYTES", "65536");
  auto valuesOf = [](int rank, std::size_t count) {
    std::mt19937 gen(static_cast<unsigned>(count * 131 + static_cast<std::size_t>(rank)));
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<float> v(count);
    for (auto& x : v) {
      x = dist(gen);
    }
    return v;
  };
  for (int world = 2; world <= 4; ++world) {
    INFO("world " << world);
    CHECK(failingRanks(world, [&](dtrt_check::Reporter& report, const rt::Context& c) {
            const auto pg = rt::ProcessGroup::create(c, rt::Backend::kTcp);
            for (const std::size_t count :
                 {0UL, 1UL, 3UL, 17UL, 16383UL, 16384UL, 16385UL, 3 * 16384UL + 5, 200003UL}) {
              std::vector<float> v = valuesOf(c.rank, count);
              pg->allReduce(rt::view(std::span<float>(v)));
              std::vector<float> want = valuesOf(0, count);
              for (int q = 1; q < world; ++q) {
                const std::vector<float> theirs = valuesOf(q, count);
                for (std::size_t i = 0; i < count; ++i) {
                  want[i] += theirs[i];
                }
              }
              report.expect(
                  count == 0 || std::memcmp(v.data(), want.data(), count * sizeof(float)) == 0,
                  "direct all_reduce of " + std::to_string(count) + " floats",
                  "not the rank-order sum" + [&] {
                    for (std::size_t i = 0; i < count; ++i) {
                      if (v[i] != want[i]) {
                        return " (rank " + std::to_string(c.rank) + " element " +
                               std::to_string(i) + ": " + std::to_string(v[i]) + " want " +
                               std::to_string(want[i]) + ")";
                      }
                    }
                    return std::string();
                  }());
            }
            return report.exitCode();
          }) == 0);
  }
}

TEST_CASE("all_gather by doubling (Bruck's) and ring, forced and auto: exact data, worlds 1 to 4",
          "[runtime][shm]") {
  // kAllGatherDoublingBelow (tcp_algorithm_choice.cpp): auto switches to the ring at this many
  // bytes of output; the sizes below straddle it, so "auto" runs both algorithms. Keep in step.
  constexpr std::size_t kThreshold = std::size_t{32} << 10U;
  auto valueOf = [](int rank, std::size_t i) {
    return static_cast<float>((static_cast<std::size_t>(rank) * 7919 + i) % 65521);
  };
  for (const char* algorithm : {"doubling", "ring", "auto"}) {
    const ScopedEnv algo("DTRUN_ALLGATHER_ALGO", algorithm);
    for (const bool sockets : {false, true}) {
      const ScopedEnv transport("DTRUN_TRANSPORT",
                                sockets ? std::optional<std::string>("tcp") : std::nullopt);
      for (int world = 1; world <= 4; ++world) {
        INFO(algorithm << (sockets ? " over sockets" : " over shm") << " world " << world);
        const std::size_t around = kThreshold / sizeof(float) / static_cast<std::size_t>(world);
        CHECK(failingRanks(world, [&](dtrt_check::Reporter& report, const rt::Context& c) {
                const auto pg = rt::ProcessGroup::create(c, rt::Backend::kTcp);
                const auto n = static_cast<std::size_t>(world);
                // Per-rank counts: none, tiny, around the threshold, several ring segments.
                for (const std::size_t count :
                     {0UL, 1UL, 3UL, 1000UL, around - 1, around, around + 1, 200003UL}) {
                  for (const bool inPlace : {false, true}) {
                    std::vector<float> out(count * n, -1.0F);
                    std::vector<float> own(count);
                    for (std::size_t i = 0; i < count; ++i) {
                      own[i] = valueOf(c.rank, i);
                    }
                    float* block = out.data() + static_cast<std::size_t>(c.rank) * count;
                    if (inPlace) {  // `in` is this rank's block of `out`
                      std::copy(own.begin(), own.end(), block);
                    }
                    const std::span<const float> in(inPlace ? block : own.data(), count);
                    pg->allGather(rt::view(in), rt::view(std::span<float>(out)));
                    std::size_t bad = out.size();
                    for (std::size_t k = 0; k < out.size() && bad == out.size(); ++k) {
                      bad = out[k] == valueOf(static_cast<int>(k / count), k % count) ? bad : k;
                    }
                    report.expect(bad == out.size(),
                                  "all_gather of " + std::to_string(count) + " floats per rank" +
                                      (inPlace ? ", in place" : ""),
                                  "wrong element " + std::to_string(bad) + " on rank " +
                                      std::to_string(c.rank));
                  }
                }
                return report.exitCode();
              }) == 0);
      }
    }
  }
}

TEST_CASE("a tmpfs that cannot hold the rings leaves the pairs on tcp, and they work",
          "[runtime][shm]") {
  const TempDir dir;
  const ScopedEnv shmDir("DTRUN_SHM_DIR", (dir.path() / "missing").string());
  std::atomic<int> mapped{-1};
  CHECK(failingRanks(3, [&](dtrt_check::Reporter& report, const rt::Context& ctx) {
          const auto pg = rt::ProcessGroup::create(ctx, rt::Backend::kTcp);
          pg->barrier();
          if (ctx.rank == 0) {
            mapped = ringMappings(dir.path().string());
          }
          pg->barrier();
          return checkLarge(report, ctx);
        }) == 0);
  CHECK(mapped == 0);
}

TEST_CASE(
    "bad DTRUN_TRANSPORT, DTRUN_SHM_RING_BYTES, DTRUN_SHM_SLOT_BYTES, DTRUN_ALLREDUCE_ALGO, "
    "DTRUN_ALLGATHER_ALGO are refused, naming it",
    "[runtime][shm]") {
  for (const auto& setting :
       std::vector<std::pair<std::string, std::string>>{{"DTRUN_TRANSPORT", "infiniband"},
                                                        {"DTRUN_SHM_RING_BYTES", "1000"},
                                                        {"DTRUN_SHM_SLOT_BYTES", "3000000"},
                                                        {"DTRUN_ALLREDUCE_ALGO", "butterfly"},
                                                        {"DTRUN_ALLGATHER_ALGO", "butterfly"}}) {
    const std::string name = setting.first;
    const ScopedEnv bad(name, setting.second);
    std::atomic<int> refused{0};
    failingRanks(2, [&](dtrt_check::Reporter& report, const rt::Context& ctx) {
      try {
        const auto pg = rt::ProcessGroup::create(ctx, rt::Backend::kTcp);
      } catch (const rt::ConfigError& e) {
        refused += std::string(e.what()).find(name) != std::string::npos ? 1 : 0;
      } catch (const rt::Error&) {
        // The peer that refused first closes its socket: the other may see that instead.
      }
      return report.exitCode();
    });
    CHECK(refused >= 1);
  }
}
