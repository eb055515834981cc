// Attention family, device side shared by the forward and backward walks:
// the lane layout, per-head reductions, the score terms, Philox 4x32-10 for
// attention dropout, and the second-pass kernels that merge the partial
// states of heavy rows in slot order (no atomics).
#pragma once

#include <c10/cuda/CUDAException.h>

#include "attn/attn_params.h"
#include "common/dtype.cuh"
#include "common/philox.cuh"
#include "common/static_switch.h"

namespace pyg_tc {
namespace attn {

constexpr int kThreads = 256;
// Loads in flight per lane: kUnroll edges of one vector, or fewer edges of
// NV vectors each; min_blocks resident blocks per SM (64 registers a thread
// for one vector per lane, 128 for four) keep enough warps in flight to hide
// the gathers' latency (unbounded, the forward's registers leave too few
// warps resident; docs/attn.md).
constexpr int kUnroll = 4;
constexpr int min_blocks(int nv) { return nv == 1 ? 4 : 2; }
constexpr int unroll_for(int nv) { return nv >= kUnroll ? 1 : kUnroll / nv; }

// Lane layout. A unit (one row, or a chunk of a heavy row) is walked by a
// group of L lanes; the group covers HS heads of LH lanes each (blockIdx.y
// selects the slice of heads). Lane q of a head holds the head's elements
// q*V + k*LH*V (k < NV) in registers, so every lane keeps its own copy of its
// head's softmax state and per-head sums are LH-lane xor shuffles. All lanes
// of a warp run the same loop trip counts (the warp's longest unit), so the
// shuffles are never divergent.
// The warp's longest unit (every lane gets it).
__device__ __forceinline__ int warp_max(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

struct Lane {
  int L, LH, g, l, q, h;
  int64_t u;
  bool hok;
  int4 un;     // the unit (row, start, end, slot); an empty one past the last unit
  int len;     // its edge count
  int maxlen;  // the warp's longest unit (every lane gets it)
  bool live;   // a real unit and a real head
};

// The lane layout and this lane's unit (every lane of the warp must call it:
// warp_max shuffles).
__device__ __forceinline__ Lane lane_of(const AttnParams& p) {
  Lane ln;
  const int lane = threadIdx.x & 31;
  ln.L = p.L;
  ln.LH = p.LH;
  ln.g = lane / p.L;
  ln.l = lane % p.L;
  ln.q = ln.l % p.LH;
  ln.h = blockIdx.y * p.HS + ln.l / p.LH;
  ln.hok = ln.h < p.H;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  ln.u = warp * (32 / p.L) + ln.g;
  const bool valid = ln.u < p.num_units;
  ln.un = valid ? p.units[ln.u] : make_int4(0, 0, 0, -1);
  ln.len = ln.un.z - ln.un.y;
  ln.maxlen = warp_max(ln.len);
  ln.live = valid && ln.hok;
  return ln;
}

// Sum over the LH lanes of one head (aligned, power of two).
__device__ __forceinline__ float head_sum(float v, int LH) {
  for (int o = LH >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float leaky(float z, float slope) { return z > 0.f ? z : z * slope; }
__device__ __forceinline__ float dleaky(float z, float slope) { return z > 0.f ? 1.f : slope; }

// Philox 4x32-10 (Salmon et al., SC'11): counter (idx, offset), key seed;
// the first output word as a 24-bit uniform in [0, 1). Same generator as
// pyg_tc.ops.attn.philox_uniform.
__device__ __forceinline__ float philox_uniform(uint64_t seed, uint64_t offset, uint64_t idx) {
  const uint4 w = philox4x32((uint32_t)idx, (uint32_t)(idx >> 32), (uint32_t)offset,
                             (uint32_t)(offset >> 32), (uint32_t)seed, (uint32_t)(seed >> 32));
  return (float)(w.x >> 8) * (1.f / 16777216.f);
}

// Attention dropout of one call: the weight of (edge e, head h) is
// keep_scale where Philox(e * H + h) >= p, else 0.
struct Dropout {
  bool on;
  float p, scale;
  uint64_t seed, offset;
  __device__ __forceinline__ explicit Dropout(const AttnParams& a)
      : on(a.p_drop > 0.f), p(a.p_drop), scale(a.keep_scale), seed(0), offset(0) {
    if (on) {
      seed = (uint64_t)a.rng[0];
      offset = (uint64_t)a.rng[1];
    }
  }
  __device__ __forceinline__ float weight(int64_t e, int H, int h) const {
    if (!on) return 1.f;
    return philox_uniform(seed, offset, (uint64_t)(e * H + h)) >= p ? scale : 0.f;
  }
};

// NV vectors of V elements of one head's row `base` (element f of the head
// at base[f]); zeros where the element is past C or `ok` is false.
template <typename T, int V, int NV>
__device__ __forceinline__ void load_head(Pack<T, V> (&buf)[NV], const T* base, int q, int LH, int C,
                                          bool ok) {
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int f = q * V + k * LH * V;
    if (ok && f < C) {
      buf[k] = *reinterpret_cast<const Pack<T, V>*>(base + f);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) buf[k].v[v] = from_f<T>(0.f);
    }
  }
}

template <typename T, int V, int NV>
__device__ __forceinline__ void load_head_f(float (&dst)[NV][V], const T* base, int q, int LH, int C,
                                            bool ok) {
  Pack<T, V> buf[NV];
  load_head<T, V, NV>(buf, base, q, LH, C, ok);
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int v = 0; v < V; ++v) dst[k][v] = to_f(buf[k].v[v]);
}

template <typename T, int V, int NV>
__device__ __forceinline__ void store_head(T* base, const float (&src)[NV][V], float scale, int q,
                                           int LH, int C) {
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int f = q * V + k * LH * V;
    if (f < C) {
      Pack<T, V> o;
#pragma unroll
      for (int v = 0; v < V; ++v) o.v[v] = from_f<T>(src[k][v] * scale);
      *reinterpret_cast<Pack<T, V>*>(base + f) = o;
    }
  }
}

template <int V, int NV>
__device__ __forceinline__ void store_head_ws(float* base, const float (&src)[NV][V], int q, int LH,
                                              int C) {
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int f = q * V + k * LH * V;
    if (f < C) {
#pragma unroll
      for (int v = 0; v < V; ++v) base[f + v] = src[k][v];
    }
  }
}

