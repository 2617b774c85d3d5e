// dtrt_check_worker: libdtrt's end-to-end checks, one process per rank under the real dtrun.
// tests/integration/runtime_test.sh drives it; by hand:
//   build/launcher/dtrun --nproc_per_node=3 --no_python
//   build/tests/worker_runtime/dtrt_check_worker ops tcp
// Modes (argv[1]):
//   ops <tcp|gloo|nccl>  every operation x dtype x ReduceOp at lengths 1, 7, 1001, 100003 against
//                        values computed here; barrier; p2p blocking and non-blocking with tags;
//                        sub-groups (the odd ranks, and {size-1, 0}); nccl uses cudaMalloc'd memory
//   compare              seeded random data through Tcp and Gloo: integers bitwise equal, floats
//                        within a tolerance
//   early-exit <backend> <collective|create>
//                        rank size-1 exits 3 (after the group formed, or before it); the others
//                        must get CommError/TimeoutError naming it within DTRUN_TIMEOUT + 5 s
//   attempt <backend>    with --max_restarts=1: attempt 0 forms a group, then rank 0 exits 1;
//                        attempt 1 must form a fresh group under its own store prefix
//   errors <backend>     bad environment and bad arguments throw ConfigError naming the problem
//   noenv                outside dtrun: init() throws ConfigError naming RANK
//   die <throw|segv>     rank 0 logs at every level and waits; rank 1 dies of an uncaught
//                        exception or SIGSEGV: dtrun's report must quote its error file
// Output: one "PASS <check>", "FAIL <check>: <why>" or "SKIP <check>: <why>" line per check on
// stdout. Exit 0 when nothing failed, 1 otherwise (early-exit's dying rank: 3).
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef DTRUN_HAVE_NCCL
#include <cuda_runtime.h>
#endif

#include "dtrun/runtime.h"

namespace rt = dtrun::runtime;

namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::byte>;

// ---- reporting ------------------------------------------------------------------------------

class Reporter {
 public:
  void pass(const std::string& check) { line("PASS", check, ""); }
  void fail(const std::string& check, const std::string& why) {
    ++failures_;
    line("FAIL", check, why);
  }
  void skip(const std::string& check, const std::string& why) { line("SKIP", check, why); }
  void expect(bool ok, const std::string& check, const std::string& why) {
    if (ok) {
      pass(check);
    } else {
      fail(check, why);
    }
  }
  [[nodiscard]] int failures() const { return failures_; }
  [[nodiscard]] int exitCode() const { return failures_ == 0 ? 0 : 1; }

 private:
  static void line(const char* verdict, const std::string& check, const std::string& why) {
    if (why.empty()) {
      std::printf("%s %s\n", verdict, check.c_str());
    } else {
      std::printf("%s %s: %s\n", verdict, check.c_str(), why.c_str());
    }
    (void)std::fflush(stdout);
  }
  int failures_ = 0;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- values, independent of libdtrt's own conversions --------------------------------------

constexpr std::array<rt::DataType, 7> kAllTypes = {
    rt::DataType::kFloat32, rt::DataType::kFloat64, rt::DataType::kInt32,   rt::DataType::kInt64,
    rt::DataType::kUInt8,   rt::DataType::kFloat16, rt::DataType::kBFloat16};
constexpr std::array<rt::ReduceOp, 5> kAllOps = {rt::ReduceOp::kSum, rt::ReduceOp::kProd,
                                                 rt::ReduceOp::kMin, rt::ReduceOp::kMax,
                                                 rt::ReduceOp::kAvg};
constexpr std::array<std::size_t, 4> kLengths = {1, 7, 1001, 100003};

bool isHalf(rt::DataType t) { return t == rt::DataType::kFloat16 || t == rt::DataType::kBFloat16; }
bool isFloat(rt::DataType t) {
  return t == rt::DataType::kFloat32 || t == rt::DataType::kFloat64 || isHalf(t);
}

// Rounds v to the nearest value with `bits` significant bits (ties to even).
double roundSignificand(double v, int bits, int* exponent) {
  int e = 0;
  const double f = std::frexp(std::fabs(v), &e);   // |v| = f * 2^e, f in [0.5, 1)
  double m = std::nearbyint(std::ldexp(f, bits));  // in [2^(bits-1), 2^bits]
  if (m == std::ldexp(1.0, bits)) {
    m = std::ldexp(1.0, bits - 1);
    ++e;
  }
  *exponent = e;
  return m;
}

std::uint16_t toHalfBits(double v) {
  const std::uint16_t sign = std::signbit(v) ? 0x8000U : 0U;
  const double a = std::fabs(v);
  if (std::isnan(v)) {
    return 0x7e00U;
  }
  if (a >= 65520.0) {
    return static_cast<std::uint16_t>(sign | 0x7c00U);
  }
  if (a < std::ldexp(1.0, -14)) {  // subnormal: units of 2^-24 (1024 units is the first normal)
    return static_cast<std::uint16_t>(
        sign | static_cast<std::uint16_t>(std::nearbyint(std::ldexp(a, 24))));
  }
  int e = 0;
  const double m = roundSignificand(a, 11, &e);  // a = m * 2^(e - 11)
  const int biased = e - 1 + 15;
  if (biased >= 31) {
    return static_cast<std::uint16_t>(sign | 0x7c00U);
  }
  return static_cast<std::uint16_t>(sign | (static_cast<unsigned>(biased) << 10U) |
                                    (static_cast<unsigned>(m) - 1024U));
}

double fromHalfBits(std::uint16_t h) {
  const double sign = (h & 0x8000U) != 0 ? -1.0 : 1.0;
  const int e = (h >> 10U) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 0) {
    return sign * std::ldexp(m, -24);
  }
  if (e == 31) {
    return m == 0 ? sign * HUGE_VAL : std::nan("");
  }
  return sign * std::ldexp(1024 + m, e - 25);
}

std::uint16_t toBfloat16Bits(double v) {
  if (v == 0.0) {
    return std::signbit(v) ? 0x8000U : 0U;
  }
  int e = 0;
  const double m = roundSignificand(v, 8, &e);
  const auto f = static_cast<float>(std::copysign(std::ldexp(m, e - 8), v));  // exact in float
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(f) >> 16U);
}

double fromBfloat16Bits(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16U);
}

template <typename T>
void store(Bytes& out, std::size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}
template <typename T>
T load(const Bytes& in, std::size_t i) {
  T v{};
  std::memcpy(&v, in.data() + i * sizeof(T), sizeof(T));
  return v;
}

// Element i of `out` = v, rounded to the dtype (integers: v is integral and in range).
void encode(rt::DataType t, Bytes& out, std::size_t i, double v) {
  switch (t) {
    case rt::DataType::kFloat32:
      return store(out, i, static_cast<float>(v));
    case rt::DataType::kFloat64:
      return store(out, i, v);
    case rt::DataType::kInt32:
      return store(out, i, static_cast<std::int32_t>(v));
    case rt::DataType::kInt64:
      return store(out, i, static_cast<std::int64_t>(v));
    case rt::DataType::kUInt8:
      return store(out, i, static_cast<std::uint8_t>(v));
    case rt::DataType::kFloat16:
      return store(out, i, toHalfBits(v));
    case rt::DataType::kBFloat16:
      return store(out, i, toBfloat16Bits(v));
  }
}

