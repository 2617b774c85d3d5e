// dtrun::ddp's DistributedSampler: the shards of every rank cover the dataset, are equal in
// size, padded or cut as torch's DistributedSampler does, and identical across ranks' views of
// the same epoch.
#include <algorithm>
#include <set>
#include <vector>

#include <catch2/catch.hpp>

#include "dtrun/ddp.h"

using dtrun::ddp::DistributedSampler;
using Indices = std::vector<std::int64_t>;

TEST_CASE("shards cover the dataset, padded by repeating its head", "[unit][ddp]") {
  const std::size_t n = 10;
  const int world = 4;  // 10 samples -> 3 per rank, 2 repeated
  std::vector<std::int64_t> all;
  for (int rank = 0; rank < world; ++rank) {
    const DistributedSampler sampler(n, rank, world, /*seed=*/0, /*shuffle=*/false);
    CHECK(sampler.numSamples() == 3);
    const auto shard = sampler.indices();
    CHECK(shard.size() == 3);
    all.insert(all.end(), shard.begin(), shard.end());
  }
  CHECK(std::set<std::int64_t>(all.begin(), all.end()).size() == n);
  // Without shuffling: rank r takes r, r + world, ...; padding repeats indices 0 and 1.
  CHECK((DistributedSampler(n, 0, world, 0, false).indices() == Indices{0, 4, 8}));
  CHECK((DistributedSampler(n, 2, world, 0, false).indices() == Indices{2, 6, 0}));
  CHECK((DistributedSampler(n, 3, world, 0, false).indices() == Indices{3, 7, 1}));
}

TEST_CASE("dropLast cuts to a multiple of the world size", "[unit][ddp]") {
  const DistributedSampler sampler(10, 1, 4, 0, false, /*dropLast=*/true);
  CHECK(sampler.numSamples() == 2);
  CHECK((sampler.indices() == Indices{1, 5}));
}

TEST_CASE("shuffling is a permutation seeded by seed + epoch, the same on every rank",
          "[unit][ddp]") {
  const std::size_t n = 64;
  const int world = 2;
  std::vector<std::int64_t> epoch0;
  std::vector<std::int64_t> epoch1;
  for (int rank = 0; rank < world; ++rank) {
    DistributedSampler sampler(n, rank, world, /*seed=*/7);
    const auto a = sampler.indices();
    epoch0.insert(epoch0.end(), a.begin(), a.end());
    sampler.setEpoch(1);
    const auto b = sampler.indices();
    epoch1.insert(epoch1.end(), b.begin(), b.end());
    CHECK(DistributedSampler(n, rank, world, 7).indices() == a);  // deterministic
  }
  std::vector<std::int64_t> sorted0 = epoch0;
  std::sort(sorted0.begin(), sorted0.end());
  std::vector<std::int64_t> expected(n);
  for (std::size_t i = 0; i < n; ++i) {
    expected[i] = static_cast<std::int64_t>(i);
  }
  CHECK(sorted0 == expected);  // the two shards partition the dataset
  CHECK(epoch0 != epoch1);     // a new epoch, a new order
}
