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

#include <c10/cuda/CUDAException.h>

#include "common/dtype.cuh"
#include "common/heavy_reduce.cuh"
#include "common/static_switch.h"
#include "csr/csr_params.h"

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;

constexpr int kUnroll = 4;

// COOP (graphs with too few units to fill the GPU): the G groups of a warp
// share one unit, group g taking edges [g*L, g*L + L) of every 32-edge batch,
// and their partial sums are combined by shuffles (fixed order) before group 0
// writes. Otherwise each group owns a unit.
template <typename T, int V, int NV, int L, bool MAX, bool COOP>
__global__ void __launch_bounds__(kThreads)
spmm_units_kernel(const int4* __restrict__ units, int64_t num_units,
                  const int* __restrict__ col, const float* __restrict__ w,
                  const T* __restrict__ x, T* __restrict__ out,
                  float* __restrict__ ws, const float* __restrict__ diag,
                  int64_t diag_stride, int F, bool mean) {
  constexpr int G = 32 / L;
  constexpr int SLICE = L * V * NV;
  using P = Pack<T, V>;
  const int lane = threadIdx.x & 31;
  const int g = lane / L;
  const int l = lane % L;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t u = COOP ? warp : warp * G + g;
  const int fbase = blockIdx.y * SLICE + l * V;
  constexpr int STRIDE = COOP ? 32 : L;  // edges consumed per batch by the unit
  const int goff = COOP ? g * L : 0;     // this group's first edge in a batch

  int4 un = make_int4(0, 0, 0, -1);
  if (u < num_units) un = units[u];
  const int len = un.z - un.y;
  int maxlen = len;
  if (!COOP) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) maxlen = max(maxlen, __shfl_xor_sync(kFullMask, maxlen, o));
  }

  float acc[NV][V];
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[k][v] = MAX ? -INFINITY : 0.f;

  for (int base = 0; base < maxlen; base += STRIDE) {
    const int n = len - base - goff;  // edges of this group left in this batch (may be <= 0)
    int c = 0;
    float wv = 1.f;
    if (l < n) {
      c = __ldg(col + un.y + base + goff + l);
      if (w != nullptr) wv = __ldg(w + un.y + base + goff + l);
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
        wj[t] = w != nullptr ? __shfl_sync(kFullMask, wv, src) : 1.f;  // warp-uniform branch
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

template <typename T, int V, int NV, int L, bool MAX, bool COOP>
void launch_spmm_units(const CsrSpmmParams& p, cudaStream_t stream) {
  const int per_warp = COOP ? 1 : 32 / L;
  const int64_t U = p.num_units;
  const int64_t blocks = (U + (kThreads / 32) * per_warp - 1) / ((kThreads / 32) * per_warp);
  const int slices = (p.F + L * V * NV - 1) / (L * V * NV);
  dim3 grid((unsigned)blocks, (unsigned)slices);
  spmm_units_kernel<T, V, NV, L, MAX, COOP><<<grid, kThreads, 0, stream>>>(
      p.units, U, p.col, p.value, static_cast<const T*>(p.x), static_cast<T*>(p.out), p.ws, p.diag,
      p.diag_stride, p.F, p.mean);
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
              TORCH_CHECK(false, "pyg_tc: unsupported SpMM config L=", p.config.L, " NV=", p.config.NV);
            } else {
              PYG_TC_BOOL_SWITCH(p.coop, COOP, [&] { launch_spmm_units<T, V, NV, L, MAX, COOP>(p, stream); });
            }
          });
        });
      });
    });
  }
  if (p.num_heavy > 0) {
    PYG_TC_BOOL_SWITCH(p.max, MAX, [&] {
      launch_heavy_reduce<T, MAX>(p.heavy_rows, p.heavy_ptr, p.num_heavy, p.ws, p.rowptr,
                                  static_cast<const T*>(p.x), static_cast<T*>(p.out), p.diag,
                                  p.diag_stride, p.F, p.mean, stream);
    });
  }
}

template void run_csr_spmm<float>(const CsrSpmmParams&, cudaStream_t);
template void run_csr_spmm<__half>(const CsrSpmmParams&, cudaStream_t);
template void run_csr_spmm<__nv_bfloat16>(const CsrSpmmParams&, cudaStream_t);

}  // namespace pyg_tc