double decode(rt::DataType t, const Bytes& in, std::size_t i) {
  switch (t) {
    case rt::DataType::kFloat32:
      return load<float>(in, i);
    case rt::DataType::kFloat64:
      return load<double>(in, i);
    case rt::DataType::kInt32:
      return load<std::int32_t>(in, i);
    case rt::DataType::kInt64:
      return static_cast<double>(load<std::int64_t>(in, i));
    case rt::DataType::kUInt8:
      return load<std::uint8_t>(in, i);
    case rt::DataType::kFloat16:
      return fromHalfBits(load<std::uint16_t>(in, i));
    case rt::DataType::kBFloat16:
      return fromBfloat16Bits(load<std::uint16_t>(in, i));
  }
  return 0;
}

Bytes encodeAll(rt::DataType t, const std::vector<double>& values) {
  Bytes out(values.size() * rt::elementSize(t));
  for (std::size_t i = 0; i < values.size(); ++i) {
    encode(t, out, i, values[i]);
  }
  return out;
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31U);
}

// What the values are for: plain transport (wide range), a sum/min/max/avg (small, so that any
// order of summation is exact), or a product (smaller still).
enum class Kind : std::uint8_t { kWide, kSum, kProd };

Kind kindFor(rt::ReduceOp op) { return op == rt::ReduceOp::kProd ? Kind::kProd : Kind::kSum; }

// Value of element i of rank r's data for check `salt`: exactly representable in t, and such that
// sums of up to 4 ranks (kSum) and products of up to 4 ranks (kProd) are exact in t.
double valueAt(rt::DataType t, Kind kind, std::uint64_t salt, int r, std::size_t i) {
  const std::uint64_t h =
      mix((salt * 1000003ULL + static_cast<std::uint64_t>(r) * 7919ULL + i * 0x51ULL) ^ (i << 32U));
  const auto pick = [h](std::uint64_t n) { return static_cast<double>(h % n); };
  if (kind == Kind::kProd) {
    static constexpr std::array<double, 8> kFactors = {-2, -1.5, -1, -0.5, 0.5, 1, 1.5, 2};
    switch (t) {
      case rt::DataType::kUInt8:
        return pick(4);  // 0..3: 3^4 = 81
      case rt::DataType::kInt32:
      case rt::DataType::kInt64:
        return pick(5) - 2;  // -2..2
      default:
        return kFactors.at(h % kFactors.size());
    }
  }
  if (kind == Kind::kSum) {
    switch (t) {
      case rt::DataType::kUInt8:
        return pick(17);  // 0..16: sum of 4 <= 64
      case rt::DataType::kInt32:
      case rt::DataType::kInt64:
        return pick(17) - 8;
      default:
        return (pick(33) - 16) / 4;  // -4..4 in quarters: sums of 4 are exact even in bf16
    }
  }
  switch (t) {
    case rt::DataType::kFloat32:
      return (pick(1ULL << 22U) - (1ULL << 21U)) / 64;
    case rt::DataType::kFloat64:
      return (pick(1ULL << 50U) - (1ULL << 49U)) / 1024;
    case rt::DataType::kInt32:
      return pick(1ULL << 32U) - (1ULL << 31U);
    case rt::DataType::kInt64:
      return pick(1ULL << 52U) - (1ULL << 51U);
    case rt::DataType::kUInt8:
      return pick(256);
    case rt::DataType::kFloat16:
      return (pick(2047) - 1023) / 8;
    case rt::DataType::kBFloat16:
      return (pick(511) - 255) / 2;
  }
  return 0;
}

std::vector<double> valuesOf(rt::DataType t, Kind kind, std::uint64_t salt, int r, std::size_t n,
                             std::size_t offset = 0) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = valueAt(t, kind, salt, r, offset + i);
  }
  return v;
}

// The reduction over ranks of x[r] (as doubles), the way the API defines it: kAvg is the sum
// divided by the count, integers truncated.
double reduceValues(rt::DataType t, rt::ReduceOp op, const std::vector<double>& x) {
  double acc = x.at(0);
  for (std::size_t r = 1; r < x.size(); ++r) {
    switch (op) {
      case rt::ReduceOp::kSum:
      case rt::ReduceOp::kAvg:
        acc += x[r];
        break;
      case rt::ReduceOp::kProd:
        acc *= x[r];
        break;
      case rt::ReduceOp::kMin:
        acc = std::min(acc, x[r]);
        break;
      case rt::ReduceOp::kMax:
        acc = std::max(acc, x[r]);
        break;
    }
  }
  if (op == rt::ReduceOp::kAvg) {
    acc /= static_cast<double>(x.size());
    if (!isFloat(t)) {
      acc = std::trunc(acc);
    }
  }
  return acc;
}

// Relative/absolute tolerance for a result that may be rounded once (avg) in type t.
double tolerance(rt::DataType t) {
  switch (t) {
    case rt::DataType::kFloat32:
      return 1e-6;
    case rt::DataType::kFloat64:
      return 1e-12;
    case rt::DataType::kFloat16:
      return 2e-3;
    case rt::DataType::kBFloat16:
      return 1e-2;
    default:
      return 0;
  }
}

// "" when got matches expected (integers exactly; floats within tol relative, or absolute near 0).
std::string mismatch(rt::DataType t, const Bytes& got, const std::vector<double>& expected,
                     double tol) {
  if (got.size() != expected.size() * rt::elementSize(t)) {
    return "result holds " + std::to_string(got.size()) + " bytes, expected " +
           std::to_string(expected.size() * rt::elementSize(t));
  }
  std::size_t bad = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double g = decode(t, got, i);
    const double e = expected[i];
    const bool ok = tol == 0 ? g == e : std::fabs(g - e) <= tol * std::max(1.0, std::fabs(e));
    if (!ok) {
      if (bad++ == 0) {
        first = i;
      }
    }
  }
  if (bad == 0) {
    return "";
  }
  char text[200];
  (void)std::snprintf(text, sizeof text,
                      "%zu of %zu elements differ, first at %zu: got %.9g expected %.9g", bad,
                      expected.size(), first, decode(t, got, first), expected[first]);
  return text;
}

// ---- memory on the backend's device ---------------------------------------------------------

