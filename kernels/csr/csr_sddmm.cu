// CSR family: SDDMM over the unit schedule (the same units as the SpMM,
// csr_spmm.cu): out[e] = <a[row(e)], b[col(e)]> for every edge e. A group of L
// lanes walks a unit; each lane loads L column indices at once (coalesced),
// broadcasts them with shuffles and reduces the dot product over the group
// with shuffles (fp32). Every output is written by exactly one lane (no atomics).
//
// This file: the kernel and its launcher (fp32, fp16, bf16); the entry
// point is in csr_host.cpp.

#include <c10/cuda/CUDAException.h>

#include "common/dtype.cuh"
#include "common/static_switch.h"
#include "csr/csr_params.h"

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;

// <a_r, b_c> for U edges at once (their loads in flight together) over this
// lane's features (f = l*V, l*V + L*V, ...): fp32 products, or for half types
// on the vector path (HALF) half2 products summed with HFMA2 per 16-byte
// vector (four per vector, one rounding each) and the vector's two halves
// added in fp32 (HalfGNN's half2 arithmetic). Edges with !ok[t] give 0.
template <bool HALF, typename T, int V, int L, int U>
__device__ __forceinline__ void lane_dots(float (&d)[U], const T* __restrict__ ar,
                                          const T* const (&br)[U], const bool (&ok)[U], int l,
                                          int F) {
  using P = Pack<T, V>;
#pragma unroll
  for (int t = 0; t < U; ++t) d[t] = 0.f;
  for (int f = l * V; f < F; f += L * V) {
    const P pa = *reinterpret_cast<const P*>(ar + f);
    P pb[U];
#pragma unroll
    for (int t = 0; t < U; ++t) {
      if (ok[t]) {
        pb[t] = *reinterpret_cast<const P*>(br[t] + f);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) pb[t].v[v] = from_f<T>(0.f);
      }
    }
#pragma unroll
    for (int t = 0; t < U; ++t) {
      if constexpr (HALF) {
        using H = Half2<T>;
        const H* ha = reinterpret_cast<const H*>(&pa);
        const H* hb = reinterpret_cast<const H*>(&pb[t]);
        H p = __hmul2(ha[0], hb[0]);
#pragma unroll
        for (int i = 1; i < V / 2; ++i) p = __hfma2(ha[i], hb[i], p);
        const float2 p2 = to_f2(p);
        d[t] += p2.x + p2.y;
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) d[t] = fmaf(to_f(pa.v[v]), to_f(pb[t].v[v]), d[t]);
      }
    }
  }
}

// Edges go U = 4 at a time (their row loads in flight together). Half
// types on the vector path use lane_dots<HALF>; an edge whose half product
// sum is not finite (an fp16 product or partial beyond 65504) is computed
// again with fp32 products (warp-uniform, rare), so the result is inf only
// where the fp32 dot product does not fit the dtype.
template <typename T, int V, int L>
__global__ void __launch_bounds__(kThreads)
sddmm_units_kernel(const int4* __restrict__ units, int64_t num_units,
                   const int* __restrict__ col, const T* __restrict__ a,
                   const T* __restrict__ b, T* __restrict__ out, int F) {
  constexpr int G = 32 / L;
  constexpr bool HALF = V == 8 && sizeof(T) == 2;
  constexpr int U = 4;  // edges in flight
  const int lane = threadIdx.x & 31;
  const int g = lane / L;
  const int l = lane % L;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t u = warp * G + g;
  int4 un = make_int4(0, 0, 0, -1);
  if (u < num_units) un = units[u];
  const int len = un.z - un.y;
  int maxlen = len;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) maxlen = max(maxlen, __shfl_xor_sync(kFullMask, maxlen, o));
  const T* ar = a + (int64_t)un.x * F;

  for (int base = 0; base < maxlen; base += L) {
    const int n = len - base;
    const int c = l < n ? __ldg(col + un.y + base + l) : 0;
    const int jn = min(L, maxlen - base);
    for (int j = 0; j < jn; j += U) {
      float d[U];
      const T* br[U];
      bool ok[U];
#pragma unroll
      for (int t = 0; t < U; ++t) {
        const int cj = __shfl_sync(kFullMask, c, g * L + ((j + t) & (L - 1)));
        br[t] = b + (int64_t)cj * F;
        ok[t] = j + t < n;
      }
      lane_dots<HALF, T, V, L, U>(d, ar, br, ok, l, F);
      if constexpr (HALF) {
        bool bad = false;
#pragma unroll
        for (int t = 0; t < U; ++t) bad |= !isfinite(d[t]);
        if (__any_sync(kFullMask, bad)) lane_dots<false, T, V, L, U>(d, ar, br, ok, l, F);
      }
      // reduce-scatter of the U = 4 dot products over the group (L + 1
      // shuffles per lane instead of 4 log2 L): after the L/2 and L/4 steps
      // each lane holds one edge's partial, edge t = 2 [l & L/2] + [l & L/4]
      const bool hi = l & (L / 2), mid = l & (L / 4);
      const float e0 = (hi ? d[2] : d[0]) + __shfl_xor_sync(kFullMask, hi ? d[0] : d[2], L / 2);
      const float e1 = (hi ? d[3] : d[1]) + __shfl_xor_sync(kFullMask, hi ? d[1] : d[3], L / 2);
      float r = (mid ? e1 : e0) + __shfl_xor_sync(kFullMask, mid ? e0 : e1, L / 4);
#pragma unroll
      for (int o = L / 8; o > 0; o >>= 1) r += __shfl_xor_sync(kFullMask, r, o);
      const int t = 2 * hi + mid;
      if ((l & (L / 4 - 1)) == 0 && j + t < n) out[un.y + base + j + t] = from_f<T>(r);
    }
  }
}

template <typename T, int V, int L>
void launch_sddmm(const CsrSddmmParams& p, cudaStream_t stream) {
  constexpr int G = 32 / L;
  const int64_t U = p.num_units;
  const int64_t blocks = (U + (kThreads / 32) * G - 1) / ((kThreads / 32) * G);
  sddmm_units_kernel<T, V, L><<<(unsigned)blocks, kThreads, 0, stream>>>(
      p.units, U, p.col, static_cast<const T*>(p.a), static_cast<const T*>(p.b), static_cast<T*>(p.out), p.F);
}

}  // namespace

template <typename T>
void run_csr_sddmm(const CsrSddmmParams& p, cudaStream_t stream) {
  PYG_TC_BOOL_SWITCH(p.vec, VEC, [&] {
    constexpr int V = VEC ? vec16<T>() : 1;
    PYG_TC_INT_SWITCH(p.lanes, L, (4, 8, 16, 32), [&] { launch_sddmm<T, V, L>(p, stream); });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template void run_csr_sddmm<float>(const CsrSddmmParams&, cudaStream_t);
template void run_csr_sddmm<__half>(const CsrSddmmParams&, cudaStream_t);
template void run_csr_sddmm<__nv_bfloat16>(const CsrSddmmParams&, cudaStream_t);

}  // namespace pyg_tc
