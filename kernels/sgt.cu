// TC-GNN tensor-core kernels: SpMM and SDDMM over SGT blocks (16 rows x 8
// condensed columns, pyg_tc/formats/sgt.py), with mma.sync on sm_80+.
//
// Work: one CTA per unit (window, block range, slot) and feature slice; its
// warps take the unit's blocks (SpMM: 16x8 blocks for TF32, block pairs for
// the k16 half MMA; SDDMM: 16x16 tiles = block pairs, Algorithm 3) in turn.
//
// Differences from the published TC-GNN code, by design:
// * No rescans: a block's A tile comes from its 128-bit mask and the cells of
//   that block only (rank of a set bit = offset of its value), read straight
//   into MMA fragments; no shared-memory tile, no per-block edge scan.
// * Fragments are loaded from global memory with 16-byte vector loads: the
//   MMA's n (SpMM) or k (SDDMM) index is mapped to features so that each
//   thread's elements are contiguous (out[., n*J + j] for n-tile j), so the
//   gathered rows are read once, coalesced, with no shared-memory staging.
// * Any width (guarded tail, scalar path for odd widths), any row count
//   (stores past the last row are skipped), padding columns read as zero.
// * Precision: fp32 inputs use TF32 MMAs, or 3xTF32 (big/small split,
//   fp32-accurate) when precision = 1; fp16/bf16 use k16 MMAs with the edge
//   values split into hi + lo halves (two MMAs), so weights keep ~fp32
//   precision. Accumulation is fp32.
// * Deterministic: windows longer than one unit write fp32 partial tiles to
//   workspace slots, reduced in slot order; warps of a CTA are combined in
//   warp order through shared memory. No atomics.

#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <type_traits>

#include "common.cuh"

namespace pyg_tc {
namespace {

// ---------------------------------------------------------------- MMA helpers
__device__ __forceinline__ uint32_t tf32(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return r;
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
  const uint32_t A0 = tf32(a[0]), A1 = tf32(a[1]), A2 = tf32(a[2]), A3 = tf32(a[3]);
  const uint32_t B0 = tf32(b0), B1 = tf32(b1);
  if (SPLIT) {
    mma_tf32(d, tf32(a[0] - __uint_as_float(A0)), tf32(a[1] - __uint_as_float(A1)),
             tf32(a[2] - __uint_as_float(A2)), tf32(a[3] - __uint_as_float(A3)), B0, B1);
    mma_tf32(d, A0, A1, A2, A3, tf32(b0 - __uint_as_float(B0)), tf32(b1 - __uint_as_float(B1)));
  }
  mma_tf32(d, A0, A1, A2, A3, B0, B1);
}

__device__ __forceinline__ uint32_t bits16(__half h) { return __half_as_ushort(h); }
__device__ __forceinline__ uint32_t bits16(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }
template <typename T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) { return bits16(lo) | (bits16(hi) << 16); }

// ------------------------------------------------------------ memory helpers
// V consecutive elements of a row from feature f (zeros past F or for a
// padding column: row == nullptr). VEC: one V-wide aligned load.
template <typename T, int V, bool VEC>
__device__ __forceinline__ void load_row(T (&v)[V], const T* __restrict__ row, int f, int F) {
  if (VEC) {
    if (row != nullptr && f < F) {
      const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(row + f);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = p.v[i];
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = from_f<T>(0.f);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = (row != nullptr && f + i < F) ? row[f + i] : from_f<T>(0.f);
  }
}

// Mask word i of a block (runtime i without local memory).
__device__ __forceinline__ unsigned word(const int4& m, int i) {
  return (unsigned)(i == 0 ? m.x : i == 1 ? m.y : i == 2 ? m.z : m.w);
}

// Value of tile cell (row r, column c): bit c * 16 + r of the mask; its rank
// among the set bits is its offset in the block's cells.
__device__ __forceinline__ float cell(const int4& m, const int (&pre)[4], const float* __restrict__ vals,
                                      int c, int r) {
  const unsigned w = word(m, c >> 1);
  const int bit = (c & 1) * 16 + r;
  if (!((w >> bit) & 1u)) return 0.f;
  return vals[pre[c >> 1] + __popc(w & ((1u << bit) - 1u))];
}

__device__ __forceinline__ void prefix(const int4& m, int base, int (&pre)[4]) {
  pre[0] = base;
  pre[1] = base + __popc((unsigned)m.x);
  pre[2] = pre[1] + __popc((unsigned)m.y);
  pre[3] = pre[2] + __popc((unsigned)m.z);
}

// Output index of cell (r, c) of a block or -1.
__device__ __forceinline__ int cell_index(const int4& m, const int (&pre)[4], int c, int r) {
  const unsigned w = word(m, c >> 1);
  const int bit = (c & 1) * 16 + r;
  if (!((w >> bit) & 1u)) return -1;
  return pre[c >> 1] + __popc(w & ((1u << bit) - 1u));
}

// ------------------------------------------------------------------ SpMM
// Thread (g = lane / 4, t = lane % 4) owns, per chunk c and n-tile j, the
// accumulators of rows g and g + 8 at features
//   f0 + c * 8J + (2t) * J + j   and   f0 + c * 8J + (2t + 1) * J + j,
// i.e. 2J contiguous features per row and chunk.
template <typename T, int J, int NC>
struct SpmmAcc {
  float d[NC][J][4];
};

template <typename T, int J, int NC>
__device__ __forceinline__ void store_tile(const SpmmAcc<T, J, NC>& acc, int win, int slot, int f0,
                                           int R, int F, T* __restrict__ out, float* __restrict__ ws,
                                           const float* __restrict__ diag, int64_t diag_stride,
                                           const T* __restrict__ x, int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const int64_t row = (int64_t)win * 16 + r;
    if (slot < 0 && row >= R) continue;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
#pragma unroll
        for (int j = 0; j < J; ++j) {
          const int f = f0 + c * 8 * J + (2 * t + q) * J + j;
          if (f >= F) continue;
          float v = acc.d[c][j][2 * h + q];
          if (slot >= 0) {
            ws[((int64_t)slot * 16 + r) * F + f] = v;
          } else {
            if (diag != nullptr) v += diag[row * diag_stride] * to_f(x[row * F + f]);
            out[row * F + f] = from_f<T>(v);
          }
        }
      }
    }
  }
}

