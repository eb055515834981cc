// CSR family: SDDMM over the unit schedule (the same units as the SpMM,
// csr_spmm.cu): out[e] = <a[row(e)], b[col(e)]> for every edge e. A group of L
// lanes walks a unit; each lane loads L column indices at once (coalesced),
// broadcasts them with shuffles and reduces the dot product over the group
// with shuffles (fp32). Every output is written by exactly one lane (no atomics).
//
// This file: the kernel and its launcher (fp32, fp16, bf16); the entry
// point is in csr_host.cpp.

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

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

// Reduce-scatter of U dot products over the L lanes of a group (recursive
// halving: at offset O each lane keeps the half of its values selected by
// bit O of its lane and adds the partner's other half, so a step costs N / 2
// shuffles for N values left; once one value is left, the remaining offsets
// are a plain shuffle-add). Afterwards lane l holds K = max(U / L, 1) full
// sums, of edges first + 0 .. first + K - 1 of the U; with L > U only the lanes
// whose low bits (mask L / U - 1) are zero hold them.
template <int N, int O>
__device__ __forceinline__ void reduce_scatter(float* d, const int l, int& first) {
  if constexpr (O > 0) {
    if constexpr (N > 1) {
      const bool hi = l & O;
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        const float keep = hi ? d[i + N / 2] : d[i];
        const float send = hi ? d[i] : d[i + N / 2];
        d[i] = keep + __shfl_xor_sync(kFullMask, send, O);
      }
      if (hi) first += N / 2;
      reduce_scatter<N / 2, O / 2>(d, l, first);
    } else {
      d[0] += __shfl_xor_sync(kFullMask, d[0], O);
      reduce_scatter<1, O / 2>(d, l, first);
    }
  }
}

// Edges go U at a time (their row loads in flight together; U = 4, or 8 for
// half rows gathered from L2, csr_host.cpp), in windows of W = max(L, U) edges
// whose column indices the group loads at once (R = W / L per lane). Half
// types on the vector path use lane_dots<HALF>; a lane whose partial sums
// are not finite (an fp16 product or partial beyond 65504, or inf / nan
// input) computes its part again with fp32 products (rare; each lane on its
// own, as the sums across lanes are fp32), so the result is inf only where
// the fp32 dot product does not fit the dtype.
// The kernel takes its params struct by value and hands its pointers to this
// inlined body, whose __restrict__ parameters let the compiler prove the
// inputs read-only (every load goes through the non-coherent cache,
// ld.global.nc); it does so only in a kernel with no warp vote and no asm
// volatile (kernels/README.md), hence plain loads and no vote here.
template <typename T, int V, int L, int U>
__device__ __forceinline__ void sddmm_units(const int4* __restrict__ units, int64_t num_units,
                                            const int* __restrict__ col, const T* __restrict__ a,
                                            const T* __restrict__ b, T* __restrict__ out, int F) {
  constexpr int G = 32 / L;
  constexpr bool HALF = V == 8 && sizeof(T) == 2;
  constexpr int W = L < U ? U : L;
  constexpr int R = W / L;
  constexpr int K = U > L ? U / L : 1;         // sums a lane holds after the reduce-scatter
  constexpr int LOW = L > U ? L / U - 1 : 0;   // lanes with these bits set hold none
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

  // With one index per lane (R = 1) the next window's indices are loaded
  // before this window's rows, so a step waits on one gather, not two. At
  // R = 2 (4 lanes, 8 edges in flight) the extra registers make the half
  // kernel spill under its register bound, so it loads each window in place.
  constexpr bool AHEAD = R == 1;
  int c[R];  // the window's column indices (0 past the unit's end)
  if constexpr (AHEAD) c[0] = l < len ? col[un.y + l] : 0;
  for (int base = 0; base < maxlen; base += W) {
    const int n = len - base;
    int next = 0;
    if constexpr (AHEAD) {
      next = l < n - W ? col[un.y + base + W + l] : 0;
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) c[r] = r * L + l < n ? col[un.y + base + r * L + l] : 0;
    }
    const int jn = min(W, maxlen - base);
    for (int j = 0; j < jn; j += U) {  // R > 1: W = U, one pass (j = 0)
      float d[U];
      const T* br[U];
      bool ok[U];
#pragma unroll
      for (int t = 0; t < U; ++t) {
        const int cj = __shfl_sync(kFullMask, c[R == 1 ? 0 : t / L], g * L + ((j + t) & (L - 1)));
        br[t] = b + (int64_t)cj * F;
        ok[t] = j + t < n;
      }
      lane_dots<HALF, T, V, L, U>(d, ar, br, ok, l, F);
      if constexpr (HALF) {
        bool bad = false;
#pragma unroll
        for (int t = 0; t < U; ++t) bad |= !isfinite(d[t]);
        if (bad) lane_dots<false, T, V, L, U>(d, ar, br, ok, l, F);
      }
      int first = 0;
      reduce_scatter<U, L / 2>(d, l, first);
      if ((l & LOW) == 0) {
#pragma unroll
        for (int i = 0; i < K; ++i)
          if (j + first + i < n) out[un.y + base + j + first + i] = from_f<T>(d[i]);
      }
    }
    if constexpr (AHEAD) c[0] = next;
  }
}