// count elements of t on the host, or on the CUDA device for Nccl; written and read as bytes.
class Mem {
 public:
  Mem(rt::DataType type, std::size_t count, bool cuda) : type_(type), count_(count), cuda_(cuda) {
    const std::size_t bytes = std::max<std::size_t>(1, count * rt::elementSize(type));
    if (!cuda_) {
      host_.resize(bytes);
      return;
    }
#ifdef DTRUN_HAVE_NCCL
    if (cudaMalloc(&device_, bytes) != cudaSuccess) {
      throw std::runtime_error("cudaMalloc of " + std::to_string(bytes) + " bytes failed");
    }
#else
    throw std::runtime_error("this check worker was built without CUDA");
#endif
  }
  ~Mem() {
#ifdef DTRUN_HAVE_NCCL
    if (device_ != nullptr) {
      cudaFree(device_);
    }
#endif
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  Mem(Mem&&) = delete;
  Mem& operator=(Mem&&) = delete;

  [[nodiscard]] rt::Buffer buffer() const {
    rt::Buffer b;
    b.data = cuda_ ? device_ : const_cast<std::byte*>(host_.data());
    b.count = count_;
    b.dtype = type_;
    b.device = cuda_ ? rt::Device::kCuda : rt::Device::kCpu;
    return b;
  }
  void write(const Bytes& bytes) {
    if (!cuda_) {
      std::copy(bytes.begin(), bytes.end(), host_.begin());
      return;
    }
#ifdef DTRUN_HAVE_NCCL
    cudaMemcpy(device_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice);
#endif
  }
  void fill(std::byte value) { write(Bytes(count_ * rt::elementSize(type_), value)); }
  [[nodiscard]] Bytes read() const {
    const std::size_t bytes = count_ * rt::elementSize(type_);
    if (!cuda_) {
      return {host_.begin(), host_.begin() + static_cast<std::ptrdiff_t>(bytes)};
    }
    Bytes out(bytes);
#ifdef DTRUN_HAVE_NCCL
    cudaDeviceSynchronize();
    cudaMemcpy(out.data(), device_, bytes, cudaMemcpyDeviceToHost);
#endif
    return out;
  }

 private:
  rt::DataType type_;
  std::size_t count_;
  bool cuda_;
  Bytes host_;
  void* device_ = nullptr;
};

std::optional<rt::Backend> parseBackend(const std::string& name) {
  if (name == "tcp") {
    return rt::Backend::kTcp;
  }
  if (name == "gloo") {
    return rt::Backend::kGloo;
  }
  if (name == "nccl") {
    return rt::Backend::kNccl;
  }
  return std::nullopt;
}

// ---- ops ------------------------------------------------------------------------------------

// Runs every collective of one group against locally computed results.
class OpsChecker {
 public:
  OpsChecker(Reporter& report, rt::ProcessGroup& pg, std::string label, bool cuda)
      : report_(report), pg_(pg), label_(std::move(label)), cuda_(cuda) {}

  void runAll(const std::vector<std::size_t>& lengths,
              const std::vector<rt::DataType>& types = {kAllTypes.begin(), kAllTypes.end()}) {
    lengths_ = lengths;
    for (const rt::DataType t : types) {
      for (const rt::ReduceOp op : kAllOps) {
        check("all_reduce", t, op,
              [&](std::size_t n, std::size_t li) { return allReduce(t, op, n, li); });
      }
      for (const rt::ReduceOp op : kAllOps) {
        check("reduce", t, op, [&](std::size_t n, std::size_t li) { return reduce(t, op, n, li); });
      }
      check("broadcast", t, std::nullopt,
            [&](std::size_t n, std::size_t li) { return broadcast(t, n, li); });
      check("all_gather", t, std::nullopt,
            [&](std::size_t n, std::size_t li) { return allGather(t, n, li); });
      check("gather", t, std::nullopt,
            [&](std::size_t n, std::size_t li) { return gather(t, n, li); });
      check("scatter", t, std::nullopt,
            [&](std::size_t n, std::size_t li) { return scatter(t, n, li); });
      for (const rt::ReduceOp op : kAllOps) {
        check("reduce_scatter", t, op,
              [&](std::size_t n, std::size_t li) { return reduceScatter(t, op, n, li); });
      }
      check("all_to_all", t, std::nullopt,
            [&](std::size_t n, std::size_t li) { return allToAll(t, n, li); });
    }
  }

 private:
  using Body = std::function<std::string(std::size_t, std::size_t)>;

  // One PASS/FAIL/SKIP line for `what` over every length. A ConfigError for f16/bf16 means the
  // backend does not take that dtype: SKIP. Any other libdtrt error leaves the group unusable:
  // FAIL, and the process exits.
  void check(const std::string& what, rt::DataType t, std::optional<rt::ReduceOp> op,
             const Body& body) {
    std::string name = label_ + " " + what + " " + rt::dataTypeName(t);
    if (op) {
      name += std::string(" ") + rt::reduceOpName(*op);
    }
    std::string problems;
    for (std::size_t li = 0; li < lengths_.size(); ++li) {
      const std::size_t n = lengths_[li];
      try {
        const std::string why = body(n, li);
        if (!why.empty()) {
          problems += (problems.empty() ? "" : "; ") + std::string("length ") + std::to_string(n) +
                      ": " + why;
        }
      } catch (const rt::ConfigError& e) {
        if (isHalf(t)) {
          report_.skip(name, std::string("ConfigError: ") + e.what());
          return;
        }
        problems += (problems.empty() ? "" : "; ") + std::string("length ") + std::to_string(n) +
                    ": ConfigError: " + e.what();
      } catch (const rt::Error& e) {
        report_.fail(name, "length " + std::to_string(n) + ": " + e.what());
        std::_Exit(1);  // the group may be broken: no destructors
      }
    }
    report_.expect(problems.empty(), name, problems);
  }

  [[nodiscard]] int size() const { return pg_.size(); }
  [[nodiscard]] int rank() const { return pg_.rank(); }
  std::uint64_t salt(std::size_t li, int extra) {
    return (++counter_ * 16) + li * 4096 + static_cast<std::uint64_t>(extra);
  }

  // expected[i] = op over ranks of valueAt(r, offset + i)
  std::vector<double> reduced(rt::DataType t, rt::ReduceOp op, std::uint64_t s, std::size_t n,
                              std::size_t offset) {
    std::vector<double> out(n);
    std::vector<double> x(static_cast<std::size_t>(size()));
    for (std::size_t i = 0; i < n; ++i) {
      for (int r = 0; r < size(); ++r) {
        x[static_cast<std::size_t>(r)] = valueAt(t, kindFor(op), s, r, offset + i);
      }
      out[i] = reduceValues(t, op, x);
    }
    return out;
  }

  std::string allReduce(rt::DataType t, rt::ReduceOp op, std::size_t n, std::size_t li) {
    const auto s = salt(li, 1);
    Mem m(t, n, cuda_);
    m.write(encodeAll(t, valuesOf(t, kindFor(op), s, rank(), n)));
    pg_.allReduce(m.buffer(), op);
    return mismatch(t, m.read(), reduced(t, op, s, n, 0), tolerance(t));
  }

  std::string reduce(rt::DataType t, rt::ReduceOp op, std::size_t n, std::size_t li) {
    const auto s = salt(li, 2);
    const int root =
        static_cast<int>((li + static_cast<std::size_t>(op)) % static_cast<std::size_t>(size()));
    Mem m(t, n, cuda_);
    m.write(encodeAll(t, valuesOf(t, kindFor(op), s, rank(), n)));
    pg_.reduce(m.buffer(), root, op);
    if (rank() != root) {
      return "";  // non-roots' buffers are unspecified
    }
    return mismatch(t, m.read(), reduced(t, op, s, n, 0), tolerance(t));
  }

  std::string broadcast(rt::DataType t, std::size_t n, std::size_t li) {
    std::string out;
    for (const int root : {0, size() - 1}) {
      const auto s = salt(li, 3);
      Mem m(t, n, cuda_);
      m.write(encodeAll(t, valuesOf(t, Kind::kWide, s, rank(), n)));
      pg_.broadcast(m.buffer(), root);
      const std::string why = mismatch(t, m.read(), valuesOf(t, Kind::kWide, s, root, n), 0);
      if (!why.empty()) {
        out += "root " + std::to_string(root) + ": " + why;
      }
    }
    return out;
  }