// Combine the warps' accumulators in warp order (shared memory), so warp 0
// holds the CTA's sum.
template <int NREG>
__device__ __forceinline__ bool reduce_warps(float* regs, float* smem, int warp, int lane, int W) {
  if (W == 1) return true;
  if (warp > 0) {
#pragma unroll
    for (int k = 0; k < NREG; ++k) smem[((warp - 1) * NREG + k) * 32 + lane] = regs[k];
  }
  __syncthreads();
  if (warp > 0) return false;
  for (int w = 1; w < W; ++w) {
#pragma unroll
    for (int k = 0; k < NREG; ++k) regs[k] += smem[((w - 1) * NREG + k) * 32 + lane];
  }
  return true;
}

// fp32 features, TF32 / 3xTF32 MMA m16n8k8: one block (16 x 8) per step.
template <int J, int NC, bool VEC, bool SPLIT>
__global__ void __launch_bounds__(256)
sgt_spmm_f32(const int4* __restrict__ units, const int* __restrict__ cols, const int4* __restrict__ mask,
             const int* __restrict__ cell_ptr, const float* __restrict__ vals,
             const float* __restrict__ x, float* __restrict__ out, float* __restrict__ ws,
             const float* __restrict__ diag, int64_t diag_stride, int R, int F) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int4 un = units[blockIdx.x];
  const int f0 = blockIdx.y * (NC * 8 * J);
  SpmmAcc<float, J, NC> acc;
