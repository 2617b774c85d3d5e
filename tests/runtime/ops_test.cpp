// libdtrt's operations in one process: every rank is a thread that joins an in-process store
// through init(Membership) (the test seam), as gloo's own tests do. Every operation of
// ProcessGroup, on every CPU backend, world sizes 1..8, every dtype (f16/bf16 reductions
// included) and odd sizes, checked exactly: the values are small integers, exact in every dtype.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "dtrun/runtime.h"

#include "support/test_support.h"
#include "thread_rank.h"

namespace rt = dtrun::runtime;
using namespace std::chrono_literals;

namespace {

constexpr std::array kDtypes = {
    rt::DataType::kFloat32, rt::DataType::kFloat64, rt::DataType::kInt32,   rt::DataType::kInt64,
    rt::DataType::kUInt8,   rt::DataType::kFloat16, rt::DataType::kBFloat16};
constexpr std::array kReduceOps = {rt::ReduceOp::kSum, rt::ReduceOp::kProd, rt::ReduceOp::kMin,
                                   rt::ReduceOp::kMax, rt::ReduceOp::kAvg};

// ---- typed buffers of exactly representable values ----

std::uint16_t halfBits(float v) {  // exact for the small integers used here
  std::uint32_t f = 0;
  std::memcpy(&f, &v, 4);
  const std::uint32_t sign = (f >> 16U) & 0x8000U;
  if ((f & 0x7fffffffU) == 0) {
    return static_cast<std::uint16_t>(sign);
  }
  const std::uint32_t exponent = ((f >> 23U) & 0xffU) - 127U + 15U;
  return static_cast<std::uint16_t>(sign | (exponent << 10U) | ((f >> 13U) & 0x3ffU));
}

float fromHalfBits(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000U) << 16U;
  const std::uint32_t exponent = (h >> 10U) & 0x1fU;
  const std::uint32_t mantissa = h & 0x3ffU;
  if (exponent == 0 && mantissa == 0) {
    float out = 0;
    std::memcpy(&out, &sign, 4);
    return out;
  }
  const std::uint32_t f = sign | ((exponent - 15U + 127U) << 23U) | (mantissa << 13U);
  float out = 0;
  std::memcpy(&out, &f, 4);
  return out;
}

class Data {
 public:
  Data(rt::DataType type, std::size_t count)
      : type_(type),
        bytes_(std::max<std::size_t>(1, count * rt::elementSize(type))),
        count_(count) {}

  void set(std::size_t i, double v) {
    char* at = bytes_.data() + i * rt::elementSize(type_);
    switch (type_) {
      case rt::DataType::kFloat32:
        put(at, static_cast<float>(v));
        break;
      case rt::DataType::kFloat64:
        put(at, v);
        break;
      case rt::DataType::kInt32:
        put(at, static_cast<std::int32_t>(v));
        break;
      case rt::DataType::kInt64:
        put(at, static_cast<std::int64_t>(v));
        break;
      case rt::DataType::kUInt8:
        put(at, static_cast<std::uint8_t>(v));
        break;
      case rt::DataType::kFloat16:
        put(at, halfBits(static_cast<float>(v)));
        break;
      case rt::DataType::kBFloat16: {
        const float f = static_cast<float>(v);
        std::uint32_t bits = 0;
        std::memcpy(&bits, &f, 4);
        put(at, static_cast<std::uint16_t>(bits >> 16U));
        break;
      }
    }
  }

  [[nodiscard]] double get(std::size_t i) const {
    const char* at = bytes_.data() + i * rt::elementSize(type_);
    switch (type_) {
      case rt::DataType::kFloat32:
        return take<float>(at);
      case rt::DataType::kFloat64:
        return take<double>(at);
      case rt::DataType::kInt32:
        return take<std::int32_t>(at);
      case rt::DataType::kInt64:
        return static_cast<double>(take<std::int64_t>(at));
      case rt::DataType::kUInt8:
        return take<std::uint8_t>(at);
      case rt::DataType::kFloat16:
        return fromHalfBits(take<std::uint16_t>(at));
      case rt::DataType::kBFloat16: {
        const std::uint32_t bits = static_cast<std::uint32_t>(take<std::uint16_t>(at)) << 16U;
        float f = 0;
        std::memcpy(&f, &bits, 4);
        return f;
      }
    }
    return 0;
  }

  [[nodiscard]] rt::Buffer buffer() {
    return rt::Buffer{count_ == 0 ? nullptr : bytes_.data(), count_, type_};
  }
  [[nodiscard]] std::size_t count() const { return count_; }