  std::vector<double> concatenated(rt::DataType t, std::uint64_t s, std::size_t n) {
    std::vector<double> all;
    for (int r = 0; r < size(); ++r) {
      const auto v = valuesOf(t, Kind::kWide, s, r, n);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }

  std::string allGather(rt::DataType t, std::size_t n, std::size_t li) {
    const auto s = salt(li, 4);
    Mem in(t, n, cuda_);
    Mem out(t, n * static_cast<std::size_t>(size()), cuda_);
    in.write(encodeAll(t, valuesOf(t, Kind::kWide, s, rank(), n)));
    out.fill(std::byte{0xA5});
    pg_.allGather(in.buffer(), out.buffer());
    return mismatch(t, out.read(), concatenated(t, s, n), 0);
  }

  std::string gather(rt::DataType t, std::size_t n, std::size_t li) {
    const auto s = salt(li, 5);
    const int root = static_cast<int>(li % static_cast<std::size_t>(size()));
    Mem in(t, n, cuda_);
    Mem out(t, n * static_cast<std::size_t>(size()), cuda_);
    in.write(encodeAll(t, valuesOf(t, Kind::kWide, s, rank(), n)));
    out.fill(std::byte{0xA5});
    pg_.gather(in.buffer(), out.buffer(), root);
    return rank() == root ? mismatch(t, out.read(), concatenated(t, s, n), 0) : "";
  }

  std::string scatter(rt::DataType t, std::size_t n, std::size_t li) {
    const auto s = salt(li, 6);
    const int root = static_cast<int>((li + 1) % static_cast<std::size_t>(size()));
    const std::size_t total = n * static_cast<std::size_t>(size());
    Mem in(t, total, cuda_);
    Mem out(t, n, cuda_);
    in.write(encodeAll(t, valuesOf(t, Kind::kWide, s, rank(), total)));
    out.fill(std::byte{0xA5});
    pg_.scatter(in.buffer(), out.buffer(), root);
    // block r of the root's input
    return mismatch(t, out.read(),
                    valuesOf(t, Kind::kWide, s, root, n, static_cast<std::size_t>(rank()) * n), 0);
  }

  std::string reduceScatter(rt::DataType t, rt::ReduceOp op, std::size_t n, std::size_t li) {
    const auto s = salt(li, 7);
    const std::size_t total = n * static_cast<std::size_t>(size());
    Mem in(t, total, cuda_);
    Mem out(t, n, cuda_);
    in.write(encodeAll(t, valuesOf(t, kindFor(op), s, rank(), total)));
    out.fill(std::byte{0xA5});
    pg_.reduceScatter(in.buffer(), out.buffer(), op);
    return mismatch(t, out.read(), reduced(t, op, s, n, static_cast<std::size_t>(rank()) * n),
                    tolerance(t));
  }

  std::string allToAll(rt::DataType t, std::size_t n, std::size_t li) {
    // Rank r's input block j is valuesOf(r, offset j*n); rank r's output block j comes from rank
    // j's input block r.
    const auto s = salt(li, 8);
    const std::size_t total = n * static_cast<std::size_t>(size());
    Mem in(t, total, cuda_);
    Mem out(t, total, cuda_);
    in.write(encodeAll(t, valuesOf(t, Kind::kWide, s, rank(), total)));
    out.fill(std::byte{0xA5});
    pg_.allToAll(in.buffer(), out.buffer());
    std::vector<double> expected;
    for (int j = 0; j < size(); ++j) {
      const auto v = valuesOf(t, Kind::kWide, s, j, n, static_cast<std::size_t>(rank()) * n);
      expected.insert(expected.end(), v.begin(), v.end());
    }
    return mismatch(t, out.read(), expected, 0);
  }

  Reporter& report_;
  rt::ProcessGroup& pg_;
  std::string label_;
  bool cuda_;
  std::vector<std::size_t> lengths_;
  std::uint64_t counter_ = 0;
};

// Runs `body`; a libdtrt error is a FAIL, and (unless ConfigError) ends the process, because the
// group may be broken.
void guarded(Reporter& report, const std::string& name, const std::function<void()>& body) {
  try {
    body();
  } catch (const rt::ConfigError& e) {
    report.fail(name, std::string("ConfigError: ") + e.what());
  } catch (const rt::Error& e) {
    report.fail(name, e.what());
    std::_Exit(1);  // the group may be broken: no destructors
  }
}

void checkBarrier(Reporter& report, rt::ProcessGroup& pg, const std::string& label) {
  guarded(report, label + " barrier", [&] {
    pg.barrier();
    // The last rank arrives 300 ms late: nobody may leave before it arrived.
    const auto start = Clock::now();
    if (pg.rank() == pg.size() - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    pg.barrier();
    const double waited = secondsSince(start);
    report.expect(waited >= 0.25, label + " barrier waits for the last rank",
                  "left the barrier after " + std::to_string(waited) +
                      " s although the last rank arrived after 0.3 s");
  });
}

// Blocking and non-blocking p2p between every pair, with tags (size >= 2).
void checkP2p(Reporter& report, rt::ProcessGroup& pg, const std::string& label, bool cuda,
              bool tags) {
  const int n = pg.size();
  const int me = pg.rank();
  if (n < 2) {
    report.skip(label + " p2p", "needs 2 ranks");
    return;
  }
  const std::array<rt::DataType, 4> types = {rt::DataType::kFloat32, rt::DataType::kUInt8,
                                             rt::DataType::kInt64, rt::DataType::kBFloat16};
  // Blocking: rank 0 sends to every rank (tag = rank), every rank answers (tag = 1000 + rank).
  for (const rt::DataType t : types) {
    std::string problems;
    guarded(report, label + " p2p blocking " + rt::dataTypeName(t), [&] {
      for (const std::size_t len : {std::size_t{1}, std::size_t{1001}, std::size_t{100003}}) {
        const std::uint64_t s = 900 + len;
        const int tagOut = tags ? 1 : 0;
        const int tagBack = tags ? 1000 : 0;
        if (me == 0) {
          for (int r = 1; r < n; ++r) {
            Mem m(t, len, cuda);
            m.write(encodeAll(t, valuesOf(t, Kind::kWide, s, r, len)));
            pg.send(m.buffer(), r, tagOut * r);
          }
          for (int r = 1; r < n; ++r) {
            Mem m(t, len, cuda);
            m.fill(std::byte{0x5A});
            pg.recv(m.buffer(), r, tagBack + tagOut * r);
            const auto why = mismatch(t, m.read(), valuesOf(t, Kind::kWide, s + 1, r, len), 0);
            if (!why.empty()) {
              problems += "from rank " + std::to_string(r) + " length " + std::to_string(len) +
                          ": " + why + "; ";
            }
          }
        } else {
          Mem m(t, len, cuda);
          m.fill(std::byte{0x5A});
          pg.recv(m.buffer(), 0, tagOut * me);
          const auto why = mismatch(t, m.read(), valuesOf(t, Kind::kWide, s, me, len), 0);
          if (!why.empty()) {
            problems += "from rank 0 length " + std::to_string(len) + ": " + why + "; ";
          }
          m.write(encodeAll(t, valuesOf(t, Kind::kWide, s + 1, me, len)));
          pg.send(m.buffer(), 0, tagBack + tagOut * me);
        }
      }
      report.expect(problems.empty(), label + " p2p blocking " + rt::dataTypeName(t), problems);
    });
  }
  if (!tags) {
    return;
  }
  // Non-blocking, every pair at once: to each peer two messages on tags 1 and 2 and two on tag 3
  // (same tag: they must arrive in order); the receiver posts tag 2 before tag 1.
  for (const std::size_t len : {std::size_t{7}, std::size_t{100003}}) {
    const std::string name = label + " p2p isend/irecv tags, length " + std::to_string(len);
    guarded(report, name, [&] {
      const rt::DataType t = rt::DataType::kInt32;
      const std::array<int, 4> sendTags = {1, 2, 3, 3};
      const std::array<int, 4> recvTags = {2, 1, 3, 3};
      const std::array<int, 4> recvMeaning = {1, 0, 2, 3};  // which sent message each recv gets
      std::vector<std::unique_ptr<Mem>> sends;
      std::vector<std::unique_ptr<Mem>> recvs;
      std::vector<rt::Work> work;
      std::vector<std::pair<int, int>> recvFrom;  // (peer, message index)
      for (int peer = 0; peer < n; ++peer) {
        if (peer == me) {
          continue;
        }
        for (std::size_t k = 0; k < recvTags.size(); ++k) {
          recvs.push_back(std::make_unique<Mem>(t, len, cuda));
          recvs.back()->fill(std::byte{0x5A});
          work.push_back(pg.irecv(recvs.back()->buffer(), peer, recvTags.at(k)));
          recvFrom.emplace_back(peer, recvMeaning.at(k));
        }
      }
      for (int peer = 0; peer < n; ++peer) {
        if (peer == me) {
          continue;
        }
        for (std::size_t k = 0; k < sendTags.size(); ++k) {
          sends.push_back(std::make_unique<Mem>(t, len, cuda));
          sends.back()->write(encodeAll(
              t,
              valuesOf(t, Kind::kWide, 5000 + k + 10 * static_cast<std::size_t>(peer), me, len)));
          work.push_back(pg.isend(sends.back()->buffer(), peer, sendTags.at(k)));
        }
      }
      bool allCompleted = true;
      for (auto& w : work) {
        w.wait();
        allCompleted = allCompleted && w.isCompleted();
      }
      std::string problems;
      for (std::size_t k = 0; k < recvs.size(); ++k) {
        const auto [peer, msg] = recvFrom[k];
        const auto why = mismatch(
            t, recvs[k]->read(),
            valuesOf(t, Kind::kWide,
                     5000 + static_cast<std::size_t>(msg) + 10 * static_cast<std::size_t>(me), peer,
                     len),
            0);
        if (!why.empty()) {
          problems += "message " + std::to_string(msg) + " from rank " + std::to_string(peer) +
                      ": " + why + "; ";
        }
      }
      if (!allCompleted) {
        problems += "isCompleted() is false after wait(); ";
      }
      report.expect(problems.empty(), name, problems);
    });
  }
}

// Work::wait(timeout) on an irecv nobody sends: TimeoutError naming the peer, promptly. Runs on
// a fresh sub-group {0, 1}, which may be unusable afterwards; the parent group must not be.
void checkWaitTimeout(Reporter& report, rt::ProcessGroup& world, const std::string& label,
                      bool cuda) {
  if (world.size() < 2) {
    return;
  }
  const std::string name = label + " p2p wait(300 ms) on a pending irecv";
  guarded(report, name, [&] {
    auto pair = world.newGroup({0, 1});
    if (world.rank() == 0) {
      Mem m(rt::DataType::kFloat64, 3, cuda);
      rt::Work w = pair->irecv(m.buffer(), 1, 77);
      report.expect(!w.isCompleted(), label + " p2p isCompleted() false before the peer sent",
                    "true");
      const auto start = Clock::now();
      std::string why;
      try {
        w.wait(std::chrono::milliseconds(300));
        why = "wait(300 ms) returned although rank 1 never sends";
      } catch (const rt::TimeoutError& e) {
        const double took = secondsSince(start);
        if (took < 0.25 || took > 3) {
          why = "TimeoutError after " + std::to_string(took) + " s, expected about 0.3 s";
        } else if (!contains(e.what(), "rank 1")) {
          why = std::string("TimeoutError does not name rank 1: ") + e.what();
        }
      } catch (const rt::Error& e) {
        why = std::string("expected TimeoutError, got: ") + e.what();
      }
      report.expect(why.empty(), name + " throws TimeoutError naming rank 1", why);
    }
    world.barrier();  // rank 1 stays until rank 0 checked; then both drop the pair group
  });
  guarded(report, label + " parent group usable after a sub-group's timeout",
          [&] { world.barrier(); });
}

// A sub-group of `ranks` (in that order): membership, rank/size, a few collectives, p2p, then the
// parent group still works.
void checkSubGroup(Reporter& report, rt::ProcessGroup& world, const std::vector<int>& ranks,
                   const std::string& label, bool cuda) {
  std::string list;
  for (const int r : ranks) {
    list += (list.empty() ? "" : ",") + std::to_string(r);
  }
  const std::string name = label + " new_group{" + list + "}";
  guarded(report, name, [&] {
    auto sub = world.newGroup(ranks);
    const auto pos = std::find(ranks.begin(), ranks.end(), world.rank());
    if (pos == ranks.end()) {
      report.expect(sub == nullptr, name + " non-member gets nullptr", "got a group");
    } else if (sub == nullptr) {
      report.fail(name + " member gets a group", "got nullptr");
    } else {
      const int expectRank = static_cast<int>(pos - ranks.begin());
      report.expect(sub->rank() == expectRank && sub->size() == static_cast<int>(ranks.size()),
                    name + " rank/size",
                    "rank " + std::to_string(sub->rank()) + " size " + std::to_string(sub->size()) +
                        ", expected rank " + std::to_string(expectRank) + " size " +
                        std::to_string(ranks.size()));
      OpsChecker ops(report, *sub, name, cuda);
      ops.runAll({1, 1001}, {rt::DataType::kFloat32, rt::DataType::kInt64});
      checkP2p(report, *sub, name, cuda, !cuda);
    }
    // The parent group after the sub-group's traffic.
    Mem m(rt::DataType::kInt64, 5, cuda);
    m.write(encodeAll(rt::DataType::kInt64, std::vector<double>(5, world.rank() + 1)));
    world.allReduce(m.buffer());
    const double n = world.size();
    report.expect(
        mismatch(rt::DataType::kInt64, m.read(), std::vector<double>(5, n * (n + 1) / 2), 0)
            .empty(),
        name + " parent group still works", "all_reduce after the sub-group is wrong");
  });
}

#ifdef DTRUN_HAVE_NCCL
bool selectCudaDevice(Reporter& report, int localRank) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    report.skip("nccl", "no CUDA device");
    return false;
  }
  cudaSetDevice(localRank % count);
  return true;
}
#endif

int runOps(Reporter& report, const std::string& backendName) {
  const auto backend = parseBackend(backendName);
  if (!backend) {
    report.fail("ops", "unknown backend '" + backendName + "' (tcp, gloo or nccl)");
    return 1;
  }
  const bool cuda = *backend == rt::Backend::kNccl;
  const rt::Context ctx = rt::init();
  if (cuda) {
    if (!rt::backendAvailable(rt::Backend::kNccl)) {
      report.skip("nccl", "libdtrt was built without NCCL");
      return 0;
    }
#ifdef DTRUN_HAVE_NCCL
    if (!selectCudaDevice(report, ctx.localRank)) {
      return 0;
    }
#endif
  }
  std::unique_ptr<rt::ProcessGroup> pg;
  const std::string label = backendName + " n=" + std::to_string(ctx.worldSize);
  guarded(report, label + " create", [&] {
    const auto start = Clock::now();
    pg = rt::ProcessGroup::create(ctx, *backend);
    report.expect(
        pg->rank() == ctx.rank && pg->size() == ctx.worldSize && pg->backend() == *backend,
        label + " create: rank, size, backend",
        "rank " + std::to_string(pg->rank()) + " size " + std::to_string(pg->size()));
    std::printf("INFO %s create took %.3f s\n", label.c_str(), secondsSince(start));
  });
  if (*backend == rt::Backend::kGloo) {
    struct sigaction pipe {};
    (void)::sigaction(SIGPIPE, nullptr, &pipe);
    report.expect(pipe.sa_handler == SIG_IGN, label + " SIGPIPE ignored (a dead peer is an error)",
                  "SIGPIPE is not SIG_IGN after creating a gloo group");
  }
  if (pg == nullptr) {
    return 1;
  }
  checkBarrier(report, *pg, label);
  OpsChecker ops(report, *pg, label, cuda);
  ops.runAll({kLengths.begin(), kLengths.end()});
  checkP2p(report, *pg, label, cuda, !cuda);
  if (pg->size() >= 2) {
    std::vector<int> odd;
    for (int r = 1; r < pg->size(); r += 2) {
      odd.push_back(r);
    }
    checkSubGroup(report, *pg, odd, label, cuda);
    checkSubGroup(report, *pg, {pg->size() - 1, 0}, label, cuda);
  }
  if (!cuda) {  // NCCL has no tags and no per-wait timeout to speak of
    checkWaitTimeout(report, *pg, label, cuda);
  }
  guarded(report, label + " final barrier", [&] { pg->barrier(); });
  report.pass(label + " all checks ran");
  return report.exitCode();
}

// ---- compare --------------------------------------------------------------------------------

// Seeded random values for rank r: integers small enough that no reduction overflows.
std::vector<double> randomValues(rt::DataType t, bool forProd, std::uint64_t seed, int r,
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

int runCompare(Reporter& report) {
  const rt::Context ctx = rt::init();
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

// ---- early exit -----------------------------------------------------------------------------

// Marker files beside this rank's log directory (DTRUN_LOG_DIR's parent is the attempt's), for
// the few hand-overs that cannot go through a group: "<rank>.<what>".
class Markers {
 public:
  Markers() {
    const char* logDir = std::getenv("DTRUN_LOG_DIR");  // NOLINT(concurrency-mt-unsafe): one thread
    if (logDir != nullptr) {
      dir_ = std::filesystem::path(logDir).parent_path();
    }
  }
  void set(int rank, const std::string& what) const {
    if (!dir_.empty()) {
      std::ofstream(dir_ / (std::to_string(rank) + "." + what)) << "1\n";
    }
  }
  // Waits until ranks [0, count) all set `what`, at most limitS seconds (without DTRUN_LOG_DIR:
  // just waits 2 s).
  void waitAll(int count, const std::string& what, double limitS) const {
    const auto start = Clock::now();
    while (secondsSince(start) < limitS) {
      int seen = 0;
      for (int r = 0; r < count && !dir_.empty(); ++r) {
        seen += std::filesystem::exists(dir_ / (std::to_string(r) + "." + what)) ? 1 : 0;
      }
      if (dir_.empty() ? secondsSince(start) >= 2 : seen == count) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  std::filesystem::path dir_;
};

// Whether `message` names rank `r`: "rank 2", or in a list, "ranks 1, 2".
bool namesRank(const std::string& message, int r) {
  const std::regex pattern("ranks? ([0-9]+(, | and | or ))*" + std::to_string(r) + "([^0-9]|$)");
  return std::regex_search(message, pattern);
}

int runEarlyExit(Reporter& report, const std::string& backendName, const std::string& phase) {
  const auto backend = parseBackend(backendName);
  if (!backend || (phase != "collective" && phase != "create")) {
    report.fail("early-exit", "usage: early-exit <tcp|gloo> <collective|create>");
    return 1;
  }
  // dtrun stops the other ranks with SIGTERM once the dying rank exited; the survivors stay to
  // see their error (dtrun's --shutdown_timeout must exceed DTRUN_TIMEOUT + margin). Ignored
  // from the start: the dying rank leaves only once every survivor said it is ready.
  (void)std::signal(SIGTERM, SIG_IGN);
  const rt::Context ctx = rt::init();
  const int dying = ctx.worldSize - 1;
  const std::string name = "early-exit " + backendName + " " + phase;
  if (ctx.worldSize < 2) {
    report.fail(name, "needs at least 2 ranks");
    return 1;
  }
  const Markers markers;
  if (phase == "create" && ctx.rank == dying) {
    markers.waitAll(dying, "ready", 20);
    std::printf("INFO rank %d exits 3 before creating the group\n", ctx.rank);
    (void)std::fflush(stdout);
    std::_Exit(3);
  }
  markers.set(ctx.rank, "ready");
  std::unique_ptr<rt::ProcessGroup> pg;
  auto start = Clock::now();
  try {
    pg = rt::ProcessGroup::create(ctx, *backend);
    pg->barrier();
    if (ctx.rank == dying) {
      std::printf("INFO rank %d exits 3 after the group formed\n", ctx.rank);
      (void)std::fflush(stdout);
      std::_Exit(3);
    }
    start = Clock::now();
    std::vector<float> data(1000, 1.0F);
    for (int i = 0; i < 100; ++i) {  // the first one may complete only if the dead rank's part
      pg->allReduce(rt::view(std::span<float>(data)));  // was already on the way: keep going
    }
    report.fail(name, "100 all_reduce calls completed without rank " + std::to_string(dying));
    return 1;
  } catch (const rt::Error& e) {
    const double took = secondsSince(start);
    const bool rightType = dynamic_cast<const rt::CommError*>(&e) != nullptr ||
                           dynamic_cast<const rt::TimeoutError*>(&e) != nullptr;
    const double limit = std::chrono::duration<double>(ctx.timeout).count() + 5;
    std::printf("INFO rank %d caught after %.3f s: %s\n", ctx.rank, took, e.what());
    (void)std::fflush(stdout);
    report.expect(
        rightType, name + " error type",
        std::string("expected CommError or TimeoutError, got another Error: ") + e.what());
    report.expect(namesRank(e.what(), dying), name + " error names rank " + std::to_string(dying),
                  std::string("message: ") + e.what());
    report.expect(took <= limit, name + " error within DTRUN_TIMEOUT + 5 s",
                  "took " + std::to_string(took) + " s, limit " + std::to_string(limit) + " s");
    // No survivor leaves before every survivor saw its error: a survivor's exit must not be
    // what another one reports.
    markers.set(ctx.rank, "caught");
    markers.waitAll(dying, "caught", 10);
  }
  return report.exitCode();
}

// ---- restarts -------------------------------------------------------------------------------

int runAttempt(Reporter& report, const std::string& backendName) {
  const auto backend = parseBackend(backendName);
  if (!backend) {
    report.fail("attempt", "unknown backend '" + backendName + "'");
    return 1;
  }
  const rt::Context ctx = rt::init();
  const char* countEnv =
      std::getenv("TORCHELASTIC_RESTART_COUNT");  // NOLINT(concurrency-mt-unsafe)
  const int attempt = countEnv != nullptr ? std::atoi(countEnv) : -1;
  const std::string label = "attempt " + std::to_string(attempt) + " " + backendName;
  report.expect(ctx.restartCount == attempt, label + " Context.restartCount",
                "restartCount " + std::to_string(ctx.restartCount) +
                    " but TORCHELASTIC_RESTART_COUNT " + std::to_string(attempt));
  report.expect(ctx.storePrefix == "/worker/attempt_" + std::to_string(attempt),
                label + " Context.storePrefix", "got '" + ctx.storePrefix + "'");
  std::unique_ptr<rt::ProcessGroup> pg;
  guarded(report, label + " create", [&] {
    const auto start = Clock::now();
    pg = rt::ProcessGroup::create(ctx, *backend);
    const double took = secondsSince(start);
    // A group that tried attempt 0's (dead) addresses would stall here until its timeout.
    report.expect(took < 5, label + " create is quick (no stale addresses)",
                  "took " + std::to_string(took) + " s");
  });
  if (!pg) {
    return 1;
  }
  guarded(report, label + " barrier + all_reduce", [&] {
    pg->barrier();
    std::vector<std::int64_t> v(3, static_cast<std::int64_t>(ctx.rank + 1) * (attempt + 1));
    pg->allReduce(rt::view(std::span<std::int64_t>(v)));
    const std::int64_t n = ctx.worldSize;
    const std::int64_t want = n * (n + 1) / 2 * (attempt + 1);
    report.expect(v[0] == want && v[2] == want, label + " all_reduce",
                  "got " + std::to_string(v[0]) + " expected " + std::to_string(want));
    pg->barrier();  // everyone checked before rank 0 leaves
  });
  if (attempt == 0) {
    if (ctx.rank == 0) {
      std::printf("INFO rank 0 exits 1 to make dtrun restart the job\n");
      (void)std::fflush(stdout);
      std::_Exit(1);
    }
    std::this_thread::sleep_for(std::chrono::seconds(60));  // dtrun stops us
    report.fail(label, "rank 0 exited but dtrun did not stop this rank within 60 s");
    return 1;
  }
  if (ctx.worldSize >= 2) {
    checkSubGroup(report, *pg, {0, ctx.worldSize - 1}, label, false);
  }
  guarded(report, label + " final barrier", [&] { pg->barrier(); });
  report.pass(label + " all checks ran");
  return report.exitCode();
}

// ---- errors ---------------------------------------------------------------------------------

// Expects body to throw E whose message contains every one of `parts`.
template <typename E>
void expectThrow(Reporter& report, const std::string& name, const std::vector<std::string>& parts,
                 const std::function<void()>& body) {
  try {
    body();
    report.fail(name, "no exception");
  } catch (const E& e) {
    std::string missing;
    for (const auto& p : parts) {
      if (!contains(e.what(), p)) {
        missing += (missing.empty() ? "'" : ", '") + p + "'";
      }
    }
    report.expect(missing.empty(), name, "the message does not name " + missing + ": " + e.what());
  } catch (const rt::Error& e) {
    report.fail(name, std::string("wrong exception type: ") + e.what());
  }
}

// An environment change undone at scope exit (single-threaded: before any group exists).
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
    const char* old = std::getenv(name_.c_str());  // NOLINT(concurrency-mt-unsafe)
    if (old != nullptr) {
      old_ = old;
    }
    if (value == nullptr) {
      unsetenv(name_.c_str());  // NOLINT(concurrency-mt-unsafe)
    } else {
      setenv(name_.c_str(), value, 1);  // NOLINT(concurrency-mt-unsafe)
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
    } else {
      unsetenv(name_.c_str());  // NOLINT(concurrency-mt-unsafe)
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ScopedEnv(ScopedEnv&&) = delete;
  ScopedEnv& operator=(ScopedEnv&&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

int closedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 1;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) {
    close(fd);
  }
  return port;
}

void checkEnvironment(Reporter& report) {
  rt::InitOptions quiet;
  quiet.installErrorHandlers = false;
  const auto initFails = [&](const std::string& name, const std::vector<std::string>& parts) {
    expectThrow<rt::ConfigError>(report, name, parts, [&] { (void)rt::init(quiet); });
  };
  {
    const ScopedEnv e("RANK", nullptr);
    initFails("errors init: RANK unset", {"RANK", "dtrun"});
  }
  {
    const ScopedEnv e("RANK", "abc");
    initFails("errors init: RANK=abc", {"RANK", "abc"});
  }
  {
    const ScopedEnv e("RANK", "7");
    initFails("errors init: RANK >= WORLD_SIZE", {"RANK", "WORLD_SIZE"});
  }
  {
    const ScopedEnv e("WORLD_SIZE", "0");
    initFails("errors init: WORLD_SIZE=0", {"WORLD_SIZE"});
  }
  {
    const ScopedEnv e("MASTER_ADDR", nullptr);
    initFails("errors init: MASTER_ADDR unset", {"MASTER_ADDR"});
  }
  {
    const ScopedEnv e("MASTER_PORT", "70000");
    initFails("errors init: MASTER_PORT=70000", {"MASTER_PORT", "70000"});
  }
  {
    const ScopedEnv e("DTRUN_TIMEOUT", "soon");
    initFails("errors init: DTRUN_TIMEOUT=soon", {"DTRUN_TIMEOUT"});
  }
  {
    const std::string port = std::to_string(closedPort());
    const ScopedEnv e("MASTER_PORT", port.c_str());
    rt::InitOptions fast = quiet;
    fast.timeout = std::chrono::milliseconds(1000);
    const auto start = Clock::now();
    expectThrow<rt::TimeoutError>(report, "errors init: store not listening -> TimeoutError",
                                  {port}, [&] { (void)rt::init(fast); });
    const double took = secondsSince(start);
    report.expect(took < 5, "errors init: store not listening gives up after its timeout",
                  "took " + std::to_string(took) + " s with a 1 s timeout");
  }
}

int runErrors(Reporter& report, const std::string& backendName) {
  const auto backend = parseBackend(backendName);
  if (!backend) {
    report.fail("errors", "unknown backend '" + backendName + "'");
    return 1;
  }
  checkEnvironment(report);
  expectThrow<rt::ConfigError>(report, "errors create without init()", {"init"},
                               [&] { (void)rt::ProcessGroup::create(rt::Context{}, *backend); });
  const rt::Context ctx = rt::init();
  if (!rt::backendAvailable(rt::Backend::kNccl)) {
    expectThrow<rt::ConfigError>(report, "errors create nccl where not built", {"nccl"},
                                 [&] { (void)rt::ProcessGroup::create(ctx, rt::Backend::kNccl); });
  }
  report.expect(std::string(rt::dataTypeName(rt::DataType::kBFloat16)) == "bf16" &&
                    std::string(rt::reduceOpName(rt::ReduceOp::kAvg)) == "avg" &&
                    std::string(rt::backendName(rt::Backend::kGloo)) == "gloo" &&
                    rt::elementSize(rt::DataType::kFloat16) == 2 &&
                    rt::elementSize(rt::DataType::kInt64) == 8,
                "errors names and sizes", "dataTypeName/reduceOpName/backendName/elementSize");
  std::unique_ptr<rt::ProcessGroup> pg;
  guarded(report, "errors create " + backendName,
          [&] { pg = rt::ProcessGroup::create(ctx, *backend); });
  if (!pg) {
    return 1;
  }
  const int n = pg->size();
  const int me = pg->rank();
  const std::string big = std::to_string(n);
  std::vector<float> f(4 * static_cast<std::size_t>(n) + 1, 1.0F);
  std::vector<std::int32_t> i32(4 * static_cast<std::size_t>(n), 1);
  const rt::Buffer one = rt::view(std::span<float>(f).first(4));
  const rt::Buffer all = rt::view(std::span<float>(f).first(4 * static_cast<std::size_t>(n)));
  const rt::Buffer odd = rt::view(std::span<float>(f));
  const auto bad = [&](const std::string& name, const std::vector<std::string>& parts,
                       const std::function<void()>& body) {
    expectThrow<rt::ConfigError>(report, "errors " + name, parts, body);
  };
  bad("send to itself", {"send", std::to_string(me)}, [&] { pg->send(one, me); });
  bad("send to rank size()", {"send", big}, [&] { pg->send(one, n); });
  bad("recv from rank -1", {"recv", "-1"}, [&] { pg->recv(one, -1); });
  bad("isend to rank size()+3", {"isend", std::to_string(n + 3)},
      [&] { (void)pg->isend(one, n + 3); });
  bad("irecv from itself", {"irecv"}, [&] { (void)pg->irecv(one, me); });
  bad("broadcast root size()", {"broadcast", "root", big}, [&] { pg->broadcast(one, n); });
  bad("reduce root -1", {"reduce", "root"}, [&] { pg->reduce(one, -1); });
  bad("gather root size()", {"gather", "root"}, [&] { pg->gather(one, all, n); });
  bad("scatter root -2", {"scatter", "root"}, [&] { pg->scatter(all, one, -2); });
  bad("all_gather output too small", {"all_gather"}, [&] { pg->allGather(one, odd); });
  bad("all_gather dtype mismatch", {"all_gather", "f32", "i32"},
      [&] { pg->allGather(one, rt::view(std::span<std::int32_t>(i32))); });
  bad("reduce_scatter wrong input size", {"reduce_scatter"}, [&] { pg->reduceScatter(odd, one); });
  if (n > 1) {
    bad("all_to_all count not a multiple of size()", {"all_to_all"},
        [&] { pg->allToAll(odd, odd); });
  }
  bad("all_reduce null data", {"null"}, [&] {
    rt::Buffer b = one;
    b.data = nullptr;
    pg->allReduce(b);
  });
  bad("all_reduce CUDA buffer on a CPU backend", {"CPU"}, [&] {
    rt::Buffer b = one;
    b.device = rt::Device::kCuda;
    pg->allReduce(b);
  });
  bad("new_group empty", {"new_group"}, [&] { (void)pg->newGroup({}); });
  bad("new_group duplicates", {"new_group"}, [&] { (void)pg->newGroup({0, 0}); });
  bad("new_group rank size()", {"new_group", big}, [&] { (void)pg->newGroup({0, n}); });
  // Nothing above may have disturbed the group.
  guarded(report, "errors group usable after rejected calls", [&] {
    std::vector<float> v(5, static_cast<float>(me + 1));
    pg->allReduce(rt::view(std::span<float>(v)));
    const float want = static_cast<float>(n * (n + 1)) / 2;
    report.expect(v[0] == want && v[4] == want, "errors group usable after rejected calls",
                  "all_reduce gave " + std::to_string(v[0]));
    auto sub = pg->newGroup({0});
    report.expect((me == 0) == (sub != nullptr), "errors new_group after rejected new_group calls",
                  "membership wrong");
    pg->barrier();
  });
  report.pass("errors all checks ran");
  return report.exitCode();
}

int runNoEnv(Reporter& report) {
  rt::InitOptions quiet;
  quiet.installErrorHandlers = false;
  expectThrow<rt::ConfigError>(report, "noenv init() outside dtrun", {"RANK", "dtrun"},
                               [&] { (void)rt::init(quiet); });
  return report.exitCode();
}

int usage() {
  (void)std::fprintf(stderr,
                     "usage: dtrt_check_worker ops <tcp|gloo|nccl> | compare | "
                     "early-exit <tcp|gloo> <collective|create> | attempt <tcp|gloo> | "
                     "errors <tcp|gloo> | noenv\n");
  return 2;
}

// The error file and worker logging, as a user would see them: through dtrun's failure report
// and the per-rank logs. Rank 1 dies; rank 0 stays until dtrun stops it.
int runDie(const std::string& how) {
  const auto context = rt::init();
  const auto group = rt::ProcessGroup::create(context, rt::Backend::kTcp);
  if (context.rank == 0) {
    rt::logDebug("debug line from the worker");
    rt::logInfo("info line from the worker");
    rt::logWarn("warn line from the worker");
  }
  group->barrier();  // rank 0 has logged before rank 1 dies
  if (context.rank == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(30));
    return 0;
  }
  if (context.rank == 1) {
    if (how == "throw") {
      throw std::runtime_error("boom from rank 1");
    }
    // Raised rather than provoked: UBSan would stop a null store before it could fault.
    static_cast<void>(std::raise(SIGSEGV));
  }
  return 0;
}

int run(const std::vector<std::string>& args) {
  Reporter report;
  const std::string mode = args.empty() ? "" : args[0];
  const std::string arg1 = args.size() > 1 ? args[1] : "";
  if (mode == "ops" && args.size() == 2) {
    return runOps(report, arg1);
  }
  if (mode == "compare" && args.size() == 1) {
    return runCompare(report);
  }
  if (mode == "early-exit" && args.size() == 3) {
    return runEarlyExit(report, arg1, args[2]);
  }
  if (mode == "attempt" && args.size() == 2) {
    return runAttempt(report, arg1);
  }
  if (mode == "errors" && args.size() == 2) {
    return runErrors(report, arg1);
  }
  if (mode == "noenv" && args.size() == 1) {
    return runNoEnv(report);
  }
  if (mode == "die" && args.size() == 2 && (arg1 == "throw" || arg1 == "segv")) {
    return runDie(arg1);
  }
  return usage();
}

}  // namespace

int main(int argc, char** argv) {
  // `die throw` must reach std::terminate (and libdtrt's error file) uncaught.
  if (argc == 3 && std::string(argv[1]) == "die") {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  }
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::printf("FAIL uncaught exception: %s\n", e.what());
    (void)std::fflush(stdout);
    return 1;
  }
}
