// CBSR family (MaxK-GNN): the backward SSpMM (sampled A^T x dense gradient -> CBSR
// values), Algorithm 2 of MaxK-GNN.
//
// SSpMM (Algorithm 2, outer product): one warp per unit of the *forward* CSR:
// the dense gradient row of the unit's target i is staged in shared memory
// (coalesced, once per unit), then every edge (i, j) gathers G[i, idx[j, :]]
// from shared memory and adds w * that to the fp32 result row j with global
// atomics (coalesced: KG consecutive floats per edge). These atomics make the
// summation order of the backward pass run-to-run variable (last-bit
// differences, as in PyG's own scatter backward); the deterministic fallback
// is the reference path, taken when torch.use_deterministic_algorithms(True).
//
// This file: the kernel and its launcher (fp32, fp16, bf16); the entry point
// is in cbsr_host.cpp.

#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/launch.h"
#include "common/static_switch.h"
#include "cbsr/cbsr_device.cuh"
#include "cbsr/cbsr_params.h"

namespace pyg_tc {
namespace {

// SSpMM: out[j, t] += w_ij * s_i * G[i, idx[j, t]] over the forward units.
template <typename T, typename IT, int KG>
__global__ void __launch_bounds__(kWarps * 32)
cbsr_sspmm_kernel(const CbsrSspmmParams p) {
  const int4* __restrict__ units = p.g.units;
  const int64_t U = p.g.num_units;
  const int* __restrict__ rowptr = p.g.rowptr;
  const int* __restrict__ col = p.g.col;
  const float* __restrict__ w = p.g.value;
  const T* __restrict__ G = static_cast<const T*>(p.grad);
  const IT* __restrict__ idx = static_cast<const IT*>(p.indices);
  const int k = p.k, F = p.F;
  float* __restrict__ out = p.out;
  const float* __restrict__ diag = p.g.diag;
  const int64_t ds = p.g.diag_stride;
  const bool mean = p.g.mean;
  extern __shared__ float smem[];
  constexpr int P = 32 / KG;
  const int lane = threadIdx.x & 31;
  float* buf = smem + (threadIdx.x >> 5) * F;
  const int64_t u = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (u >= U) return;
  const int4 un = ldg(units + u);
  const int64_t row = un.x;
  const int len = un.z - un.y;
  const bool do_diag = diag != nullptr && un.y == ldg(rowptr + row);
  if (len == 0 && !do_diag) return;
  const int deg = ldg(rowptr + row + 1) - ldg(rowptr + row);
  const float scale = (mean && deg > 0) ? 1.f / (float)deg : 1.f;
  const T* gr = G + row * F;
  for (int f = lane; f < F; f += 32) buf[f] = to_f(ldg(gr + f)) * scale;
  __syncwarp();
  const int sub = lane / KG, t0 = lane % KG;
  for (int base = 0; base < len; base += 32) {
    const int n = min(32, len - base);
    int c = 0;
    float wv = 1.f;
    if (lane < n) {
      c = ldg(col + un.y + base + lane);
      if (w != nullptr) wv = ldg(w + un.y + base + lane);
    }
    for (int tb = 0; tb < k; tb += KG) {
      const int t = tb + t0;
      for (int j = 0; j < n; j += P * kUnroll) {
        int ix[kUnroll];
        int64_t o[kUnroll];
        float wq[kUnroll];
        bool ok[kUnroll];
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) {
          const int e = j + q * P + sub;
          const int cj = __shfl_sync(kFullMask, c, e & 31);
          wq[q] = __shfl_sync(kFullMask, wv, e & 31);
          ok[q] = e < n && t < k;
          o[q] = (int64_t)cj * k + t;
          ix[q] = ok[q] ? col_of(ldg(idx + o[q])) : 0;
        }
#pragma unroll
        for (int q = 0; q < kUnroll; ++q)
          if (ok[q]) atomicAdd(out + o[q], wq[q] * buf[ix[q]]);
      }
    }
  }
  if (do_diag) {
    const float d = ldg(diag + row * ds);
    for (int t = lane; t < k; t += 32) atomicAdd(out + row * k + t, d * buf[col_of(ldg(idx + row * k + t))]);
  }
}

}  // namespace

template <typename T>
void run_cbsr_sspmm(const CbsrSspmmParams& p, cudaStream_t stream) {
  const size_t smem = (size_t)kWarps * p.F * sizeof(float);
  const unsigned blocks = (unsigned)((p.g.num_units + kWarps - 1) / kWarps);
  PYG_TC_BOOL_SWITCH(p.F <= 256, BYTE_INDEX, [&] {
    using IT = std::conditional_t<BYTE_INDEX, uint8_t, int16_t>;
    PYG_TC_INT_SWITCH(p.kg, KG, (1, 2, 4, 8, 16, 32), [&] {
      const auto kernel = cbsr_sspmm_kernel<T, IT, KG>;
      set_max_dynamic_smem(kernel, smem);
      kernel<<<blocks, kWarps * 32, smem, stream>>>(p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
}

template void run_cbsr_sspmm<float>(const CbsrSspmmParams&, cudaStream_t);
template void run_cbsr_sspmm<__half>(const CbsrSspmmParams&, cudaStream_t);
template void run_cbsr_sspmm<__nv_bfloat16>(const CbsrSspmmParams&, cudaStream_t);

}  // namespace pyg_tc