#pragma unroll
  for (int c = 0; c < NC; ++c)
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc.d[c][j][k] = 0.f;

  // Two blocks per step (b and b + W): their metadata, cell values and
  // gathered rows are all in flight before the first MMA.
  for (int b = un.y + warp; b < un.z; b += 2 * W) {
    float a[2][4];
    const float* rows[2][2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int bb = b + s * W;
      if (bb >= un.z) {
        a[s][0] = a[s][1] = a[s][2] = a[s][3] = 0.f;
        rows[s][0] = rows[s][1] = nullptr;
        continue;
      }
      const int4 m = mask[bb];
      int pre[4];
      prefix(m, cell_ptr[bb], pre);
      a[s][0] = cell(m, pre, vals, t, g);
      a[s][1] = cell(m, pre, vals, t, g + 8);
      a[s][2] = cell(m, pre, vals, t + 4, g);
      a[s][3] = cell(m, pre, vals, t + 4, g + 8);
      const int n0 = cols[bb * 8 + t], n1 = cols[bb * 8 + t + 4];
      rows[s][0] = n0 >= 0 ? x + (int64_t)n0 * F : nullptr;
      rows[s][1] = n1 >= 0 ? x + (int64_t)n1 * F : nullptr;
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      float xv[2][2][J];
      const int f = f0 + c * 8 * J + g * J;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        load_row<float, J, VEC>(xv[s][0], rows[s][0], f, F);
        load_row<float, J, VEC>(xv[s][1], rows[s][1], f, F);
      }
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int j = 0; j < J; ++j) mma_f32<SPLIT>(acc.d[c][j], a[s], xv[s][0][j], xv[s][1][j]);
    }
  }
  if (!reduce_warps<NC * J * 4>(&acc.d[0][0][0], smem, warp, lane, W)) return;
  store_tile<float, J, NC>(acc, un.x, un.w, f0, R, F, out, ws, diag, diag_stride, x, g, t);
}

// fp16 / bf16 features, k16 MMA: two consecutive blocks of the unit per step
// (K = 16 condensed columns); edge values split into hi + lo halves.
template <typename T, int J, bool VEC>
__global__ void __launch_bounds__(256)
sgt_spmm_f16(const int4* __restrict__ units, const int* __restrict__ cols, const int4* __restrict__ mask,
             const int* __restrict__ cell_ptr, const float* __restrict__ vals,
             const T* __restrict__ x, T* __restrict__ out, float* __restrict__ ws,
             const float* __restrict__ diag, int64_t diag_stride, int R, int F) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int4 un = units[blockIdx.x];
  const int f0 = blockIdx.y * (8 * J);
  SpmmAcc<T, J, 1> acc;
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int k = 0; k < 4; ++k) acc.d[0][j][k] = 0.f;

  // Two block pairs per step (b and b + 2W), loads in flight together.
  for (int b0 = un.y + 2 * warp; b0 < un.z; b0 += 4 * W) {
    uint32_t ahi[2][4], alo[2][4];
    T xv[2][4][J];
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int b = b0 + p * 2 * W;
      float a[2][4];
      const T* rows[4] = {nullptr, nullptr, nullptr, nullptr};
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int bb = b + s;
        a[s][0] = a[s][1] = a[s][2] = a[s][3] = 0.f;
        if (bb >= un.z) continue;
        const int4 m = mask[bb];
        int pre[4];
        prefix(m, cell_ptr[bb], pre);
        a[s][0] = cell(m, pre, vals, 2 * t, g);
        a[s][1] = cell(m, pre, vals, 2 * t + 1, g);
        a[s][2] = cell(m, pre, vals, 2 * t, g + 8);
        a[s][3] = cell(m, pre, vals, 2 * t + 1, g + 8);
        const int n0 = cols[bb * 8 + 2 * t], n1 = cols[bb * 8 + 2 * t + 1];
        rows[2 * s] = n0 >= 0 ? x + (int64_t)n0 * F : nullptr;
        rows[2 * s + 1] = n1 >= 0 ? x + (int64_t)n1 * F : nullptr;
      }
      // A fragments (hi and lo): {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int s = k >> 1, h = k & 1;  // block, row half
        const float v0 = a[s][2 * h], v1 = a[s][2 * h + 1];
        const T h0 = from_f<T>(v0), h1 = from_f<T>(v1);
        ahi[p][k] = pack2(h0, h1);
        alo[p][k] = pack2(from_f<T>(v0 - to_f(h0)), from_f<T>(v1 - to_f(h1)));
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) load_row<T, J, VEC>(xv[p][k], rows[k], f0 + g * J, F);
    }
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const uint32_t b0r = pack2(xv[p][0][j], xv[p][1][j]), b1r = pack2(xv[p][2][j], xv[p][3][j]);
        mma_k16<T>(acc.d[0][j], alo[p], b0r, b1r);
        mma_k16<T>(acc.d[0][j], ahi[p], b0r, b1r);
      }
  }
  if (!reduce_warps<J * 4>(&acc.d[0][0][0], smem, warp, lane, W)) return;
  store_tile<T, J, 1>(acc, un.x, un.w, f0, R, F, out, ws, diag, diag_stride, x, g, t);
}