// GATv2's attention vector for this lane's elements of head h (0 where the
// element is past C or the lane is not live).
template <int V, int NV>
__device__ __forceinline__ void load_att(float (&att)[NV][V], const float* a, int h, int q, int LH, int C,
                                         bool live) {
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int f = q * V + k * LH * V + v;
      att[k][v] = (live && f < C) ? a[h * C + f] : 0.f;
    }
}

// Second passes: one block per heavy row. A hub row has hundreds of slots,
// so the slots are split over G groups of threads (thread (g, f): feature f
// of slots s0 + g, s0 + g + G, ...; G = kMergeThreads / features when the
// features fit twice) and the G partial sums are added in group order: a
// fixed order, so the result is deterministic (no atomics).
constexpr int kMergeThreads = 512;
constexpr int kMergeUnroll = 4;  // slots in flight per thread (independent partial sums)

__host__ __device__ inline int merge_groups(int features) {
  return features > 0 && features <= kMergeThreads / 2 ? kMergeThreads / features : 1;
}

// Dynamic shared memory of a merge block: per-head maxima (softmax only),
// then G x F partials and F totals when G > 1.
inline size_t merge_smem(int features, int heads) {
  const int G = merge_groups(features);
  return sizeof(float) * (heads + (G > 1 ? (size_t)(G + 1) * features : 0));
}