// At least 4 blocks per SM (<= 64 registers): fewer resident warps leave the
// gathers' latency exposed (docs/results/arch_ab.md measures 3 blocks
// and no bound).
template <typename T, int V, int L, int U>
__global__ void __launch_bounds__(kThreads, 4) sddmm_units_kernel(const CsrSddmmParams p) {
  sddmm_units<T, V, L, U>(p.units, p.num_units, p.col, static_cast<const T*>(p.a),
                          static_cast<const T*>(p.b), static_cast<T*>(p.out), p.F);
}

template <typename T, int V, int L, int U>
void launch_sddmm(const CsrSddmmParams& p, cudaStream_t stream) {
  constexpr int G = 32 / L;
  const int64_t blocks = (p.num_units + (kThreads / 32) * G - 1) / ((kThreads / 32) * G);
  sddmm_units_kernel<T, V, L, U><<<(unsigned)blocks, kThreads, 0, stream>>>(p);
}

}  // namespace

template <typename T>
void run_csr_sddmm(const CsrSddmmParams& p, cudaStream_t stream) {
  PYG_TC_BOOL_SWITCH(p.vec, VEC, [&] {
    constexpr int V = VEC ? vec16<T>() : 1;
    PYG_TC_INT_SWITCH(p.lanes, L, (4, 8, 16, 32), [&] {
      PYG_TC_INT_SWITCH(p.inflight, U, (4, 8), [&] { launch_sddmm<T, V, L, U>(p, stream); });
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Padded graphs (CSRGraph.pad): edge slots past rowptr[R] belong to no row,
// so no walk writes them; a per-edge output gets zeros there, read from the
// device (no synchronisation). One small grid-stride launch that exits at
// once when the graph has no padding.
struct ZeroEdgeTailParams {
  unsigned char* out{};  // [E, row_bytes] bytes
  const int* rowptr{};  // [R + 1]
  int64_t R{}, E{}, row_bytes{};
};

__global__ void zero_edge_tail_kernel(const ZeroEdgeTailParams p) {
  const int64_t begin = (int64_t)p.rowptr[p.R] * p.row_bytes;
  const int64_t end = p.E * p.row_bytes;
  for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < end;
       i += (int64_t)gridDim.x * blockDim.x)
    p.out[i] = 0;
}

void zero_edge_tail(const at::Tensor& out, const at::Tensor& rowptr) {
  const int64_t E = out.size(0), R = rowptr.numel() - 1;
  if (E == 0 || R < 0 || out.numel() == 0) return;
  ZeroEdgeTailParams p;
  p.out = static_cast<unsigned char*>(out.data_ptr());
  p.rowptr = rowptr.data_ptr<int>();
  p.R = R;
  p.E = E;
  p.row_bytes = out.numel() / E * out.element_size();
  const int64_t blocks = std::min<int64_t>((E * p.row_bytes + kThreads - 1) / kThreads, 1024);
  zero_edge_tail_kernel<<<blocks, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template void run_csr_sddmm<float>(const CsrSddmmParams&, cudaStream_t);
template void run_csr_sddmm<__half>(const CsrSddmmParams&, cudaStream_t);
template void run_csr_sddmm<__nv_bfloat16>(const CsrSddmmParams&, cudaStream_t);

}  // namespace pyg_tc
