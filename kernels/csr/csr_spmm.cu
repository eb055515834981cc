// CSR kernel family: SpMM (sum / mean / max) and SDDMM driven by a unit schedule.
//
// The schedule (built in Python, pyg_tc/formats/schedule.py) is an int32 [U, 4]
// array of units (row, start, end, slot): a run of at most `chunk` edges of one
// CSR row. Rows of degree <= chunk are one unit (slot = -1, written straight to
// the output); heavier rows are split into several units, each writing an fp32
// partial row to a workspace slot, and a second kernel reduces a heavy row's
// slots in slot order. Units are sorted by length (longest first), so the
// groups of one warp see similar lengths.
//
// One unit is walked by a group of L lanes (G = 32 / L groups per warp): each
// lane owns NV vectors of V features (V * sizeof(T) = 16 bytes on the vector
// path, V = 1 on the scalar path used for odd widths or unaligned tensors). The
// group loads L column indices at once (one per lane, coalesced), broadcasts
// them with shuffles and keeps UNROLL independent feature loads in flight.
// Features wider than one slice (L * V * NV) are split over blockIdx.y, slice-
// major, so the gathered slice of x is shared in L2 by all blocks of a slice.
//
// No atomics anywhere: every output element is written by exactly one lane,
// and the summation order is fixed by the schedule, so results are bitwise
// reproducible run to run.
//
// This file: the SpMM kernel and its launcher (instantiated for fp32, fp16
// and bf16); the entry point and the config rules are in csr_host.cpp.

#include <string>
#include <c10/cuda/CUDAException.h>

#include "common/dtype.cuh"
#include "common/heavy_reduce.cuh"
#include "common/static_switch.h"
#include "csr/csr_params.h"

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;

constexpr int kUnroll = 4;

// The half path's walk (HalfGNN's two-level sum): the group takes windows of
// W = max(L, 8) edges (R = W / L per lane), in batches of 8 edges aligned to
// the unit's start, all 8 loads of a batch in flight together (the half path
// is bound by bytes in flight, not by arithmetic). Per batch: weights scaled
// by the power of two above their largest magnitude, mirrored into half2,
// summed with HFMA2; the batch total converted once, scaled back and added to
// the fp32 accumulator.
template <typename T, int V, int NV, int L, bool COOP>
__device__ __forceinline__ void walk_unit_half2(float (&acc)[NV][V], const int4 un, const int len,
                                                const int maxlen, const int g, const int l,
                                                const int fbase, const int* __restrict__ col,
                                                const float* __restrict__ w,
                                                const T* __restrict__ x, const int F) {
  constexpr int B = 8;
  constexpr int W = L < B ? B : L;
  constexpr int R = W / L;
  constexpr int STRIDE = COOP ? (32 / L) * W : W;  // edges consumed per window by the unit
  const int goff = COOP ? g * W : 0;               // this group's first edge in a window
  using P = Pack<T, V>;
  using H = Half2<T>;
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[k][v] = 0.f;

  for (int base = 0; base < maxlen; base += STRIDE) {
    const int n = len - base - goff;  // edges of this group left in this window (may be <= 0)
    int c[R];
    float wv[R];
    float m = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int e = r * L + l;
      c[r] = 0;
      wv[r] = 0.f;  // 0 past the unit's end: no weight there enters a batch scale
      if (e < n) {
        c[r] = __ldg(col + un.y + base + goff + e);
        wv[r] = w != nullptr ? __ldg(w + un.y + base + goff + e) : 1.f;
      }
      m = fmaxf(m, fabsf(wv[r]));
    }
#pragma unroll
    for (int o = 1; o < B / R; o <<= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
    const float s = pow2_ceil(m);  // this lane's batch scale
    H wh[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wh[r] = mirror2(from_f<T>(wv[r] / s));
    const int jn = min(W, maxlen - base);  // warp-uniform
    for (int j = 0; j < jn; j += B) {  // R = 2: one batch, j = 0
      P buf[B][NV];
      H wj[B];
#pragma unroll
      for (int t = 0; t < B; ++t) {
        const int src = g * L + ((j + t) & (L - 1));
        const int r = R == 1 ? 0 : t / L;
        const int cj = __shfl_sync(kFullMask, c[r], src);
        wj[t] = __shfl_sync(kFullMask, wh[r], src);
        const T* xr = x + (int64_t)cj * F;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
          const int f = fbase + k * L * V;
          if (j + t < n && f < F) {
            buf[t][k] = *reinterpret_cast<const P*>(xr + f);
          } else {
#pragma unroll
            for (int v = 0; v < V; ++v) buf[t][k].v[v] = from_f<T>(0.f);
          }
        }
      }
      H part[NV][V / 2];
#pragma unroll
      for (int k = 0; k < NV; ++k)
#pragma unroll
        for (int i = 0; i < V / 2; ++i) part[k][i] = mirror2(from_f<T>(0.f));
#pragma unroll
      for (int t = 0; t < B; ++t)
#pragma unroll
        for (int k = 0; k < NV; ++k) {
          const H* xv = reinterpret_cast<const H*>(&buf[t][k]);
#pragma unroll
          for (int i = 0; i < V / 2; ++i) part[k][i] = __hfma2(wj[t], xv[i], part[k][i]);
        }
      const float sb = __shfl_sync(kFullMask, s, g * L + (R == 1 ? j : 0));  // merge the batch
#pragma unroll
      for (int k = 0; k < NV; ++k)
#pragma unroll
        for (int i = 0; i < V / 2; ++i) {
          const float2 p2 = to_f2(part[k][i]);
          acc[k][2 * i] = fmaf(sb, p2.x, acc[k][2 * i]);
          acc[k][2 * i + 1] = fmaf(sb, p2.y, acc[k][2 * i + 1]);
        }
    }
  }
}

