// CBSR family (MaxK-GNN): the forward SpGEMM (CSR adjacency x CBSR features ->
// dense), Algorithm 1 of MaxK-GNN.
//
// SpGEMM (Algorithm 1): one warp per schedule unit (an edge group of at most
// `chunk` edges of one row). KG lanes per edge (KG = k rounded up to a power
// of two, at most 32; 32/KG edges per step) load the neighbour's k values and
// column indices (coalesced) and add w * value into the warp's fp32 buffer of
// `width` floats in shared memory at the column index (shared-memory atomics:
// two edges of one step may hit one column). The buffer then goes to the
// output row in one coalesced pass, or, for a unit of a heavy row, to its
// workspace slot, reduced in slot order by heavy_reduce_kernel (no global
// atomics in the forward pass).
//
// This file: the kernel and its launcher (fp32, fp16, bf16); the entry point
// and the launch rules (paired loads, lanes per edge, private buffers) are in
// cbsr_host.cpp.

#include <string>
#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/heavy_reduce.cuh"
#include "common/launch.h"
#include "common/static_switch.h"
#include "cbsr/cbsr_device.cuh"
#include "cbsr/cbsr_params.h"

namespace pyg_tc {
namespace {

// NB = 32 / KG: one private buffer per edge slot of a step, so no two lanes
// of a step touch one address (the k columns of a CBSR row are distinct) and
// the accumulation needs no atomics; the buffers are summed in a fixed order
// at the write-back (bitwise reproducible). NB = 1: one buffer per warp with
// shared-memory atomics, for small k where NB buffers would not fit.
template <typename T, typename IT, int KG, int NB, int VT>
__global__ void __launch_bounds__(kWarps * 32)
cbsr_spmm_kernel(const CbsrSpmmParams p) {
  const int4* __restrict__ units = p.g.units;
  const int64_t U = p.g.num_units;
  const int* __restrict__ rowptr = p.g.rowptr;
  const int* __restrict__ col = p.g.col;
  const float* __restrict__ w = p.g.value;
  const T* __restrict__ vals = static_cast<const T*>(p.values);
  const IT* __restrict__ idx = static_cast<const IT*>(p.indices);
  const int k = p.k, F = p.F;
  T* __restrict__ out = static_cast<T*>(p.out);
  float* __restrict__ ws = p.ws;
  const float* __restrict__ diag = p.g.diag;
  const int64_t ds = p.g.diag_stride;
  const bool mean = p.g.mean;
  extern __shared__ float smem[];
  constexpr int P = 32 / KG;  // edges per step
  constexpr bool PRIV = NB == P;
  static_assert(NB == 1 || PRIV, "NB is 1 or one buffer per edge slot");
  const int lane = threadIdx.x & 31;
  float* wbuf = smem + (threadIdx.x >> 5) * NB * F;
  const int64_t u = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (u >= U) return;  // warp-uniform; no block-wide barriers below
  const int4 un = ldg(units + u);
  for (int f = lane; f < NB * F; f += 32) wbuf[f] = 0.f;
  __syncwarp();
  const int sub = lane / KG, t0 = lane % KG;
  float* buf = PRIV ? wbuf + sub * F : wbuf;
  const int len = un.z - un.y;
  for (int base = 0; base < len; base += 32) {
    const int n = min(32, len - base);
    int c = 0;
    float wv = 1.f;
    if (lane < n) {
      c = ldg(col + un.y + base + lane);
      if (w != nullptr) wv = ldg(w + un.y + base + lane);
    }
    for (int tb = 0; tb < k; tb += KG * VT) {
      const int t = tb + t0 * VT;  // this lane's first entry (VT consecutive ones)
      for (int j = 0; j < n; j += P * kUnroll) {
        float v[kUnroll][VT];
        int ix[kUnroll][VT];
        bool ok[kUnroll];
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) {
          const int e = j + q * P + sub;
          const int cj = __shfl_sync(kFullMask, c, e & 31);
          const float wj = __shfl_sync(kFullMask, wv, e & 31);
          ok[q] = e < n && t < k;
#pragma unroll
          for (int r = 0; r < VT; ++r) {
            v[q][r] = 0.f;
            ix[q][r] = 0;
          }
          if (ok[q]) {
            const int64_t o = (int64_t)cj * k + t;
            const Pack<T, VT> pv = ldg(reinterpret_cast<const Pack<T, VT>*>(vals + o));
            const Pack<IT, VT> pi = ldg(reinterpret_cast<const Pack<IT, VT>*>(idx + o));
#pragma unroll
            for (int r = 0; r < VT; ++r) {
              v[q][r] = wj * to_f(pv.v[r]);
              ix[q][r] = col_of(pi.v[r]);
            }
          }
        }
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) {
          if (PRIV) {
            if (ok[q]) {
#pragma unroll
              for (int r = 0; r < VT; ++r) buf[ix[q][r]] += v[q][r];
            }
            __syncwarp();  // the next edge of this slot may hit the same column
          } else if (ok[q]) {
#pragma unroll
            for (int r = 0; r < VT; ++r) atomicAdd(buf + ix[q][r], v[q][r]);
          }
        }
      }
    }
  }
  const int64_t row = un.x;
  if (diag != nullptr && un.y == ldg(rowptr + row)) {  // first unit of its row adds diag * x[row]
    const float d = ldg(diag + row * ds);
    for (int t = lane; t < k; t += 32) {
      float* a = wbuf + col_of(ldg(idx + row * k + t));
      const float add = d * to_f(ldg(vals + row * k + t));
      if (PRIV) *a += add; else atomicAdd(a, add);  // distinct columns per lane
    }
  }
  __syncwarp();
  const float scale = (mean && len > 0) ? 1.f / (float)len : 1.f;
  for (int f = lane; f < F; f += 32) {
    float r = wbuf[f];
#pragma unroll
    for (int b = 1; b < NB; ++b) r += wbuf[b * F + f];
    if (un.w >= 0) ws[(int64_t)un.w * F + f] = r;
    else out[row * F + f] = from_f<T>(r * scale);
  }
}

