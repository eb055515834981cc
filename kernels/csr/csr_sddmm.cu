// CSR family: SDDMM over the unit schedule (the same units as the SpMM,
// csr_spmm.cu): out[e] = <a[row(e)], b[col(e)]> for every edge e. A group of L
// lanes walks a unit; each lane loads L column indices at once (coalesced),
// broadcasts them with shuffles and reduces the dot product over the group
// with shuffles. Every output is written by exactly one lane (no atomics).
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

template <typename T, int V, int L>
__global__ void __launch_bounds__(kThreads)
sddmm_units_kernel(const int4* __restrict__ units, int64_t num_units,
                   const int* __restrict__ col, const T* __restrict__ a,
                   const T* __restrict__ b, T* __restrict__ out, int F) {
  constexpr int G = 32 / L;
  using P = Pack<T, V>;
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
    for (int j = 0; j < jn; ++j) {
      const int cj = __shfl_sync(kFullMask, c, g * L + j);
      float d = 0.f;
      if (j < n) {
        const T* br = b + (int64_t)cj * F;
        for (int f = l * V; f < F; f += L * V) {
          const P pa = *reinterpret_cast<const P*>(ar + f);
          const P pb = *reinterpret_cast<const P*>(br + f);
#pragma unroll
          for (int v = 0; v < V; ++v) d += to_f(pa.v[v]) * to_f(pb.v[v]);
        }
      }
#pragma unroll
      for (int o = L / 2; o > 0; o >>= 1) d += __shfl_xor_sync(kFullMask, d, o);
      if (l == 0 && j < n) out[un.y + base + j] = from_f<T>(d);
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
    PYG_TC_INT_SWITCH(p.lanes, L, (8, 16, 32), [&] { launch_sddmm<T, V, L>(p, stream); });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template void run_csr_sddmm<float>(const CsrSddmmParams&, cudaStream_t);
template void run_csr_sddmm<__half>(const CsrSddmmParams&, cudaStream_t);
template void run_csr_sddmm<__nv_bfloat16>(const CsrSddmmParams&, cudaStream_t);

}  // namespace pyg_tc