// One unit's sum (or max) into acc with fp32 products: the lanes' share of it
// (group g, lane l of the group, features from fbase).
template <typename T, int V, int NV, int L, bool MAX, bool COOP>
__device__ __forceinline__ void walk_unit(float (&acc)[NV][V], const int4 un, const int len,
                                          const int maxlen, const int g, const int l,
                                          const int fbase, const int* __restrict__ col,
                                          const float* __restrict__ w, const T* __restrict__ x,
                                          const int F) {
  constexpr int STRIDE = COOP ? 32 : L;  // edges consumed per batch by the unit
  const int goff = COOP ? g * L : 0;     // this group's first edge in a batch
  using P = Pack<T, V>;
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[k][v] = MAX ? -INFINITY : 0.f;

  for (int base = 0; base < maxlen; base += STRIDE) {
    const int n = len - base - goff;  // edges of this group left in this batch (may be <= 0)
    int c = 0;
    float wv = 0.f;
    if (l < n) {
      c = __ldg(col + un.y + base + goff + l);
      wv = w != nullptr ? __ldg(w + un.y + base + goff + l) : 1.f;
    }
    const int jn = min(L, maxlen - base);  // warp-uniform
    for (int j = 0; j < jn; j += kUnroll) {
      P buf[kUnroll][NV];
      float wj[kUnroll];
      bool ok[kUnroll];
#pragma unroll
      for (int t = 0; t < kUnroll; ++t) {
        const int jj = j + t;
        const int src = g * L + (jj & (L - 1));
        const int cj = __shfl_sync(kFullMask, c, src);
        wj[t] = __shfl_sync(kFullMask, wv, src);
        ok[t] = jj < n;
        const T* xr = x + (int64_t)cj * F;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
          const int f = fbase + k * L * V;
          if (ok[t] && f < F) {
            buf[t][k] = *reinterpret_cast<const P*>(xr + f);
          } else {
#pragma unroll
            for (int v = 0; v < V; ++v) buf[t][k].v[v] = from_f<T>(0.f);
          }
        }
      }
#pragma unroll
      for (int t = 0; t < kUnroll; ++t) {
#pragma unroll
        for (int k = 0; k < NV; ++k)
#pragma unroll
          for (int v = 0; v < V; ++v) {
            const float m = wj[t] * to_f(buf[t][k].v[v]);
            if (MAX) {
              if (ok[t]) acc[k][v] = fmaxf(acc[k][v], m);
            } else {
              acc[k][v] += m;
            }
          }
      }
    }
  }
}

