// MaxK-GNN family: the forward SpGEMM (CSR adjacency x CBSR features ->
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
// maxk_host.cpp.

#include <string>
#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/heavy_reduce.cuh"
#include "common/launch.h"
#include "common/static_switch.h"
#include "maxk/maxk_device.cuh"
#include "maxk/maxk_params.h"

namespace pyg_tc {
namespace {

// NB = 32 / KG: one private buffer per edge slot of a step, so no two lanes
// of a step touch one address (the k columns of a CBSR row are distinct) and
// the accumulation needs no atomics; the buffers are summed in a fixed order
// at the write-back (bitwise reproducible). NB = 1: one buffer per warp with
// shared-memory atomics, for small k where NB buffers would not fit.
template <typename T, typename IT, int KG, int NB, int VT>
__global__ void __launch_bounds__(kWarps * 32)
cbsr_spmm_kernel(const int4* __restrict__ units, int64_t U, const int* __restrict__ rowptr,
                 const int* __restrict__ col, const float* __restrict__ w,
                 const T* __restrict__ vals, const IT* __restrict__ idx, int k, int F,
                 T* __restrict__ out, float* __restrict__ ws, const float* __restrict__ diag,
                 int64_t ds, bool mean) {
  extern __shared__ float smem[];
  constexpr int P = 32 / KG;  // edges per step
  constexpr bool PRIV = NB == P;
  static_assert(NB == 1 || PRIV, "NB is 1 or one buffer per edge slot");
  const int lane = threadIdx.x & 31;
  float* wbuf = smem + (threadIdx.x >> 5) * NB * F;
  const int64_t u = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (u >= U) return;  // warp-uniform; no block-wide barriers below
  const int4 un = units[u];
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
      c = __ldg(col + un.y + base + lane);
      if (w != nullptr) wv = __ldg(w + un.y + base + lane);
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
            const int64_t p = (int64_t)cj * k + t;
            const Pack<T, VT> pv = *reinterpret_cast<const Pack<T, VT>*>(vals + p);
            const Pack<IT, VT> pi = *reinterpret_cast<const Pack<IT, VT>*>(idx + p);
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
  if (diag != nullptr && un.y == rowptr[row]) {  // first unit of its row adds diag * x[row]
    const float d = diag[row * ds];
    for (int t = lane; t < k; t += 32) {
      float* a = wbuf + col_of(idx[row * k + t]);
      const float add = d * to_f(vals[row * k + t]);
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
    kernel<<<blocks, kWarps * 32, smem, stream>>>(
        p.g.units, p.g.num_units, p.g.rowptr, p.g.col, p.g.value, static_cast<const T*>(p.values),
        static_cast<const IT*>(p.indices), p.k, p.F, static_cast<T*>(p.out), p.ws, p.g.diag,
        p.g.diag_stride, p.g.mean);
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
      launch_heavy_reduce<T, false>(p.heavy_rows, p.heavy_ptr, p.num_heavy, p.ws, p.g.rowptr, nullptr,
                                    static_cast<T*>(p.out), nullptr, 0, p.F, p.g.mean, stream);
  });
}

template void run_cbsr_spmm<float>(const CbsrSpmmParams&, cudaStream_t);
template void run_cbsr_spmm<__half>(const CbsrSpmmParams&, cudaStream_t);
template void run_cbsr_spmm<__nv_bfloat16>(const CbsrSpmmParams&, cudaStream_t);

}  // namespace pyg_tc
