#include "reduce.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

// The reduction loops must vectorize: GCC's -O2 cost model ("very cheap") leaves loops of unknown
// length scalar, which made a float sum several times slower than memory allows (clang
// vectorizes at -O2; a pragma, not a flag, so clang-tidy reads this file's compile command).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

namespace dtrun::runtime::detail {
namespace {

template <typename T>
T apply(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<T>(a + b);
    case ReduceOp::kProd:
      return static_cast<T>(a * b);
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return a;
}

// d[i] = f(d[i], s[i]) over `count` elements of T at any alignment: a ring delivers data at any
// byte offset. memcpy of one element compiles to a plain (unaligned) load or store, and the loop
// still vectorizes. __restrict: the two never overlap (reduceInto's contract), and GCC's -O2 cost
// model does not version a loop for aliasing, so without it these loops stay scalar.
template <typename T, typename F>
void combine(void* dst, const void* src, std::size_t count, F f) {
  auto* __restrict d = static_cast<std::byte*>(dst);
  const auto* __restrict s = static_cast<const std::byte*>(src);
  for (std::size_t i = 0; i < count; ++i) {
    T a;
    T b;
    std::memcpy(&a, d + i * sizeof(T), sizeof(T));
    std::memcpy(&b, s + i * sizeof(T), sizeof(T));
    const T r = f(a, b);
    std::memcpy(d + i * sizeof(T), &r, sizeof(T));
  }
}

template <typename T>
void reduceTyped(void* dst, const void* src, std::size_t count, ReduceOp op) {
  // One switch per call, not per element: the loops vectorize.
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return combine<T>(dst, src, count, [](T a, T b) { return static_cast<T>(a + b); });
    case ReduceOp::kProd:
      return combine<T>(dst, src, count, [](T a, T b) { return static_cast<T>(a * b); });
    case ReduceOp::kMin:
      return combine<T>(dst, src, count, [](T a, T b) { return std::min(a, b); });
    case ReduceOp::kMax:
      return combine<T>(dst, src, count, [](T a, T b) { return std::max(a, b); });
  }
}

template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void reduceHalf(void* dst, const void* src, std::size_t count, ReduceOp op) {
  combine<std::uint16_t>(dst, src, count, [op](std::uint16_t a, std::uint16_t b) {
    return FromFloat(apply(ToFloat(a), ToFloat(b), op));
  });
}

// data[i] = f(data[i]), at any alignment (see combine).
template <typename T, typename F>
void transform(void* data, std::size_t count, F f) {
  auto* d = static_cast<std::byte*>(data);
  for (std::size_t i = 0; i < count; ++i) {
    T a;
    std::memcpy(&a, d + i * sizeof(T), sizeof(T));
    const T r = f(a);
    std::memcpy(d + i * sizeof(T), &r, sizeof(T));
  }
}

template <typename T>
void divideTyped(void* data, std::size_t count, int n) {
  transform<T>(data, count, [n](T a) { return static_cast<T>(a / static_cast<T>(n)); });
}

template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void divideHalf(void* data, std::size_t count, int n) {
  transform<std::uint16_t>(
      data, count, [n](std::uint16_t a) { return FromFloat(ToFloat(a) / static_cast<float>(n)); });
}

}  // namespace

float halfToFloat(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000U) << 16U;
  std::uint32_t exponent = (h >> 10U) & 0x1fU;
  std::uint32_t mantissa = h & 0x3ffU;
  std::uint32_t bits = 0;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400U) == 0) {
        mantissa <<= 1U;
        --exponent;
      }
      mantissa &= 0x3ffU;
      bits = sign | (exponent << 23U) | (mantissa << 13U);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000U | (mantissa << 13U);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23U) | (mantissa << 13U);
  }
  return std::bit_cast<float>(bits);
}

std::uint16_t floatToHalf(float f) {
  const auto bits = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16U) & 0x8000U);
  const std::uint32_t exponent = (bits >> 23U) & 0xffU;
  std::uint32_t mantissa = bits & 0x7fffffU;
  if (exponent == 0xff) {  // inf or nan
    return static_cast<std::uint16_t>(sign | 0x7c00U | (mantissa != 0 ? 0x200U : 0U));
  }
  const int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 0x1f) {
    return static_cast<std::uint16_t>(sign | 0x7c00U);  // overflow to inf
  }
  if (e <= 0) {  // subnormal or zero, round to nearest even
    if (e < -10) {
      return sign;
    }
    mantissa |= 0x800000U;
    const auto shift = static_cast<std::uint32_t>(14 - e);
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1U << shift) - 1U);
    const std::uint32_t midpoint = 1U << (shift - 1U);
    if (rest > midpoint || (rest == midpoint && (half & 1U) != 0)) {
      ++half;
    }
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10U) | (mantissa >> 13U);
  const std::uint32_t rest = mantissa & 0x1fffU;
  if (rest > 0x1000U || (rest == 0x1000U && (half & 1U) != 0)) {
    ++half;  // may carry into the exponent, which is the right rounding
  }
  return static_cast<std::uint16_t>(sign | half);
}

float bfloat16ToFloat(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16U);
}

std::uint16_t floatToBfloat16(float f) {
  const auto bits = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) {
    return static_cast<std::uint16_t>((bits >> 16U) | 0x40U);
  }
  const std::uint32_t rounding = 0x7fffU + ((bits >> 16U) & 1U);  // round to nearest even
  return static_cast<std::uint16_t>((bits + rounding) >> 16U);
}

void reduceInto(void* dst, const void* src, std::size_t count, DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kFloat32:
      return reduceTyped<float>(dst, src, count, op);
    case DataType::kFloat64:
      return reduceTyped<double>(dst, src, count, op);
    case DataType::kInt32:
      return reduceTyped<std::int32_t>(dst, src, count, op);
    case DataType::kInt64:
      return reduceTyped<std::int64_t>(dst, src, count, op);
    case DataType::kUInt8:
      return reduceTyped<std::uint8_t>(dst, src, count, op);
    case DataType::kFloat16:
      return reduceHalf<halfToFloat, floatToHalf>(dst, src, count, op);
    case DataType::kBFloat16:
      return reduceHalf<bfloat16ToFloat, floatToBfloat16>(dst, src, count, op);
  }
}

void finishAverage(void* data, std::size_t count, DataType type, int n) {
  switch (type) {
    case DataType::kFloat32:
      return divideTyped<float>(data, count, n);
    case DataType::kFloat64:
      return divideTyped<double>(data, count, n);
    case DataType::kInt32:
      return divideTyped<std::int32_t>(data, count, n);
    case DataType::kInt64:
      return divideTyped<std::int64_t>(data, count, n);
    case DataType::kUInt8:
      return divideTyped<std::uint8_t>(data, count, n);
    case DataType::kFloat16:
      return divideHalf<halfToFloat, floatToHalf>(data, count, n);
    case DataType::kBFloat16:
      return divideHalf<bfloat16ToFloat, floatToBfloat16>(data, count, n);
  }
}

}  // namespace dtrun::runtime::detail