// COOP (graphs with too few units to fill the GPU): the G groups of a warp
// share one unit, group g taking edges [g*L, g*L + L) of every 32-edge batch,
// and their partial sums are combined by shuffles (fixed order) before group 0
// writes. Otherwise each group owns a unit.
//
// Half types on the vector path, sum and mean (H2): HalfGNN's two-level sum
// (docs/half.md; specified by pyg_tc.ops.csr.half2_two_level_sum). The
// unit's edges go in aligned batches of 8 (walk_unit_half2): the batch's weights
// are scaled by the power of two above their largest magnitude, mirrored into
// both halves of a half2 and summed with HFMA2 in the input's dtype (one
// rounding per fused multiply-add); the batch total is converted once,
// scaled back and added to the fp32 accumulator. A warp whose result is not
// finite (a batch that overflowed, or inf / nan inputs) walks its units again
// with fp32 products, so no intermediate overflows: the output is inf only
// where the fp32 sum does not fit the dtype.
template <typename T, int V, int NV, int L, bool MAX, bool COOP, bool H2>
__global__ void __launch_bounds__(kThreads)
spmm_units_kernel(const CsrSpmmParams p) {
  // plain loads: the read-only path (ldg) measured no faster here and
  // slower for fp16 at F = 16 (kernels/README.md)
  const int4* __restrict__ units = p.units;
  const int64_t num_units = p.num_units;
  const int* __restrict__ col = p.col;
  const float* __restrict__ w = p.value;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ out = static_cast<T*>(p.out);
  float* __restrict__ ws = p.ws;
  const float* __restrict__ diag = p.diag;
  const int64_t diag_stride = p.diag_stride;
  const int F = p.F;
  const bool mean = p.mean;
  static_assert(!H2 || (!MAX && V == 8 && sizeof(T) == 2), "two-level sum: half vectors, sum/mean");
  constexpr int G = 32 / L;
  constexpr int SLICE = L * V * NV;
  using P = Pack<T, V>;
  const int lane = threadIdx.x & 31;
  const int g = lane / L;
  const int l = lane % L;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t u = COOP ? warp : warp * G + g;
  const int fbase = blockIdx.y * SLICE + l * V;

  int4 un = make_int4(0, 0, 0, -1);
  if (u < num_units) un = units[u];
  const int len = un.z - un.y;
  int maxlen = len;
  if (!COOP) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) maxlen = max(maxlen, __shfl_xor_sync(kFullMask, maxlen, o));
  }

  float acc[NV][V];
  if constexpr (H2) {
    walk_unit_half2<T, V, NV, L, COOP>(acc, un, len, maxlen, g, l, fbase, col, w, x, F);
    bool bad = false;
#pragma unroll
    for (int k = 0; k < NV; ++k)
#pragma unroll
      for (int v = 0; v < V; ++v) bad |= !isfinite(acc[k][v]);
    if (__any_sync(kFullMask, bad)) {  // rare: the group's edges again, fp32 products
      constexpr int STRIDE = COOP ? 32 : L;
      using P = Pack<T, V>;
#pragma unroll
      for (int k = 0; k < NV; ++k)
#pragma unroll
        for (int v = 0; v < V; ++v) acc[k][v] = 0.f;
#pragma unroll 1
      for (int e0 = un.y + (COOP ? g * L : 0); e0 < un.z; e0 += STRIDE) {
#pragma unroll 1
        for (int e = e0; e < min(e0 + L, un.z); ++e) {
          const float we = w != nullptr ? w[e] : 1.f;
          const T* xr = x + (int64_t)col[e] * F;
#pragma unroll
          for (int k = 0; k < NV; ++k) {
            const int f = fbase + k * L * V;
            if (f >= F) continue;
            const P xv = *reinterpret_cast<const P*>(xr + f);
#pragma unroll
            for (int v = 0; v < V; ++v) acc[k][v] = fmaf(we, to_f(xv.v[v]), acc[k][v]);
          }
        }
      }
    }
  } else {
    walk_unit<T, V, NV, L, MAX, COOP>(acc, un, len, maxlen, g, l, fbase, col, w, x, F);
  }

  if (COOP) {  // combine the groups' partials (lane l of every group), fixed order
#pragma unroll
    for (int o = L; o < 32; o <<= 1)
#pragma unroll
      for (int k = 0; k < NV; ++k)
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float other = __shfl_xor_sync(kFullMask, acc[k][v], o);
          acc[k][v] = MAX ? fmaxf(acc[k][v], other) : acc[k][v] + other;
        }
    if (g != 0) return;
  }
  if (u >= num_units) return;
  if (un.w >= 0) {  // partial unit of a heavy row: fp32 partial to its slot
    float* dst = ws + (int64_t)un.w * F;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int f = fbase + k * L * V;
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (f + v < F) dst[f + v] = acc[k][v];
    }
    return;
  }
  const int64_t row = un.x;
  const float scale = (mean && len > 0) ? 1.f / (float)len : 1.f;
  const float dg = diag != nullptr ? diag[row * diag_stride] : 0.f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int f = fbase + k * L * V;
    if (f >= F) continue;
    P res;
    P xs;
    if (diag != nullptr) xs = *reinterpret_cast<const P*>(x + row * F + f);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      float r = acc[k][v];
      if (MAX) r = len > 0 ? r : 0.f;
      r *= scale;
      if (diag != nullptr) r += dg * to_f(xs.v[v]);
      res.v[v] = from_f<T>(r);
    }
    *reinterpret_cast<P*>(out + row * F + f) = res;
  }
}