// Split windows: out[w*16 + r, f] = sum of the window's slots in slot order (+ diag).
template <typename T>
__global__ void sgt_reduce(const int* __restrict__ heavy, const int* __restrict__ heavy_ptr,
                           const float* __restrict__ ws, T* __restrict__ out, const float* __restrict__ diag,
                           int64_t diag_stride, const T* __restrict__ x, int R, int F) {
  const int h = blockIdx.x, r = threadIdx.y, f = blockIdx.y * 32 + threadIdx.x;
  const int64_t row = (int64_t)heavy[h] * 16 + r;
  if (row >= R || f >= F) return;
  float s = 0.f;
  for (int k = heavy_ptr[h]; k < heavy_ptr[h + 1]; ++k) s += ws[((int64_t)k * 16 + r) * F + f];
  if (diag != nullptr) s += diag[row * diag_stride] * to_f(x[row * F + f]);
  out[row * F + f] = from_f<T>(s);
}

// ------------------------------------------------------------------ SDDMM
// One 16 x 16 output tile (blocks b, b + 1) per warp step; K runs over the
// features. fp32: k index kk of step j is feature fc + kk * J + j, so the
// thread's A (rows g, g + 8) and B (column node g) elements at kk = t and
// t + 4 are J contiguous features each.
template <int J, bool VEC, bool SPLIT>
__global__ void __launch_bounds__(256)
sgt_sddmm_f32(const int4* __restrict__ units, const int* __restrict__ cols, const int4* __restrict__ mask,
              const int* __restrict__ cell_ptr, const float* __restrict__ A, const float* __restrict__ Bm,
              float* __restrict__ out, int R, int F) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int4 un = units[blockIdx.x];
  const int64_t ra = (int64_t)un.x * 16 + g, rb = ra + 8;
  const float* pa0 = ra < R ? A + ra * F : nullptr;
  const float* pa1 = rb < R ? A + rb * F : nullptr;
  for (int b = un.y + 2 * warp; b < un.z; b += 2 * W) {
    const bool two = b + 1 < un.z;
    const int n0 = cols[b * 8 + g], n1 = two ? cols[(b + 1) * 8 + g] : -1;
    const float* pb0 = n0 >= 0 ? Bm + (int64_t)n0 * F : nullptr;
    const float* pb1 = n1 >= 0 ? Bm + (int64_t)n1 * F : nullptr;
    float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
    for (int fc = 0; fc < F; fc += 8 * J) {
      float a0[J], a1[J], a2[J], a3[J], b0[J], b1[J], c0[J], c1[J];
      load_row<float, J, VEC>(a0, pa0, fc + t * J, F);
      load_row<float, J, VEC>(a1, pa1, fc + t * J, F);
      load_row<float, J, VEC>(a2, pa0, fc + (t + 4) * J, F);
      load_row<float, J, VEC>(a3, pa1, fc + (t + 4) * J, F);
      load_row<float, J, VEC>(b0, pb0, fc + t * J, F);
      load_row<float, J, VEC>(b1, pb0, fc + (t + 4) * J, F);
      load_row<float, J, VEC>(c0, pb1, fc + t * J, F);
      load_row<float, J, VEC>(c1, pb1, fc + (t + 4) * J, F);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const float af[4] = {a0[j], a1[j], a2[j], a3[j]};
        mma_f32<SPLIT>(d0, af, b0[j], b1[j]);
        mma_f32<SPLIT>(d1, af, c0[j], c1[j]);
      }
    }
    // d[k]: row g + 8 * (k >> 1), column 2t + (k & 1) of the block
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (s == 1 && !two) break;
      const int bb = b + s;
      const int4 m = mask[bb];
      int pre[4];
      prefix(m, cell_ptr[bb], pre);
      const float* d = s ? d1 : d0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int idx = cell_index(m, pre, 2 * t + (k & 1), g + 8 * (k >> 1));
        if (idx >= 0) out[idx] = d[k];
      }
    }
  }
}