 private:
  template <typename T>
  static void put(char* at, T v) {
    std::memcpy(at, &v, sizeof v);
  }
  template <typename T>
  static T take(const char* at) {
    T v{};
    std::memcpy(&v, at, sizeof v);
    return v;
  }

  rt::DataType type_;
  std::vector<char> bytes_;
  std::size_t count_;
};

// Rank r's i-th value: 1..5, so a sum over 8 ranks stays exact in u8 and bf16.
double valueOf(int r, std::size_t i) { return static_cast<double>((r * 7 + i) % 5 + 1); }
// For products: 2 on ranks 0 and 1 at even i, else 1 (a product of at most 4).
double factorOf(int r, std::size_t i) { return r < 2 && i % 2 == 0 ? 2 : 1; }

bool isFloat(rt::DataType t) {
  return t == rt::DataType::kFloat32 || t == rt::DataType::kFloat64 ||
         t == rt::DataType::kFloat16 || t == rt::DataType::kBFloat16;
}

double expectedReduction(rt::DataType t, rt::ReduceOp op, int world, std::size_t i) {
  double acc = op == rt::ReduceOp::kProd ? factorOf(0, i) : valueOf(0, i);
  for (int r = 1; r < world; ++r) {
    const double v = op == rt::ReduceOp::kProd ? factorOf(r, i) : valueOf(r, i);
    switch (op) {
      case rt::ReduceOp::kSum:
      case rt::ReduceOp::kAvg:
        acc += v;
        break;
      case rt::ReduceOp::kProd:
        acc *= v;
        break;
      case rt::ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case rt::ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (op == rt::ReduceOp::kAvg) {
    acc /= world;
    if (!isFloat(t)) {
      acc = std::trunc(acc);
    }
  }
  return acc;
}

// Failures found on the ranks' threads (Catch's macros are not thread-safe): checked after join.
class Findings {
 public:
  void expect(bool ok, const std::string& what) {
    if (!ok) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (lines_.size() < 20) {
        lines_.push_back(what);
      }
      ++count_;
    }
  }
  void expectValues(const Data& got, const std::function<double(std::size_t)>& want,
                    const std::string& what) {
    for (std::size_t i = 0; i < got.count(); ++i) {
      if (got.get(i) != want(i)) {
        expect(false, what + ": element " + std::to_string(i) + " is " +
                          std::to_string(got.get(i)) + ", want " + std::to_string(want(i)));
        return;
      }
    }
  }
  void require() {
    for (const auto& line : lines_) {
      UNSCOPED_INFO(line);
    }
    CHECK(count_ == 0);
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
  int count_ = 0;
};

// Runs `body(group, findings)` on `world` threads, each a rank joined through init(Membership)
// to one in-process store, in a group of `backend`.
void onRanks(int world, rt::Backend backend,
             const std::function<void(rt::ProcessGroup&, Findings&)>& body) {
  static std::atomic<int> jobs{0};
  const auto server = dtrun::testing::startServer();
  const std::string prefix = "/ops" + std::to_string(jobs++);
  Findings findings;
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      try {
        const rt::Context context = dtrun::testing::joinAsThread(r, world, server->port(), prefix);
        const auto group = rt::ProcessGroup::create(context, backend);
        findings.expect(group->rank() == r && group->size() == world, "rank and size");
        body(*group, findings);
      } catch (const std::exception& e) {
        findings.expect(false, "rank " + std::to_string(r) + " threw: " + e.what());
      }
    });
  }
  for (auto& t : ranks) {
    t.join();
  }
  findings.require();
}

std::string label(const rt::ProcessGroup& g, rt::DataType t, std::size_t n, const char* op) {
  return std::string(rt::backendName(g.backend())) + " n=" + std::to_string(g.size()) + " rank " +
         std::to_string(g.rank()) + " " + rt::dataTypeName(t) + " x" + std::to_string(n) + " " + op;
}

