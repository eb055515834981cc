// Device-side dtype helpers shared by every kernel family: fp32 conversion of
// fp32 / fp16 / bf16, packed 16-byte vector loads. Every kernel accumulates in
// fp32 registers and converts once at the store, so half inputs never
// overflow in an intermediate sum. No torch headers: kernel translation
// units stay light.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "common/align.h"

namespace pyg_tc {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// V consecutive elements, aligned to their total size, so a load of a Pack of
// 16 bytes compiles to one 128-bit instruction.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Elements per 16-byte vector for a given scalar.
template <typename T> constexpr int vec16() { return 16 / sizeof(T); }

}  // namespace pyg_tc
