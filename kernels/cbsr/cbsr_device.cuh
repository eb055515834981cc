// CBSR family (MaxK-GNN): device helpers shared by the CBSR kernels
// (cbsr_spmm.cu, cbsr_sspmm.cu).
#pragma once

#include <type_traits>

#include "common/dtype.cuh"
#include "cbsr/cbsr_params.h"

namespace pyg_tc {
namespace {

constexpr int kWarps = kMaxkWarps;  // warps per block of every kernel of the family
constexpr int kUnroll = 4;

template <typename IT>
__device__ __forceinline__ int col_of(IT raw) {
  return static_cast<int>(static_cast<std::make_unsigned_t<IT>>(raw));
}

}  // namespace
}  // namespace pyg_tc
