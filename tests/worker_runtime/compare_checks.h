// tcp against gloo on the same seeded random data: what exact oracles cannot check (float
// results of another summation order agree within rounding; integers agree bitwise).
// Header-only, internal to the tests: tests/runtime/group_checks_test.cpp runs it with ranks as
// threads (world sizes 2 and 3), as the check worker's "compare" mode once did under dtrun.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dtrun/runtime.h"

#include "check_values.h"
#include "ops_checks.h"

namespace dtrt_check {

// Seeded random values for rank r: integers small enough that no reduction overflows.
inline std::vector<double> randomValues(rt::DataType t, bool forProd, std::uint64_t seed, int r,
                                        std::size_t n) {
  std::mt19937_64 gen(seed * 7919 + static_cast<std::uint64_t>(r));
  std::vector<double> v(n);
  for (auto& x : v) {
    const std::uint64_t h = gen();
    if (isFloat(t)) {
      x = std::uniform_real_distribution<double>(-1.0, 1.0)(gen);
    } else if (t == rt::DataType::kUInt8) {
      x = static_cast<double>(h % (forProd ? 4 : 50));
    } else {
      x = forProd ? static_cast<double>(h % 9) - 4 : static_cast<double>(h % 20001) - 10000;
    }
  }
  return v;
}

// Seeded random data (all dtypes x ReduceOps, lengths 7 and 100003) through a tcp and a gloo
// group of `ctx`: integer results bitwise equal, floats within (n + 1) roundings; and a second
// tcp world group beside the first. The exact checks are checkGroup's (ops_checks.h); this one
// catches what exactly representable values cannot (summation order, rounding of halves).
inline int checkCompare(Reporter& report, const rt::Context& ctx) {
  std::unique_ptr<rt::ProcessGroup> tcp;
  std::unique_ptr<rt::ProcessGroup> gloo;
  guarded(report, "compare create tcp",
          [&] { tcp = rt::ProcessGroup::create(ctx, rt::Backend::kTcp); });
  guarded(report, "compare create gloo",
          [&] { gloo = rt::ProcessGroup::create(ctx, rt::Backend::kGloo); });
  if (!tcp || !gloo) {
    return 1;
  }
  // A second world group of one backend in one process gets keys of its own and works beside
  // the first (both used to bootstrap under one name and collided).
  guarded(report, "compare second tcp world group", [&] {
    const auto second = rt::ProcessGroup::create(ctx, rt::Backend::kTcp);
    Mem m(rt::DataType::kInt64, 3, false);
    m.write(encodeAll(rt::DataType::kInt64, std::vector<double>(3, ctx.rank + 1)));
    second->allReduce(m.buffer());
    const double size = ctx.worldSize;
    report.expect(
        mismatch(rt::DataType::kInt64, m.read(), std::vector<double>(3, size * (size + 1) / 2), 0)
            .empty(),
        "compare second tcp world group", "all_reduce on the second group is wrong");
  });
  const int n = ctx.worldSize;
  const auto un = static_cast<std::size_t>(n);
  // Runs `op` on a copy of the inputs through both groups and compares the outputs.
  using Op = std::function<void(rt::ProcessGroup&, Mem & in, Mem & out)>;
  const auto both = [&](const std::string& name, rt::DataType t, std::size_t inCount,
                        std::size_t outCount, const Bytes& input, const Op& op, bool compareOut) {
    std::optional<Bytes> results[2];
    rt::ProcessGroup* groups[2] = {tcp.get(), gloo.get()};
    for (int g = 0; g < 2; ++g) {
      try {
        Mem in(t, inCount, false);
        Mem out(t, outCount, false);
        in.write(input);
        out.fill(std::byte{0});
        op(*groups[g], in, out);
        results[g] = compareOut ? out.read() : in.read();
      } catch (const rt::ConfigError& e) {
        if (!isHalf(t)) {
          report.fail(name, std::string(g == 0 ? "tcp" : "gloo") + ": ConfigError: " + e.what());
          return;
        }
        report.skip(name, std::string(g == 0 ? "tcp" : "gloo") + ": ConfigError: " + e.what());
        return;
      } catch (const rt::Error& e) {
        report.fail(name, std::string(g == 0 ? "tcp: " : "gloo: ") + e.what());
        std::_Exit(1);  // the group may be broken: no destructors
      }
    }
    const Bytes& a = *results[0];
    const Bytes& b = *results[1];
    if (!isFloat(t)) {
      report.expect(a == b, name, "tcp and gloo results are not bitwise equal");
      return;
    }
    // Floats: summation order may differ; allow (n + 1) roundings of the result's magnitude.
    const double eps = t == rt::DataType::kFloat32   ? 1.2e-7
                       : t == rt::DataType::kFloat64 ? 2.3e-16
                       : t == rt::DataType::kFloat16 ? 9.8e-4
                                                     : 7.9e-3;
    std::vector<double> expected(a.size() / rt::elementSize(t));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      expected[i] = decode(t, a, i);
    }
    const auto why = mismatch(t, b, expected, 2.0 * (n + 1) * eps);
    report.expect(why.empty(), name, "gloo vs tcp: " + why);
  };
  std::uint64_t seed = 1;
  for (const rt::DataType t : kAllTypes) {
    const std::string ty = rt::dataTypeName(t);
    for (const std::size_t len : {std::size_t{7}, std::size_t{100003}}) {
      const std::string at = " " + ty + " length " + std::to_string(len);
      for (const rt::ReduceOp op : kAllOps) {
        const bool prod = op == rt::ReduceOp::kProd;
        const Bytes data = encodeAll(t, randomValues(t, prod, ++seed, ctx.rank, len));
        const std::string on = at + " " + rt::reduceOpName(op);
        both(
            "compare all_reduce" + on, t, len, 1, data,
            [op](rt::ProcessGroup& g, Mem& in, Mem&) { g.allReduce(in.buffer(), op); }, false);
        both(
            "compare reduce root 0" + on, t, len, 1, data,
            [op](rt::ProcessGroup& g, Mem& in, Mem& out) {
              g.reduce(in.buffer(), 0, op);
              if (g.rank() != 0) {  // non-roots: unspecified, compare nothing
                out.fill(std::byte{0});
                in.write(Bytes(in.buffer().bytes(), std::byte{0}));
              }
            },
            false);
        const Bytes wide = encodeAll(t, randomValues(t, prod, ++seed, ctx.rank, len * un));
        both(
            "compare reduce_scatter" + on, t, len * un, len, wide,
            [op](rt::ProcessGroup& g, Mem& in, Mem& out) {
              g.reduceScatter(in.buffer(), out.buffer(), op);
            },
            true);
      }
      const Bytes data = encodeAll(t, randomValues(t, false, ++seed, ctx.rank, len));
      const Bytes wide = encodeAll(t, randomValues(t, false, ++seed, ctx.rank, len * un));
      both(
          "compare broadcast root " + std::to_string(n - 1) + at, t, len, 1, data,
          [n](rt::ProcessGroup& g, Mem& in, Mem&) { g.broadcast(in.buffer(), n - 1); }, false);
      both(
          "compare all_gather" + at, t, len, len * un, data,
          [](rt::ProcessGroup& g, Mem& in, Mem& out) { g.allGather(in.buffer(), out.buffer()); },
          true);
      both(
          "compare all_to_all" + at, t, len * un, len * un, wide,
          [](rt::ProcessGroup& g, Mem& in, Mem& out) { g.allToAll(in.buffer(), out.buffer()); },
          true);
      both(
          "compare scatter root 0" + at, t, len * un, len, wide,
          [](rt::ProcessGroup& g, Mem& in, Mem& out) { g.scatter(in.buffer(), out.buffer(), 0); },
          true);
    }
  }
  guarded(report, "compare final barriers", [&] {
    tcp->barrier();
    gloo->barrier();
  });
  report.pass("compare all checks ran");
  return report.exitCode();
}

}  // namespace dtrt_check