// Every collective of `g` on one dtype and length.
void collectives(rt::ProcessGroup& g, Findings& f, rt::DataType t, std::size_t n) {
  const int r = g.rank();
  const int world = g.size();
  for (const rt::ReduceOp op : kReduceOps) {
    Data d(t, n);
    for (std::size_t i = 0; i < n; ++i) {
      // An average is exact in every dtype when every rank holds the same value.
      d.set(i, op == rt::ReduceOp::kProd  ? factorOf(r, i)
               : op == rt::ReduceOp::kAvg ? valueOf(0, i)
                                          : valueOf(r, i));
    }
    g.allReduce(d.buffer(), op);
    f.expectValues(
        d,
        [&](std::size_t i) {
          return op == rt::ReduceOp::kAvg ? valueOf(0, i) : expectedReduction(t, op, world, i);
        },
        label(g, t, n, "all_reduce ") + rt::reduceOpName(op));
  }
  {
    Data d(t, n);
    const int root = world - 1;
    for (std::size_t i = 0; i < n; ++i) {
      d.set(i, r == root ? valueOf(root, i) : 0);
    }
    g.broadcast(d.buffer(), root);
    f.expectValues(
        d, [&](std::size_t i) { return valueOf(root, i); }, label(g, t, n, "broadcast"));
  }
  for (const rt::ReduceOp op : {rt::ReduceOp::kSum, rt::ReduceOp::kMax}) {
    Data d(t, n);
    for (std::size_t i = 0; i < n; ++i) {
      d.set(i, valueOf(r, i));
    }
    g.reduce(d.buffer(), 0, op);
    if (r == 0) {
      f.expectValues(
          d, [&](std::size_t i) { return expectedReduction(t, op, world, i); },
          label(g, t, n, "reduce ") + rt::reduceOpName(op));
    }
  }
  {
    Data in(t, n);
    Data out(t, n * static_cast<std::size_t>(world));
    for (std::size_t i = 0; i < n; ++i) {
      in.set(i, valueOf(r, i));
    }
    g.allGather(in.buffer(), out.buffer());
    f.expectValues(
        out, [&](std::size_t k) { return valueOf(static_cast<int>(k / n), k % n); },
        label(g, t, n, "all_gather"));
    Data gathered(t, n * static_cast<std::size_t>(world));
    g.gather(in.buffer(), gathered.buffer(), world - 1);
    if (r == world - 1) {
      f.expectValues(
          gathered, [&](std::size_t k) { return valueOf(static_cast<int>(k / n), k % n); },
          label(g, t, n, "gather"));
    }
  }
  {
    Data in(t, n * static_cast<std::size_t>(world));
    Data out(t, n);
    if (r == 0) {
      for (std::size_t k = 0; k < in.count(); ++k) {
        in.set(k, valueOf(static_cast<int>(k / n), k % n));
      }
    }
    g.scatter(in.buffer(), out.buffer(), 0);
    f.expectValues(
        out, [&](std::size_t i) { return valueOf(r, i); }, label(g, t, n, "scatter"));
  }
  {
    // Block b of rank r holds valueOf(r, b * n + i): rank b receives their sum.
    Data in(t, n * static_cast<std::size_t>(world));
    Data out(t, n);
    for (std::size_t k = 0; k < in.count(); ++k) {
      in.set(k, valueOf(r, k));
    }
    g.reduceScatter(in.buffer(), out.buffer(), rt::ReduceOp::kSum);
    f.expectValues(
        out,
        [&](std::size_t i) {
          double sum = 0;
          for (int q = 0; q < world; ++q) {
            sum += valueOf(q, static_cast<std::size_t>(r) * n + i);
          }
          return sum;
        },
        label(g, t, n, "reduce_scatter"));
  }
  {
    // Block j of rank q's input (sent to rank j) holds valueOf(q, j * n + i).
    Data in(t, n * static_cast<std::size_t>(world));
    Data out(t, n * static_cast<std::size_t>(world));
    for (std::size_t k = 0; k < in.count(); ++k) {
      in.set(k, valueOf(r, k));
    }
    g.allToAll(in.buffer(), out.buffer());
    f.expectValues(
        out,
        [&](std::size_t k) {
          const int q = static_cast<int>(k / n);  // block q came from rank q
          return valueOf(q, static_cast<std::size_t>(r) * n + k % n);
        },
        label(g, t, n, "all_to_all"));
  }
}

// A ring of sends: blocking, then non-blocking; and a barrier.
void pointToPoint(rt::ProcessGroup& g, Findings& f, rt::DataType t, std::size_t n) {
  const int r = g.rank();
  const int world = g.size();
  if (world < 2) {
    return;
  }
  const int next = (r + 1) % world;
  const int prev = (r + world - 1) % world;
  Data out(t, n);
  Data in(t, n);
  for (std::size_t i = 0; i < n; ++i) {
    out.set(i, valueOf(r, i));
  }
  if (r % 2 == 0) {
    g.send(out.buffer(), next, 3);
    g.recv(in.buffer(), prev, 3);
  } else {
    g.recv(in.buffer(), prev, 3);
    g.send(out.buffer(), next, 3);
  }
  f.expectValues(
      in, [&](std::size_t i) { return valueOf(prev, i); }, label(g, t, n, "send/recv"));
  Data in2(t, n);
  rt::Work receiving = g.irecv(in2.buffer(), prev, 4);
  rt::Work sending = g.isend(out.buffer(), next, 4);
  sending.wait();
  receiving.wait();
  f.expect(sending.isCompleted() && receiving.isCompleted(), label(g, t, n, "isend/irecv done"));
  f.expectValues(
      in2, [&](std::size_t i) { return valueOf(prev, i); }, label(g, t, n, "isend/irecv"));
  g.barrier();
}

