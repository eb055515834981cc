// Shared device helpers for pyg_tc kernels: dtype traits, packed vector loads,
// fp32 conversion. Every kernel accumulates in fp32 registers and converts once
// at the store, so half inputs never overflow in an intermediate sum.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>

namespace pyg_tc {

constexpr unsigned kFullMask = 0xffffffffu;

// torch scalar type -> CUDA native type
template <typename T> struct Native { using type = T; };
template <> struct Native<c10::Half> { using type = __half; };
template <> struct Native<c10::BFloat16> { using type = __nv_bfloat16; };

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

// fp32, fp16 and bf16 only: float64 runs the pure-PyTorch reference (Python side).
#define PYG_TC_DISPATCH(TYPE, NAME, ...)                          \
  AT_DISPATCH_SWITCH(TYPE, NAME,                                  \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__)    \
                     AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)     \
                     AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

// Host-side argument checks shared by the kernel files.
inline void check_index(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "pyg_tc: ", name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == at::kInt, "pyg_tc: ", name, " must be int32");
  TORCH_CHECK(t.is_contiguous(), "pyg_tc: ", name, " must be contiguous");
}

// A device attribute (host side), queried once per device and cached: the
// launchers ask on every call. Devices past the cache are queried each time.
template <cudaDeviceAttr A>
inline int device_attr(int device) {
  static int cache[64] = {0};  // 0 = not queried yet (the attributes used are positive)
  const int d = device < 0 ? 0 : device;
  if (d < 64 && cache[d] != 0) return cache[d];
  int v = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&v, A, d));
  if (d < 64) cache[d] = v;
  return v;
}

__host__ __device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace pyg_tc