// fp16 / bf16 inputs, k16 MMA: pair p = kk / 2 of step j is features
// fc + p * 2J + 2j + (kk & 1); the thread's pairs p = t and t + 4 are 2J
// contiguous features, and each 32-bit word of them is one fragment register.
template <typename T, int J, bool VEC>
__global__ void __launch_bounds__(256)
sgt_sddmm_f16(const int4* __restrict__ units, const int* __restrict__ cols, const int4* __restrict__ mask,
              const int* __restrict__ cell_ptr, const T* __restrict__ A, const T* __restrict__ Bm,
              T* __restrict__ out, int R, int F) {
  constexpr int V = 2 * J;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int4 un = units[blockIdx.x];
  const int64_t ra = (int64_t)un.x * 16 + g, rb = ra + 8;
  const T* pa0 = ra < R ? A + ra * F : nullptr;
  const T* pa1 = rb < R ? A + rb * F : nullptr;
  for (int b = un.y + 2 * warp; b < un.z; b += 2 * W) {
    const bool two = b + 1 < un.z;
    const int n0 = cols[b * 8 + g], n1 = two ? cols[(b + 1) * 8 + g] : -1;
    const T* pb0 = n0 >= 0 ? Bm + (int64_t)n0 * F : nullptr;
    const T* pb1 = n1 >= 0 ? Bm + (int64_t)n1 * F : nullptr;
    float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
    for (int fc = 0; fc < F; fc += 16 * J) {
      T a0[V], a1[V], a2[V], a3[V], b0[V], b1[V], c0[V], c1[V];
      load_row<T, V, VEC>(a0, pa0, fc + t * V, F);
      load_row<T, V, VEC>(a1, pa1, fc + t * V, F);
      load_row<T, V, VEC>(a2, pa0, fc + (t + 4) * V, F);
      load_row<T, V, VEC>(a3, pa1, fc + (t + 4) * V, F);
      load_row<T, V, VEC>(b0, pb0, fc + t * V, F);
      load_row<T, V, VEC>(b1, pb0, fc + (t + 4) * V, F);
      load_row<T, V, VEC>(c0, pb1, fc + t * V, F);
      load_row<T, V, VEC>(c1, pb1, fc + (t + 4) * V, F);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const uint32_t af[4] = {pack2(a0[2 * j], a0[2 * j + 1]), pack2(a1[2 * j], a1[2 * j + 1]),
                                pack2(a2[2 * j], a2[2 * j + 1]), pack2(a3[2 * j], a3[2 * j + 1])};
        mma_k16<T>(d0, af, pack2(b0[2 * j], b0[2 * j + 1]), pack2(b1[2 * j], b1[2 * j + 1]));
        mma_k16<T>(d1, af, pack2(c0[2 * j], c0[2 * j + 1]), pack2(c1[2 * j], c1[2 * j + 1]));
      }
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (s == 1 && !two) break;
      const int bb = b + s;
      const int4 m = mask[bb];
      int pre[4];
      prefix(m, cell_ptr[bb], pre);
      const float* d = s ? d1 : d0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int idx = cell_index(m, pre, 2 * t + (k & 1), g + 8 * (k >> 1));
        if (idx >= 0) out[idx] = from_f<T>(d[k]);
      }
    }
  }
}

// ------------------------------------------------------------------ host
void check_sgt(const at::Tensor& units, const at::Tensor& cols, const at::Tensor& mask,
               const at::Tensor& cell_ptr) {
  check_index(units, "units");
  check_index(cols, "cols");
  check_index(mask, "mask");
  check_index(cell_ptr, "cell_ptr");
  TORCH_CHECK(units.dim() == 2 && units.size(1) == 4, "pyg_tc: units must be [U, 4]");
  TORCH_CHECK(mask.numel() == cols.numel() / 2 && cell_ptr.numel() == cols.numel() / 8 + 1,
              "pyg_tc: SGT cols / mask / cell_ptr sizes disagree");
}

int warps_of(int64_t warps) { return warps == 1 || warps == 2 || warps == 4 || warps == 8 ? (int)warps : 4; }

template <typename T>
bool vec_ok(const at::Tensor& t, int V) {
  return t.size(1) % V == 0 && aligned16(t.data_ptr()) && (reinterpret_cast<uintptr_t>(t.data_ptr()) % (V * sizeof(T)) == 0);
}

