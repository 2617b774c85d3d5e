// The worker's reporting, typed test values and the results they must reduce to (every dtype,
// f16/bf16 included), and host or CUDA memory for a buffer.
// Part of dtrt_check_worker (one translation unit): header-only, internal to the worker.
#pragma once

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

namespace dtrt_check {

namespace rt = dtrun::runtime;

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::byte>;

// ---- reporting ------------------------------------------------------------------------------

class Reporter {
 public:
  // quiet: only FAIL lines are printed (many ranks as threads of one test process).
  explicit Reporter(bool quiet = false) : quiet_(quiet) {}
  void pass(const std::string& check) {
    if (!quiet_) {
      line("PASS", check, "");
    }
  }
  void fail(const std::string& check, const std::string& why) {
    ++failures_;
    line("FAIL", check, why);
  }
  void skip(const std::string& check, const std::string& why) {
    if (!quiet_) {
      line("SKIP", check, why);
    }
  }
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
  bool quiet_ = false;
  int failures_ = 0;
};

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline double secondsSince(Clock::time_point start) {
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

inline bool isHalf(rt::DataType t) {
  return t == rt::DataType::kFloat16 || t == rt::DataType::kBFloat16;
}
inline bool isFloat(rt::DataType t) {
  return t == rt::DataType::kFloat32 || t == rt::DataType::kFloat64 || isHalf(t);
}

// Rounds v to the nearest value with `bits` significant bits (ties to even).
inline double roundSignificand(double v, int bits, int* exponent) {
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

inline std::uint16_t toHalfBits(double v) {
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

inline double fromHalfBits(std::uint16_t h) {
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

inline std::uint16_t toBfloat16Bits(double v) {
  if (v == 0.0) {
    return std::signbit(v) ? 0x8000U : 0U;
  }
  int e = 0;
  const double m = roundSignificand(v, 8, &e);
  const auto f = static_cast<float>(std::copysign(std::ldexp(m, e - 8), v));  // exact in float
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(f) >> 16U);
}

inline double fromBfloat16Bits(std::uint16_t b) {
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
inline void encode(rt::DataType t, Bytes& out, std::size_t i, double v) {
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

inline double decode(rt::DataType t, const Bytes& in, std::size_t i) {
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

inline Bytes encodeAll(rt::DataType t, const std::vector<double>& values) {
  Bytes out(values.size() * rt::elementSize(t));
  for (std::size_t i = 0; i < values.size(); ++i) {
    encode(t, out, i, values[i]);
  }
  return out;
}

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31U);
}

// What the values are for: plain transport (wide range), a sum/min/max/avg (small, so that any
// order of summation is exact), or a product (smaller still).
enum class Kind : std::uint8_t { kWide, kSum, kProd };

inline Kind kindFor(rt::ReduceOp op) {
  return op == rt::ReduceOp::kProd ? Kind::kProd : Kind::kSum;
}

// Value of element i of rank r's data for check `salt`: exactly representable in t, and such that
// sums of up to 4 ranks (kSum) and products of up to 4 ranks (kProd) are exact in t.
inline double valueAt(rt::DataType t, Kind kind, std::uint64_t salt, int r, std::size_t i) {
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

inline std::vector<double> valuesOf(rt::DataType t, Kind kind, std::uint64_t salt, int r,
                                    std::size_t n, std::size_t offset = 0) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = valueAt(t, kind, salt, r, offset + i);
  }
  return v;
}

// The reduction over ranks of x[r] (as doubles), the way the API defines it: kAvg is the sum
// divided by the count, integers truncated.
inline double reduceValues(rt::DataType t, rt::ReduceOp op, const std::vector<double>& x) {
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
inline double tolerance(rt::DataType t) {
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
inline std::string mismatch(rt::DataType t, const Bytes& got, const std::vector<double>& expected,
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

inline std::optional<rt::Backend> parseBackend(const std::string& name) {
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

}  // namespace dtrt_check
