// TC-GNN family: device helpers shared by the SpMM and the SDDMM: the MMA
// wrappers (TF32 / 3xTF32 m16n8k8, fp16 / bf16 m16n8k16), fragment packing,
// row loads and the decoding of a block's cells from its 128-bit mask.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"

namespace pyg_tc {
namespace {

// ---------------------------------------------------------------- MMA helpers
// TF32 operand bits of v (the MMA reads the top 19 bits of an fp32 register).
// SPLIT (3xTF32): big = v rounded to nearest TF32, ties away (cvt.rna) by an
// integer add on the bits, and small = v - big, exact (|small| <= 2^-11 |v|),
// passed as fp32 bits: the MMA drops its low 13 bits, an error of at most
// 2^-21 |v| of either sign. Three instructions; cvt.rna.tf32 alone is four
// SASS instructions on sm_90 (measured in the SpMM's instruction profile).
// A NaN or Inf input can round to garbage in `big`, but `small` = v - big is
// then NaN and carries it into the product. Plain TF32 (SPLIT = false) passes
// the bits unchanged: the MMA truncates (round toward zero).
template <bool SPLIT>
__device__ __forceinline__ void tf32_split(float v, uint32_t& big, uint32_t& small) {
  if (SPLIT) {
    big = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
    small = __float_as_uint(v - __uint_as_float(big));
  } else {
    big = __float_as_uint(v);
    small = 0u;
  }
}

// The same split with big = v truncated to TF32, passed as v's own bits (the
// MMA truncates them): two instructions. small = v - trunc(v) has v's sign
// and |small| < 2^-10 |v|; the MMA's truncation of it errs by < 2^-20 |v|,
// toward zero (about 2^-22 |v| on average). Used for the feature operand of
// the SpMM, whose cell operand is split with rounding: its small part has
// either sign, so the dropped small x small term stays unbiased.
template <bool SPLIT>
__device__ __forceinline__ void tf32_split_trunc(float v, uint32_t& big, uint32_t& small) {
  big = __float_as_uint(v);
  small = SPLIT ? __float_as_uint(v - __uint_as_float(big & 0xffffe000u)) : 0u;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

template <typename T>
__device__ __forceinline__ void mma_k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same<T, __half>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

// fp32 product accumulated as TF32 (SPLIT = false) or 3xTF32: a*b ~ ab*bb + ab*bs + as*bb.
template <bool SPLIT>
__device__ __forceinline__ void mma_f32(float (&d)[4], const float (&a)[4], float b0, float b1) {
  uint32_t A[4], As[4], B0, B0s, B1, B1s;
#pragma unroll
  for (int k = 0; k < 4; ++k) tf32_split<SPLIT>(a[k], A[k], As[k]);
  tf32_split<SPLIT>(b0, B0, B0s);
  tf32_split<SPLIT>(b1, B1, B1s);
  if (SPLIT) {
    mma_tf32(d, As[0], As[1], As[2], As[3], B0, B1);
    mma_tf32(d, A[0], A[1], A[2], A[3], B0s, B1s);
  }
  mma_tf32(d, A[0], A[1], A[2], A[3], B0, B1);
}

__device__ __forceinline__ uint32_t bits16(__half h) { return __half_as_ushort(h); }
__device__ __forceinline__ uint32_t bits16(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }
template <typename T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) { return bits16(lo) | (bits16(hi) << 16); }

// ------------------------------------------------------------ memory helpers
// V consecutive elements of a row from feature f (zeros past F or for a
// padding column: row == nullptr). VEC: one V-wide aligned load. The rows are
// read-only: loads through ldg (ld.global.nc).
template <typename T, int V, bool VEC>
__device__ __forceinline__ void load_row(T (&v)[V], const T* __restrict__ row, int f, int F) {
  if (VEC) {
    if (row != nullptr && f < F) {
      const Pack<T, V> p = ldg(reinterpret_cast<const Pack<T, V>*>(row + f));
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = p.v[i];
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = from_f<T>(0.f);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = (row != nullptr && f + i < F) ? ldg(row + f + i) : from_f<T>(0.f);
  }
}

// Cells of one block in the k16 fragment layout, from the block's 128-bit
// mask (bit c * 16 + r for row r, column c) and the offset of its first cell:
// a set bit's rank is its cell's offset. Lane (g, t) holds rows g and g + 8 of
// columns 2t and 2t + 1: bits g + 8j of word t (row g + 8 (j & 1), column
// 2t + (j >> 1)), which is the m16n8 accumulator layout, the fp16/bf16
// m16n8k16 A operand of one 8-column half, and the TF32 m16n8k8 A operand
// with its k index permuted (hardware k = t, t + 4 <-> columns 2t, 2t + 1,
// the B rows permuted alike). Straight-line code on named words: no
// runtime-indexed array (those went to local memory).
//
// lane_cells: the lane's four values, v[j] = V(rank) or 0 for an empty cell,
// from word t and the offset of its first cell; lm = (1 << g) - 1.
template <typename VF>
__device__ __forceinline__ void lane_cells(unsigned w, int first, int g, unsigned lm, VF V, float (&v)[4]) {
  const unsigned y = w >> g;  // bit 8j: cell j present
  const int r = first + __popc(w & lm);
  v[0] = (y & 1u) ? V(r) : 0.f;
  v[1] = (y & 0x100u) ? V(r + __popc(y & 0xffu)) : 0.f;
  v[2] = (y & 0x10000u) ? V(r + __popc(y & 0xffffu)) : 0.f;
  v[3] = (y & 0x1000000u) ? V(r + __popc(y & 0xffffffu)) : 0.f;
}

// The same cells as indices (-1 = empty), from the whole mask m and its word
// t, w (SDDMM).
__device__ __forceinline__ void cells_k16(const int4& m, unsigned w, int base, int g, int t, int (&idx)[4]) {
  const int p0 = __popc((unsigned)m.x), p1 = __popc((unsigned)m.y), p2 = __popc((unsigned)m.z);
  base += (t > 0 ? p0 : 0) + (t > 1 ? p1 : 0) + (t > 2 ? p2 : 0);
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // k: row g + 8 (k >> 1), column 2t + (k & 1)
    const int bit = (k & 1) * 16 + 8 * (k >> 1) + g;
    idx[k] = ((w >> bit) & 1u) ? base + __popc(w & ((1u << bit) - 1u)) : -1;
  }
}

// fp32 -> hi + lo halves of two values, packed (first value in the low bits).
template <typename T>
__device__ __forceinline__ void split2(float v0, float v1, uint32_t& hi, uint32_t& lo) {
  if constexpr (std::is_same<T, __half>::value) {
    const __half2 h = __floats2half2_rn(v0, v1);
    const float2 f = __half22float2(h);
    const __half2 l = __floats2half2_rn(v0 - f.x, v1 - f.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
    const float2 f = __bfloat1622float2(h);
    const __nv_bfloat162 l = __floats2bfloat162_rn(v0 - f.x, v1 - f.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
  }
}

}  // namespace
}  // namespace pyg_tc
