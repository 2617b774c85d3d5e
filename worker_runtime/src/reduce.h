// Elementwise reductions on host memory for every DataType, f16/bf16 through float. Pure, no
// allocation; used by the Tcp backend (and by Gloo for the dtypes it lacks).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtrun/runtime.h"

namespace dtrun::runtime::detail {

// dst[i] = op(dst[i], src[i]) for i < count; dst and src do not overlap. kAvg accumulates like
// kSum (see finishAverage).
void reduceInto(void* dst, const void* src, std::size_t count, DataType type, ReduceOp op);
// Divides every element by `n` (the last step of kAvg; integers divide with truncation).
void finishAverage(void* data, std::size_t count, DataType type, int n);

float halfToFloat(std::uint16_t h);
std::uint16_t floatToHalf(float f);
float bfloat16ToFloat(std::uint16_t b);
std::uint16_t floatToBfloat16(float f);

}  // namespace dtrun::runtime::detail