template <typename T, typename IT, int KG, int NB, int VT>
void launch_cbsr_spmm(const CbsrSpmmParams& p, cudaStream_t stream) {
  const auto kernel = cbsr_spmm_kernel<T, IT, KG, NB, VT>;
  const size_t smem = (size_t)kWarps * NB * p.F * sizeof(float);
  set_max_dynamic_smem(kernel, smem);
  const unsigned blocks = (unsigned)((p.g.num_units + kWarps - 1) / kWarps);
  if (p.g.num_units > 0)
    kernel<<<blocks, kWarps * 32, smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

template <typename T>
void run_cbsr_spmm(const CbsrSpmmParams& p, cudaStream_t stream) {
  PYG_TC_BOOL_SWITCH(p.F <= 256, BYTE_INDEX, [&] {
    using IT = std::conditional_t<BYTE_INDEX, uint8_t, int16_t>;
    PYG_TC_INT_SWITCH(p.vt, VT, (1, 2), [&] {
      PYG_TC_INT_SWITCH(p.kg, KG, (1, 2, 4, 8, 16, 32), [&] {
        PYG_TC_BOOL_SWITCH(p.priv, PRIV, [&] {
          if constexpr (PRIV && !cbsr_priv_compiled(KG)) {
            TORCH_CHECK(false, "pyg_tc: cbsr_spmm has no private-buffer kernel for KG=", std::to_string(KG));
          } else {
            launch_cbsr_spmm<T, IT, KG, PRIV ? 32 / KG : 1, VT>(p, stream);
          }
        });
      });
    });
    if (p.num_heavy > 0)
      launch_heavy_reduce<T, false>(HeavyReduceParams{p.heavy_rows, p.heavy_ptr, p.num_heavy, p.ws, p.g.rowptr,
                                                      nullptr, p.out, nullptr, 0, p.F, p.g.mean},
                                    stream);
  });
}

template void run_cbsr_spmm<float>(const CbsrSpmmParams&, cudaStream_t);
template void run_cbsr_spmm<__half>(const CbsrSpmmParams&, cudaStream_t);
template void run_cbsr_spmm<__nv_bfloat16>(const CbsrSpmmParams&, cudaStream_t);

}  // namespace pyg_tc
