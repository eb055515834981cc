// 16-byte alignment test, for host rules (vector paths) and device code alike.
#pragma once

#include <cuda_runtime_api.h>  // __host__ / __device__ for the C++ compiler too

#include <cstdint>

namespace pyg_tc {

__host__ __device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace pyg_tc