// Forward: merges the (acc[H*C], m[H], l[H]) states of a heavy row's slots:
// out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M), lse = M + log(sum
// ...), M the maximum over the slots (found by one warp per head). Features
// f < HC are acc elements, f >= HC the sums l of head f - HC.
template <typename T>
__device__ __forceinline__ void merge_softmax(const int* __restrict__ heavy_rows,
                                              const int* __restrict__ heavy_ptr,
                                              const float* __restrict__ ws, int stride, int H, int C,
                                              T* __restrict__ out, double* __restrict__ lse) {
  extern __shared__ float sh[];
  const int64_t row = heavy_rows[blockIdx.x];
  const int s0 = heavy_ptr[blockIdx.x], s1 = heavy_ptr[blockIdx.x + 1];
  if (s0 == s1) return;  // a padded schedule's filler entry (block-uniform, before any barrier)
  const int HC = H * C, F = HC + H, G = merge_groups(F), FT = blockDim.x / G;
  float* sM = sh;
  float* sP = sh + H;      // [G][F] (G > 1)
  float* sT = sP + G * F;  // [F] (G > 1)
  const int lane = threadIdx.x & 31;
  for (int h = threadIdx.x >> 5; h < H; h += blockDim.x >> 5) {
    float M = -INFINITY;
    for (int s = s0 + lane; s < s1; s += 32) M = fmaxf(M, ws[(int64_t)s * stride + HC + h]);
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(kFullMask, M, o));
    if (lane == 0) sM[h] = M;
  }
  __syncthreads();
  const int g = threadIdx.x / FT;
  if (g < G) {
    for (int f = threadIdx.x % FT; f < F; f += FT) {
      const int h = f < HC ? f / C : f - HC;
      const int off = f < HC ? f : HC + H + h;
      const float M = sM[h];
      float ak[kMergeUnroll] = {}, lk[kMergeUnroll] = {};
      const bool own_l = G == 1 && f < HC;  // one group: each thread its own sum
      if (M != -INFINITY) {
        for (int s = s0 + g; s < s1; s += kMergeUnroll * G) {
#pragma unroll
          for (int k = 0; k < kMergeUnroll; ++k) {
            if (s + k * G < s1) {
              const float* w = ws + (int64_t)(s + k * G) * stride;
              const float m = w[HC + h];
              const float sc = m == -INFINITY ? 0.f : expf(m - M);
              ak[k] += m == -INFINITY ? 0.f : w[off] * sc;
              if (own_l) lk[k] += m == -INFINITY ? 0.f : w[HC + H + h] * sc;
            }
          }
        }
      }
      const float a = (ak[0] + ak[1]) + (ak[2] + ak[3]), l = (lk[0] + lk[1]) + (lk[2] + lk[3]);
      if (G > 1) {
        sP[g * F + f] = a;
      } else if (f < HC) {
        out[row * HC + f] = from_f<T>(l > 0.f ? a / l : 0.f);
      } else {
        lse[row * H + h] = a > 0.f ? (double)M + (double)logf(a) : -INFINITY;
      }
    }
  }
  if (G == 1) return;
  __syncthreads();
  for (int f = threadIdx.x; f < F; f += blockDim.x) {
    float a = 0.f;
    for (int k = 0; k < G; ++k) a += sP[k * F + f];
    sT[f] = a;
  }
  __syncthreads();
  for (int f = threadIdx.x; f < F; f += blockDim.x) {
    const int h = f < HC ? f / C : f - HC;
    const float l = sT[HC + h];
    if (f < HC) {
      out[row * HC + f] = from_f<T>(l > 0.f ? sT[f] / l : 0.f);
    } else {
      lse[row * H + h] = l > 0.f ? (double)sM[h] + (double)logf(l) : -INFINITY;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kMergeThreads) merge_softmax_kernel(const MergeSoftmaxParams p) {
  merge_softmax<T>(p.heavy_rows, p.heavy_ptr, p.ws, p.stride, p.H, p.C, static_cast<T*>(p.out), p.lse);
}

// Backward: sums a heavy row's slots; the first `n_t` floats of a slot go to
// out_t[row * n_t] (T), the next `n_f` to out_f[row * n_f] (fp32).
template <typename T>
__device__ __forceinline__ void merge_sum(const int* __restrict__ heavy_rows, const int* __restrict__ heavy_ptr,
                                          const float* __restrict__ ws, int stride, int n_t,
                                          T* __restrict__ out_t, int n_f, float* __restrict__ out_f) {
  extern __shared__ float sh[];
  const int64_t row = heavy_rows[blockIdx.x];
  const int s0 = heavy_ptr[blockIdx.x], s1 = heavy_ptr[blockIdx.x + 1];
  if (s0 == s1) return;  // a padded schedule's filler entry (block-uniform, before any barrier)
  const int F = n_t + n_f, G = merge_groups(F), FT = blockDim.x / G;
  const int g = threadIdx.x / FT;
  for (int f = threadIdx.x % FT; g < G && f < F; f += FT) {
    float ak[kMergeUnroll] = {};
    for (int s = s0 + g; s < s1; s += kMergeUnroll * G) {
#pragma unroll
      for (int k = 0; k < kMergeUnroll; ++k)
        if (s + k * G < s1) ak[k] += ws[(int64_t)(s + k * G) * stride + f];
    }
    const float a = (ak[0] + ak[1]) + (ak[2] + ak[3]);
    if (G > 1) {
      sh[g * F + f] = a;
    } else if (f < n_t) {
      if (out_t != nullptr) out_t[row * n_t + f] = from_f<T>(a);
    } else if (out_f != nullptr) {
      out_f[row * n_f + f - n_t] = a;
    }
  }
  if (G == 1) return;
  __syncthreads();
  for (int f = threadIdx.x; f < F; f += blockDim.x) {
    float a = 0.f;
    for (int k = 0; k < G; ++k) a += sh[k * F + f];
    if (f < n_t) {
      if (out_t != nullptr) out_t[row * n_t + f] = from_f<T>(a);
    } else if (out_f != nullptr) {
      out_f[row * n_f + f - n_t] = a;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kMergeThreads) merge_sum_kernel(const MergeSumParams p) {
  merge_sum<T>(p.heavy_rows, p.heavy_ptr, p.ws, p.stride, p.n_t, static_cast<T*>(p.out_t), p.n_f, p.out_f);
}

// A merge's params with the heavy-row slots both merges read filled from the
// family's params.
template <typename M>
inline M merge_params(const AttnParams& p) {
  M m;
  m.heavy_rows = p.heavy_rows;
  m.heavy_ptr = p.heavy_ptr;
  m.ws = p.ws;
  m.stride = p.ws_stride;
  return m;
}

template <typename T>
inline void launch_merge_softmax(const AttnParams& p, cudaStream_t stream) {
  if (p.num_heavy == 0) return;
  auto m = merge_params<MergeSoftmaxParams>(p);
  m.H = p.H;
  m.C = p.C;
  m.out = p.out;
  m.lse = p.lse;
  merge_softmax_kernel<T><<<(unsigned)p.num_heavy, kMergeThreads, merge_smem(p.H * p.C + p.H, p.H), stream>>>(m);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
inline void launch_merge_sum(const AttnParams& p, int n_t, T* out_t, int n_f, float* out_f,
                             cudaStream_t stream) {
  if (p.num_heavy == 0) return;
  auto m = merge_params<MergeSumParams>(p);
  m.n_t = n_t;
  m.out_t = out_t;
  m.n_f = n_f;
  m.out_f = out_f;
  merge_sum_kernel<T><<<(unsigned)p.num_heavy, kMergeThreads, merge_smem(n_t + n_f, 0), stream>>>(m);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The family's compile-time dispatch, in one place: the params' vec, nv4
// and v2 as the template arguments V (elements per vector), NV (vectors per
// lane) and V2 of Launch<T, V, NV, V2>::run(p, stream).
template <typename T, template <typename, int, int, bool> class Launch>
inline void attn_switch(const AttnParams& p, cudaStream_t stream) {
  PYG_TC_BOOL_SWITCH(p.vec, VEC, [&] {
    constexpr int V = VEC ? vec16<T>() : 1;
    PYG_TC_BOOL_SWITCH(p.nv4, NV4, [&] {
      constexpr int NV = NV4 ? 4 : 1;
      PYG_TC_BOOL_SWITCH(p.v2, V2, [&] { Launch<T, V, NV, V2>::run(p, stream); });
    });
  });
}

inline dim3 grid_of(const AttnParams& p) {
  const int64_t per_block = (kThreads / 32) * (32 / p.L);
  return dim3((unsigned)((p.num_units + per_block - 1) / per_block),
              (unsigned)((p.H + p.HS - 1) / p.HS));
}

}  // namespace attn
}  // namespace pyg_tc