// The configurations that are compiled: every L in 4, 8, 16, 32 with NV = 1,
// and L in 8, 16, 32 with NV = 2 (L = 4, NV = 2 is accepted by
// PYG_TC_SPMM_CONFIG's parser but rejected here, at launch).
constexpr bool spmm_compiled(int L, int NV) { return !(L == 4 && NV == 2); }

template <typename T, int V, int NV, int L, bool MAX, bool COOP, bool H2>
void launch_spmm_units(const CsrSpmmParams& p, cudaStream_t stream) {
  const int per_warp = COOP ? 1 : 32 / L;
  const int64_t U = p.num_units;
  const int64_t blocks = (U + (kThreads / 32) * per_warp - 1) / ((kThreads / 32) * per_warp);
  const int slices = (p.F + L * V * NV - 1) / (L * V * NV);
  dim3 grid((unsigned)blocks, (unsigned)slices);
  spmm_units_kernel<T, V, NV, L, MAX, COOP, H2><<<grid, kThreads, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

template <typename T>
void run_csr_spmm(const CsrSpmmParams& p, cudaStream_t stream) {
  if (p.num_units > 0) {
    PYG_TC_BOOL_SWITCH(p.vec, VEC, [&] {
      constexpr int V = VEC ? vec16<T>() : 1;
      PYG_TC_BOOL_SWITCH(p.max, MAX, [&] {
        PYG_TC_INT_SWITCH(p.config.L, L, (4, 8, 16, 32), [&] {
          PYG_TC_INT_SWITCH(p.config.NV, NV, (1, 2), [&] {
            if constexpr (!spmm_compiled(L, NV)) {
              TORCH_CHECK(false, "pyg_tc: unsupported SpMM config L=", std::to_string(p.config.L), " NV=",
                          std::to_string(p.config.NV));
            } else {
              PYG_TC_BOOL_SWITCH(p.coop, COOP, [&] {
                // half vectors, sum / mean: the two-level sum unless switched off
                if constexpr (!MAX && V == 8 && sizeof(T) == 2) {
                  if (p.two_level) {
                    launch_spmm_units<T, V, NV, L, MAX, COOP, true>(p, stream);
                    return;
                  }
                }
                launch_spmm_units<T, V, NV, L, MAX, COOP, false>(p, stream);
              });
            }
          });
        });
      });
    });
  }
  if (p.num_heavy > 0) {
    PYG_TC_BOOL_SWITCH(p.max, MAX, [&] {
      launch_heavy_reduce<T, MAX>(HeavyReduceParams{p.heavy_rows, p.heavy_ptr, p.num_heavy, p.ws, p.rowptr,
                                                    p.x, p.out, p.diag, p.diag_stride, p.F, p.mean},
                                  stream);
    });
  }
}

template void run_csr_spmm<float>(const CsrSpmmParams&, cudaStream_t);
template void run_csr_spmm<__half>(const CsrSpmmParams&, cudaStream_t);
template void run_csr_spmm<__nv_bfloat16>(const CsrSpmmParams&, cudaStream_t);

}  // namespace pyg_tc
