// Device-side dtype helpers shared by every kernel family: fp32 conversion of
// fp32 / fp16 / bf16, packed 16-byte vector loads. Every kernel accumulates in
// fp32 registers and converts once at the store, so half inputs never
// overflow in an intermediate sum. No torch headers: kernel translation
// units stay light.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

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

// ldg(ptr): a load through the read-only data path (ld.global.nc), for data
// that no thread writes during the kernel. nvcc chooses that path by itself
// only for `const __restrict__` kernel arguments; pyg_tc kernels take one
// params struct (whose pointers it cannot prove read-only), so a kernel whose
// loads gain from that path says it (sgt, maxk; the csr SpMM measured the same
// speed with plain loads, kernels/README.md). __ldg is an `asm volatile` in
// CUDA 13: the compiler keeps such loads in program order, so place them where
// they should issue. The word is that of the type (fp32 words for fp32 data,
// integer words otherwise), so the load is the one the compiler would have
// emitted.
template <typename U, bool FP32 = false> struct LdgWord;
template <typename U> struct LdgWord<U, false> {
  static_assert(sizeof(U) == 1 || sizeof(U) == 2 || sizeof(U) == 4 || sizeof(U) == 8 || sizeof(U) == 16,
                "ldg: 1, 2, 4, 8 or 16 bytes");
  using type = std::conditional_t<
      sizeof(U) == 16, uint4,
      std::conditional_t<sizeof(U) == 8, uint2,
                         std::conditional_t<sizeof(U) == 4, unsigned,
                                            std::conditional_t<sizeof(U) == 2, unsigned short, unsigned char>>>>;
};
template <typename U> struct LdgWord<U, true> {
  using type = std::conditional_t<sizeof(U) == 16, float4, std::conditional_t<sizeof(U) == 8, float2, float>>;
};
template <typename U> struct IsFp32Data : std::is_same<U, float> {};
template <int V> struct IsFp32Data<Pack<float, V>> : std::true_type {};
template <> struct IsFp32Data<float4> : std::true_type {};
template <> struct IsFp32Data<float2> : std::true_type {};

template <typename U>
__device__ __forceinline__ U ldg(const U* p) {
  using W = typename LdgWord<std::remove_cv_t<U>, IsFp32Data<std::remove_cv_t<U>>::value>::type;
  static_assert(sizeof(W) == sizeof(U), "ldg: word size");
  const W w = __ldg(reinterpret_cast<const W*>(p));
  U u;
  memcpy(&u, &w, sizeof(U));
  return u;
}

// V fp32 values at p: V / 4 16-byte loads when V is a multiple of 4 (a
// vector path, whose host rule checks the alignment), else scalar loads.
template <int V>
__device__ __forceinline__ void load_floats(float (&dst)[V], const float* p) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      const float4 w = *reinterpret_cast<const float4*>(p + i);
      dst[i] = w.x;
      dst[i + 1] = w.y;
      dst[i + 2] = w.z;
      dst[i + 3] = w.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) dst[i] = p[i];
  }
}

// The store of load_floats.
template <int V>
__device__ __forceinline__ void store_floats(float* p, const float (&src)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 4)
      *reinterpret_cast<float4*>(p + i) = make_float4(src[i], src[i + 1], src[i + 2], src[i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = src[i];
  }
}

// Elements per 16-byte vector for a given scalar.
template <typename T> constexpr int vec16() { return 16 / sizeof(T); }

// Packed pairs of a half type (HFMA2 arithmetic, docs/half.md): Half2<T>
// is __half2 / __nv_bfloat162; mirror2 puts one value in both halves; to_f2
// converts a pair to fp32.
template <typename T> struct Half2Of;
template <> struct Half2Of<__half> { using type = __half2; };
template <> struct Half2Of<__nv_bfloat16> { using type = __nv_bfloat162; };
template <typename T> using Half2 = typename Half2Of<T>::type;

__device__ __forceinline__ __half2 mirror2(__half v) { return __half2half2(v); }
__device__ __forceinline__ __nv_bfloat162 mirror2(__nv_bfloat16 v) { return __bfloat162bfloat162(v); }
__device__ __forceinline__ float2 to_f2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 to_f2(__nv_bfloat162 v) { return __bfloat1622float2(v); }

// The power of two s >= m (m >= 0), for scaling a batch of weights into
// (0, 1] exactly (HalfGNN's discretised scaling); 1 when m is 0 or s would
// not be finite (the batch's sum then fails the finite check and is redone
// in fp32).
__device__ __forceinline__ float pow2_ceil(float m) {
  unsigned b = __float_as_uint(m);
  if (b == 0u || b >= 0x7f000000u) return 1.f;  // 0, >= 2^127, inf, nan
  if (b & 0x7fffffu) b = (b & 0x7f800000u) + 0x00800000u;
  return __uint_as_float(b);
}

}  // namespace pyg_tc