at::Tensor sgt_spmm_cuda(const at::Tensor& units, const at::Tensor& cols, const at::Tensor& mask,
                         const at::Tensor& cell_ptr, const at::Tensor& heavy, const at::Tensor& heavy_ptr,
                         int64_t num_slots, const at::Tensor& cell_val, const at::Tensor& x_in,
                         const std::optional<at::Tensor>& diag, int64_t num_rows, int64_t precision,
                         int64_t warps, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                         const at::Tensor&) {
  check_sgt(units, cols, mask, cell_ptr);
  check_index(heavy, "heavy");
  check_index(heavy_ptr, "heavy_ptr");
  TORCH_CHECK(x_in.is_cuda() && x_in.dim() == 2, "pyg_tc: x must be a 2-D CUDA tensor");
  TORCH_CHECK(cell_val.is_cuda() && cell_val.scalar_type() == at::kFloat && cell_val.dim() == 1,
              "pyg_tc: cell values must be a 1-D float32 CUDA tensor");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const at::Tensor vals = cell_val.contiguous();
  const int R = (int)num_rows, F = (int)x.size(1);
  at::Tensor out = at::empty({R, F}, x.options());
  if (R == 0 || F == 0) return out;
  const float* dp = nullptr;
  int64_t ds = 0;
  at::Tensor dg;
  if (diag.has_value()) {
    dg = diag->contiguous();
    TORCH_CHECK(dg.scalar_type() == at::kFloat && (dg.numel() == 1 || dg.numel() == R),
                "pyg_tc: diag must be float32 with 1 or num_rows entries");
    TORCH_CHECK(x.size(0) == R, "pyg_tc: diag needs a square adjacency");
    dp = dg.data_ptr<float>();
    ds = dg.numel() == 1 ? 0 : 1;
  }
  at::Tensor ws = at::empty({num_slots * 16, F}, x.options().dtype(at::kFloat));
  const int W = warps_of(warps);
  const int U = (int)units.size(0);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto* un = reinterpret_cast<const int4*>(units.data_ptr<int>());
  const auto* mk = reinterpret_cast<const int4*>(mask.data_ptr<int>());
  const int* cl = cols.data_ptr<int>();
  const int* cp = cell_ptr.data_ptr<int>();
  const float* vp = vals.data_ptr<float>();
  float* wp = ws.data_ptr<float>();
  auto smem = [&](int nreg) { return (size_t)(W - 1) * nreg * 32 * sizeof(float); };
  if (x.scalar_type() == at::kFloat) {
    const float* xp = x.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const bool split = precision != 0;
    auto run = [&](auto kern, int slice, int nreg) {
      if (U > 0)
        kern<<<dim3(U, (F + slice - 1) / slice), 32 * W, smem(nreg), stream>>>(un, cl, mk, cp, vp, xp, op, wp,
                                                                               dp, ds, R, F);
    };
    const bool vec = vec_ok<float>(x, 4) && vec_ok<float>(out, 4);
    if (F > 32 && vec) {
      split ? run(sgt_spmm_f32<4, 2, true, true>, 64, 32) : run(sgt_spmm_f32<4, 2, true, false>, 64, 32);
    } else if (F > 16 && vec) {
      split ? run(sgt_spmm_f32<4, 1, true, true>, 32, 16) : run(sgt_spmm_f32<4, 1, true, false>, 32, 16);
    } else if (F > 8 && vec_ok<float>(x, 2) && vec_ok<float>(out, 2)) {
      split ? run(sgt_spmm_f32<2, 1, true, true>, 16, 8) : run(sgt_spmm_f32<2, 1, true, false>, 16, 8);
    } else {
      split ? run(sgt_spmm_f32<1, 1, false, true>, 8, 4) : run(sgt_spmm_f32<1, 1, false, false>, 8, 4);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (heavy.numel() > 0) {
      sgt_reduce<float><<<dim3(heavy.numel(), (F + 31) / 32), dim3(32, 16), 0, stream>>>(
          heavy.data_ptr<int>(), heavy_ptr.data_ptr<int>(), wp, op, dp, ds, xp, R, F);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
  }
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16,
              "pyg_tc: sgt_spmm supports float32, float16 and bfloat16");
  auto half_path = [&](auto tag) {
    using T = decltype(tag);
    const T* xp = reinterpret_cast<const T*>(x.data_ptr());
    T* op = reinterpret_cast<T*>(out.data_ptr());
    auto run = [&](auto kern, int slice, int nreg) {
      if (U > 0)
        kern<<<dim3(U, (F + slice - 1) / slice), 32 * W, smem(nreg), stream>>>(un, cl, mk, cp, vp, xp, op, wp,
                                                                               dp, ds, R, F);
    };
    if (F > 32 && vec_ok<T>(x, 8) && vec_ok<T>(out, 8)) run(sgt_spmm_f16<T, 8, true>, 64, 32);
    else if (F > 16 && vec_ok<T>(x, 4) && vec_ok<T>(out, 4)) run(sgt_spmm_f16<T, 4, true>, 32, 16);
    else run(sgt_spmm_f16<T, 2, false>, 16, 8);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (heavy.numel() > 0) {
      sgt_reduce<T><<<dim3(heavy.numel(), (F + 31) / 32), dim3(32, 16), 0, stream>>>(
          heavy.data_ptr<int>(), heavy_ptr.data_ptr<int>(), wp, op, dp, ds, xp, R, F);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  };
  if (x.scalar_type() == at::kHalf) half_path(__half());
  else half_path(__nv_bfloat16());
  return out;
}

at::Tensor sgt_sddmm_cuda(const at::Tensor& units, const at::Tensor& cols, const at::Tensor& mask,
                          const at::Tensor& cell_ptr, const at::Tensor&, const at::Tensor&, int64_t,
                          const at::Tensor& a_in, const at::Tensor& b_in, int64_t num_cells,
                          int64_t precision, int64_t warps, const at::Tensor&, const at::Tensor&,
                          const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          int64_t, const at::Tensor&) {
  check_sgt(units, cols, mask, cell_ptr);
  TORCH_CHECK(a_in.is_cuda() && b_in.is_cuda() && a_in.dim() == 2 && b_in.dim() == 2 &&
                  a_in.size(1) == b_in.size(1) && a_in.scalar_type() == b_in.scalar_type(),
              "pyg_tc: sgt_sddmm needs 2-D CUDA a, b of one dtype and width");
  const c10::cuda::CUDAGuard guard(a_in.device());
  const at::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  const int R = (int)a.size(0), F = (int)a.size(1);
  at::Tensor out = at::empty({num_cells}, a.options());
  if (num_cells == 0) return out;
  if (F == 0) return out.zero_();
  const int W = warps_of(warps);
  const int U = (int)units.size(0);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto* un = reinterpret_cast<const int4*>(units.data_ptr<int>());
  const auto* mk = reinterpret_cast<const int4*>(mask.data_ptr<int>());
  const int* cl = cols.data_ptr<int>();
  const int* cp = cell_ptr.data_ptr<int>();
  if (a.scalar_type() == at::kFloat) {
    const float* ap = a.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const bool split = precision != 0;
    auto run = [&](auto kern) { kern<<<U, 32 * W, 0, stream>>>(un, cl, mk, cp, ap, bp, op, R, F); };
    const bool v4 = vec_ok<float>(a, 4) && vec_ok<float>(b, 4);
    const bool v2 = vec_ok<float>(a, 2) && vec_ok<float>(b, 2);
    if (F >= 32 && v4) split ? run(sgt_sddmm_f32<4, true, true>) : run(sgt_sddmm_f32<4, true, false>);
    else if (F >= 16 && v2) split ? run(sgt_sddmm_f32<2, true, true>) : run(sgt_sddmm_f32<2, true, false>);
    else split ? run(sgt_sddmm_f32<1, false, true>) : run(sgt_sddmm_f32<1, false, false>);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
  }
  TORCH_CHECK(a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16,
              "pyg_tc: sgt_sddmm supports float32, float16 and bfloat16");
  auto half_path = [&](auto tag) {
    using T = decltype(tag);
    const T* ap = reinterpret_cast<const T*>(a.data_ptr());
    const T* bp = reinterpret_cast<const T*>(b.data_ptr());
    T* op = reinterpret_cast<T*>(out.data_ptr());
    auto run = [&](auto kern) { kern<<<U, 32 * W, 0, stream>>>(un, cl, mk, cp, ap, bp, op, R, F); };
    if (F >= 64 && vec_ok<T>(a, 8) && vec_ok<T>(b, 8)) run(sgt_sddmm_f16<T, 4, true>);
    else if (F >= 32 && vec_ok<T>(a, 4) && vec_ok<T>(b, 4)) run(sgt_sddmm_f16<T, 2, true>);
    else run(sgt_sddmm_f16<T, 1, false>);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (a.scalar_type() == at::kHalf) half_path(__half());
  else half_path(__nv_bfloat16());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("sgt_spmm", &sgt_spmm_cuda);
  m.impl("sgt_sddmm", &sgt_sddmm_cuda);
}

}  // namespace pyg_tc
