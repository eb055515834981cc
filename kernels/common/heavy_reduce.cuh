// Second pass of the unit-schedule kernels (csr SpMM, maxk CBSR SpGEMM):
// heavy rows were split into units that wrote fp32 partial rows to workspace
// slots; this kernel reduces each heavy row's slots in slot order.
#pragma once

#include <c10/cuda/CUDAException.h>

#include "common/dtype.cuh"

namespace pyg_tc {

// One block of kReduceWarps warps per (heavy row, 32-feature tile). Warp w
// folds slots s0 + w, s0 + w + kReduceWarps, ... (four loads in flight),
// lanes over 32 consecutive features (128-byte coalesced rows); the warp
// partials are then combined in warp order through shared memory. The order
// is fixed, so the result is deterministic.
constexpr int kReduceWarps = 4;

// Filled by the family's launcher from its own params (x and out of its dtype T).
struct HeavyReduceParams {
  const int* heavy_rows{};
  const int* heavy_ptr{};
  int64_t num_heavy{};  // grid x
  const float* ws{};  // [num_slots, F] fp32 partial rows
  const int* rowptr{};  // the degrees, for mean
  const void* x{};  // [N, F], for the diag term
  void* out{};  // [N, F]
  const float* diag{};  // nullptr = none
  int64_t diag_stride{};
  int F{};
  bool mean{};
};

template <bool MAX>
__device__ __forceinline__ float combine(float a, float b) { return MAX ? fmaxf(a, b) : a + b; }

template <typename T, bool MAX>
__global__ void __launch_bounds__(kReduceWarps * 32)
heavy_reduce_kernel(const HeavyReduceParams p) {
  const int* __restrict__ heavy_rows = p.heavy_rows;
  const int* __restrict__ heavy_ptr = p.heavy_ptr;
  const float* __restrict__ ws = p.ws;
  const int* __restrict__ rowptr = p.rowptr;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ out = static_cast<T*>(p.out);
  const float* __restrict__ diag = p.diag;
  const int64_t diag_stride = p.diag_stride;
  const int F = p.F;
  const bool mean = p.mean;
  __shared__ float part[kReduceWarps][32];
  const int h = blockIdx.x;
  const int64_t row = heavy_rows[h];
  const int s0 = heavy_ptr[h], s1 = heavy_ptr[h + 1];
  // an empty entry is a padded schedule's filler (a real heavy row has >= 2
  // slots): nothing to write (the whole block returns, before the barrier)
  if (s0 == s1) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int f = blockIdx.y * 32 + lane;
  float acc = MAX ? -INFINITY : 0.f;
  if (f < F) {
    int s = s0 + warp;
    constexpr int W = kReduceWarps;
    for (; s + 3 * W < s1; s += 4 * W) {
      const float p0 = ws[(int64_t)s * F + f], p1 = ws[(int64_t)(s + W) * F + f];
      const float p2 = ws[(int64_t)(s + 2 * W) * F + f], p3 = ws[(int64_t)(s + 3 * W) * F + f];
      acc = combine<MAX>(combine<MAX>(acc, p0), combine<MAX>(combine<MAX>(p1, p2), p3));
    }
    for (; s < s1; s += W) acc = combine<MAX>(acc, ws[(int64_t)s * F + f]);
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (warp != 0 || f >= F) return;
  float r = part[0][lane];
#pragma unroll
  for (int w = 1; w < kReduceWarps; ++w) r = combine<MAX>(r, part[w][lane]);
  if (mean) r /= (float)(rowptr[row + 1] - rowptr[row]);
  if (diag != nullptr) r += diag[row * diag_stride] * to_f(x[row * F + f]);
  out[row * F + f] = from_f<T>(r);
}

// Grid: one block per (heavy row, 32-feature tile).
template <typename T, bool MAX>
inline void launch_heavy_reduce(const HeavyReduceParams& p, cudaStream_t stream) {
  dim3 grid((unsigned)p.num_heavy, (unsigned)((p.F + 31) / 32));
  heavy_reduce_kernel<T, MAX><<<grid, kReduceWarps * 32, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace pyg_tc