std::vector<rt::Backend> cpuBackends() {
  std::vector<rt::Backend> out;
  for (const auto b : {rt::Backend::kTcp, rt::Backend::kGloo}) {
    if (rt::backendAvailable(b)) {
      out.push_back(b);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("every collective, every dtype, odd sizes, world sizes 1 to 3", "[runtime][ops]") {
  for (const rt::Backend backend : cpuBackends()) {
    for (int world = 1; world <= 3; ++world) {
      INFO(rt::backendName(backend) << " world " << world);
      onRanks(world, backend, [](rt::ProcessGroup& g, Findings& f) {
        for (const rt::DataType t : kDtypes) {
          for (const std::size_t n : {0UL, 1UL, 7UL, 1023UL, 40001UL}) {
            collectives(g, f, t, n);
            pointToPoint(g, f, t, n);
          }
        }
      });
    }
  }
}

TEST_CASE("every collective at world sizes 4 to 8, on fewer sizes", "[runtime][ops]") {
  for (const rt::Backend backend : cpuBackends()) {
    for (int world = 4; world <= 8; ++world) {
      INFO(rt::backendName(backend) << " world " << world);
      onRanks(world, backend, [](rt::ProcessGroup& g, Findings& f) {
        for (const rt::DataType t : {rt::DataType::kFloat32, rt::DataType::kInt64,
                                     rt::DataType::kUInt8, rt::DataType::kBFloat16}) {
          for (const std::size_t n : {1UL, 257UL}) {
            collectives(g, f, t, n);
            pointToPoint(g, f, t, n);
          }
        }
      });
    }
  }
}

TEST_CASE("sub-groups: members in any order reduce among themselves, others get nullptr",
          "[runtime][ops]") {
  for (const rt::Backend backend : cpuBackends()) {
    INFO(rt::backendName(backend));
    onRanks(5, backend, [](rt::ProcessGroup& g, Findings& f) {
      const std::vector<int> members = {3, 1, 4};  // sub-group rank i is world rank members[i]
      auto sub = g.newGroup(members);
      const auto it = std::find(members.begin(), members.end(), g.rank());
      f.expect((sub != nullptr) == (it != members.end()),
               "membership of rank " + std::to_string(g.rank()));
      if (sub) {
        f.expect(sub->rank() == static_cast<int>(it - members.begin()) && sub->size() == 3,
                 "sub-group rank of world rank " + std::to_string(g.rank()));
        Data d(rt::DataType::kFloat32, 9);
        for (std::size_t i = 0; i < 9; ++i) {
          d.set(i, valueOf(g.rank(), i));
        }
        sub->allReduce(d.buffer());
        f.expectValues(
            d, [](std::size_t i) { return valueOf(3, i) + valueOf(1, i) + valueOf(4, i); },
            "sub-group all_reduce");
        sub->barrier();
      }
      g.barrier();
    });
  }
}

TEST_CASE("a receive nobody sends times out with the peer named", "[runtime][ops]") {
  for (const rt::Backend backend : cpuBackends()) {
    INFO(rt::backendName(backend));
    // Rank 1 keeps its group open until rank 0 has timed out: a closed peer would be a
    // CommError instead. (After a timeout a gloo group is unusable, so nothing follows it.)
    std::atomic<bool> timedOut{false};
    onRanks(2, backend, [&timedOut](rt::ProcessGroup& g, Findings& f) {
      if (g.rank() == 1) {
        for (int i = 0; i < 1000 && !timedOut; ++i) {
          std::this_thread::sleep_for(10ms);
        }
        return;
      }
      Data d(rt::DataType::kInt32, 4);
      rt::Work w = g.irecv(d.buffer(), 1, 77);
      try {
        w.wait(200ms);
        f.expect(false, "wait() returned without a sender");
      } catch (const rt::TimeoutError& e) {
        f.expect(std::string(e.what()).find("rank 1") != std::string::npos,
                 std::string("the timeout names rank 1: ") + e.what());
      }
      timedOut = true;
    });
  }
}

TEST_CASE("gloo: a rank waiting on a peer that failed first fails at once, naming why",
          "[runtime][ops]") {
  // Gloo's model: any failure leaves a rank's whole group unusable (the tcp backend's collectives
  // abort the group the same way, with abort frames; its point-to-point failures stay between
  // the two ranks, so this case is Gloo's alone).
  if (!rt::backendAvailable(rt::Backend::kGloo)) {
    SUCCEED("no gloo in this build");
    return;
  }
  // Rank 2 leaves (its group closes); rank 1, receiving from it, fails, and stays, holding its
  // group open until rank 0 is done; rank 0 receives from rank 1. Without word from rank 1's
  // failure, rank 0 would wait out its 5 s and blame rank 1.
  std::atomic<bool> rank0Done{false};
  onRanks(3, rt::Backend::kGloo, [&rank0Done](rt::ProcessGroup& g, Findings& f) {
    g.barrier();
    if (g.rank() == 2) {
      return;
    }
    Data d(rt::DataType::kInt32, 4);
    rt::Work w = g.irecv(d.buffer(), g.rank() + 1, 5);
    try {
      w.wait(5s);
      f.expect(false, "rank " + std::to_string(g.rank()) + ": wait() returned without a sender");
    } catch (const rt::Error& e) {
      const std::string what = e.what();
      f.expect(dynamic_cast<const rt::CommError*>(&e) != nullptr,
               "rank " + std::to_string(g.rank()) + " expected a CommError: " + what);
      f.expect(what.find("rank 2") != std::string::npos,
               "rank " + std::to_string(g.rank()) + "'s error names rank 2: " + what);
    }
    if (g.rank() == 0) {
      rank0Done = true;
      return;
    }
    for (int i = 0; i < 1000 && !rank0Done; ++i) {
      std::this_thread::sleep_for(10ms);
    }
  });
}

TEST_CASE("tcp: a peer whose abort frame was lost is named with the cause it recorded",
          "[runtime][ops]") {
  // Rank 1 has half of a 64 MiB frame on its way to rank 0 (which reads nothing yet) when its
  // all_reduce times out: its abort frame cannot pass the half frame, so rank 0 later sees only a
  // closed connection. The cause rank 1 recorded in the store before closing is then the story.
  const auto server = dtrun::testing::startServer();
  Findings f;
  std::atomic<bool> rank1Failed{false};
  std::atomic<bool> rank0Done{false};
  const auto waitFor = [](const std::atomic<bool>& flag) {
    for (int i = 0; i < 3000 && !flag; ++i) {
      std::this_thread::sleep_for(10ms);
    }
  };
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      try {
        const rt::Context context =
            dtrun::testing::joinAsThread(r, 3, server->port(), "/lost_abort");
        rt::GroupOptions options;
        options.timeout = 1000ms;
        const auto g = rt::ProcessGroup::create(context, rt::Backend::kTcp, options);
        g->barrier();
        Data small(rt::DataType::kInt32, 4);
        if (r == 1) {
          Data big(rt::DataType::kUInt8, std::size_t{64} << 20U);
          const rt::Work pending = g->isend(big.buffer(), 0, 9);
          std::this_thread::sleep_for(100ms);  // the frame is half on the wire
          try {
            g->allReduce(small.buffer());
            f.expect(false, "rank 1: all_reduce returned without ranks 0 and 2");
          } catch (const rt::TimeoutError&) {
          }
          rank1Failed = true;
          waitFor(rank0Done);
        } else if (r == 0) {
          waitFor(rank1Failed);
          try {
            g->allReduce(small.buffer());
            f.expect(false, "rank 0: all_reduce returned though rank 1 had failed");
          } catch (const rt::CommError& e) {
            const std::string what = e.what();
            f.expect(what.find("connection to rank 1 closed; rank 1 had failed first "
                               "(all_reduce: timed out after 1000 ms") != std::string::npos,
                     "rank 0's error carries rank 1's cause: " + what);
          }
          rank0Done = true;
        } else {
          waitFor(rank0Done);
        }
      } catch (const std::exception& e) {
        f.expect(false, "rank " + std::to_string(r) + " threw: " + e.what());
        rank1Failed = true;
        rank0Done = true;
      }
    });
  }
  for (auto& t : ranks) {
    t.join();
  }
  f.require();
}

TEST_CASE("init(Membership) refuses what cannot be a rank, naming it", "[runtime][ops]") {
  rt::Membership who;
  who.rank = 2;
  who.worldSize = 2;
  who.storePort = 1;
  CHECK_THROWS_AS(rt::init(who), rt::ConfigError);
  who.rank = 0;
  who.storePort = 0;
  CHECK_THROWS_AS(rt::init(who), rt::ConfigError);
}
