// CBSR family (MaxK-GNN): the MaxK selection (top-k per row -> CBSR values and
// uint8 / int16 column indices).
//
// Selection: one warp per row, held in registers. The k-th largest value is
// found by counting passes (one compare per element, one warp reduction):
// first pivot mean + z * std (z: the normal quantile of k / width), then a
// Newton step on the count, secant steps, bisection when a step leaves the
// bracket, and bisection of the order-preserving uint32 keys after 12 rounds
// (so at most 44 rounds). It stops as soon as exactly k values lie above a
// pivot. Rows with NaN search on the keys (NaN largest). Ties at the
// threshold are kept in column order; the kept entries are written in
// ascending column order. Order: torch.sort's (-0 == +0, NaN largest).
//
// This file: the selection kernel and its launcher (fp32, fp16, bf16); the
// entry point (and the host-side pivot quantile) is in cbsr_host.cpp.

#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/static_switch.h"
#include "cbsr/cbsr_params.h"

namespace pyg_tc {
namespace {

constexpr int kWarps = kMaxkWarps;

__device__ __forceinline__ unsigned key_of(float f) {
  if (f != f) return 0xffffffffu;  // NaN: largest
  unsigned u = __float_as_uint(f);
  if (u == 0x80000000u) u = 0u;  // -0 == +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float value_of(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Writes the kept entries of one row in ascending column order: every a[e]
// above the threshold lo (at or above it when `exact`), then, when not exact,
// the first k - count(above) entries equal to lo. A is float (rows without
// NaN) or the uint32 key (rows with NaN); padding never qualifies.
template <typename T, typename IT, int EPL, typename A>
__device__ __forceinline__ void write_kept(const A (&a)[EPL], A lo, bool exact, int c0, int F,
                                           int k, const T* __restrict__ xr, T* __restrict__ vr,
                                           IT* __restrict__ ir) {
  const int lane = threadIdx.x & 31;
  int n_gt = 0, n_eq = 0;
#pragma unroll
  for (int e = 0; e < EPL; ++e) {
    n_gt += exact ? a[e] >= lo : a[e] > lo;
    n_eq += (!exact && a[e] == lo && c0 + e < F);
  }
  int eq_incl = n_eq;  // inclusive scan over lanes
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(kFullMask, eq_incl, o);
    if (lane >= o) eq_incl += t;
  }
  const int need = k - (int)__reduce_add_sync(kFullMask, (unsigned)n_gt);
  int eq_rank = eq_incl - n_eq;  // equal entries in earlier lanes
  const int mine = n_gt + max(0, min(n_eq, need - eq_rank));
  int off = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(kFullMask, off, o);
    if (lane >= o) off += t;
  }
  off -= mine;
#pragma unroll
  for (int e = 0; e < EPL; ++e) {
    bool take = exact ? a[e] >= lo : a[e] > lo;
    if (!exact && a[e] == lo && c0 + e < F) {
      take = eq_rank < need;
      ++eq_rank;
    }
    if (take) {
      vr[off] = ldg(xr + c0 + e);  // the input value itself (keeps -0 and NaN payloads)
      ir[off] = static_cast<IT>(c0 + e);
      ++off;
    }
  }
}

// Fast path for rows without NaN: the same search on the float values
// themselves (float order is the key order there, -0 == +0 included), with
// no per-element key conversions; key bisection only as the last resort.
template <typename T, typename IT, int EPL>
__device__ __forceinline__ void select_floats(const float (&v)[EPL], int c0, int F, int k, float z,
                                              float phi, const T* __restrict__ xr,
                                              T* __restrict__ vr, IT* __restrict__ ir) {
  float mn = INFINITY, mx = -INFINITY, s1 = 0.f, s2 = 0.f;
#pragma unroll
  for (int e = 0; e < EPL; ++e) {
    if (c0 + e < F) {
      mn = fminf(mn, v[e]);
      mx = fmaxf(mx, v[e]);
      s1 += v[e];
      s2 += v[e] * v[e];
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    mn = fminf(mn, __shfl_xor_sync(kFullMask, mn, o));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, o));
    s1 += __shfl_xor_sync(kFullMask, s1, o);
    s2 += __shfl_xor_sync(kFullMask, s2, o);
  }
  const float mean = s1 / F;
  const float sd = sqrtf(fmaxf(s2 / F - mean * mean, 0.f));
  const float target = k + 0.5f;
  // Invariant: count(v >= lo) >= k and count(v > hi) < k.
  float lo = mn, hi = mx;
  float t_prev = 0.f, c_prev = 0.f, t_cur = 0.f, c_cur = 0.f;
  bool exact = false;
  for (int it = 0; lo < hi; ++it) {
    float t;
    if (it == 0) t = mean + z * sd;
    else if (it == 1) t = t_cur + (c_cur - target) * sd / (F * phi);
    else if (it < 8 && c_cur != c_prev) t = t_cur + (t_prev - t_cur) * (c_cur - target) / (c_cur - c_prev);
    else t = 0.5f * lo + 0.5f * hi;
    if (!(t > lo && t <= hi) || it >= 12) {  // leave the bracket / too many rounds: bisect keys
      const unsigned a = key_of(lo), b = key_of(hi);
      t = value_of(a + ((b - a) >> 1) + 1u);
    }
    int cnt = 0;
#pragma unroll
    for (int e = 0; e < EPL; ++e) cnt += v[e] >= t;  // padding is -inf < t
    const int c = (int)__reduce_add_sync(kFullMask, (unsigned)cnt);
    t_prev = t_cur;
    c_prev = c_cur;
    t_cur = t;
    c_cur = (float)c;
    if (c >= k) {
      lo = t;
      if (c == k) { exact = true; break; }
    } else {
      unsigned kb = key_of(t) - 1u;  // the next float below t (-0 is merged with +0,
      if (kb == 0x7fffffffu) kb = 0x7ffffffeu;  // so below +0 comes -denorm_min)
      hi = value_of(kb);
    }
  }
  write_kept<T, IT, EPL, float>(v, lo, exact, c0, F, k, xr, vr, ir);
}

// EPL elements per lane: lane l owns columns [l * EPL, l * EPL + EPL).
template <typename T, typename IT, int EPL>
__global__ void __launch_bounds__(kWarps * 32)
maxk_select_kernel(const MaxkSelectParams p) {
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const int64_t N = p.rows;
  const int F = p.F, k = p.k;
  const float z = p.z, phi = p.phi;
  T* __restrict__ vals = static_cast<T*>(p.values);
  IT* __restrict__ idx = static_cast<IT*>(p.indices);
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= N) return;  // warp-uniform
  const T* xr = x + row * F;
  const int c0 = lane * EPL;
  float xv[EPL];
  constexpr int V = (EPL * (int)sizeof(T)) % 16 == 0 ? 16 / (int)sizeof(T) : 1;
  if (V > 1 && F == 32 * EPL && aligned16(x)) {
#pragma unroll
    for (int e = 0; e < EPL; e += V) {
      const Pack<T, V> pk = ldg(reinterpret_cast<const Pack<T, V>*>(xr + c0 + e));
#pragma unroll
      for (int v = 0; v < V; ++v) xv[e + v] = to_f(pk.v[v]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < EPL; ++e) xv[e] = c0 + e < F ? to_f(ldg(xr + c0 + e)) : -INFINITY;
  }
  bool nan = false;
#pragma unroll
  for (int e = 0; e < EPL; ++e) nan |= xv[e] != xv[e];
  if (!__any_sync(kFullMask, nan)) {
    select_floats<T, IT, EPL>(xv, c0, F, k, z, phi, xr, vals + row * k, idx + row * k);
    return;
  }
  // Rows with NaN: the search on order-preserving uint32 keys (NaN largest).
  unsigned key[EPL];
#pragma unroll
  for (int e = 0; e < EPL; ++e) key[e] = c0 + e < F ? key_of(xv[e]) : 0u;  // 0: padding
  // Valid keys are never 0 (that would be a NaN bit pattern, mapped to the
  // top), so padding never counts once the pivot is >= 1.
  unsigned mn = 0xffffffffu, mx = 0u;
#pragma unroll
  for (int e = 0; e < EPL; ++e) {
    if (c0 + e < F) mn = min(mn, key[e]);
    mx = max(mx, key[e]);
  }
  unsigned lo = __reduce_min_sync(kFullMask, mn), hi = __reduce_max_sync(kFullMask, mx);
  // Invariant: count(key >= lo) >= k and count(key >= hi + 1) < k. Value
  // midpoints while the bracket is finite (12 rounds at most), then key
  // midpoints (32 more at most).
  bool exact = false;
  for (int it = 0; lo < hi; ++it) {
    const float a = value_of(lo), b = value_of(hi);
    unsigned mid = (it < 12 && isfinite(a) && isfinite(b)) ? key_of(0.5f * a + 0.5f * b)
                                                          : lo + ((hi - lo) >> 1) + 1u;
    mid = min(max(mid, lo + 1u), hi);
    int cnt = 0;
#pragma unroll
    for (int e = 0; e < EPL; ++e) cnt += key[e] >= mid;
    const int c = (int)__reduce_add_sync(kFullMask, (unsigned)cnt);
    if (c >= k) {
      lo = mid;
      if (c == k) { exact = true; break; }
    } else {
      hi = mid - 1u;
    }
  }
  write_kept<T, IT, EPL, unsigned>(key, lo, exact, c0, F, k, xr, vals + row * k, idx + row * k);
}

}  // namespace

// One warp per row, EPL = the row's elements per lane.
template <typename T>
void run_maxk_select(const MaxkSelectParams& p, cudaStream_t stream) {
  const unsigned blocks = (unsigned)((p.rows + kWarps - 1) / kWarps);
  PYG_TC_BOOL_SWITCH(p.F <= 256, BYTE_INDEX, [&] {
    using IT = std::conditional_t<BYTE_INDEX, uint8_t, int16_t>;
    PYG_TC_INT_SWITCH(p.epl, EPL, (1, 2, 4, 8, 16, 32), [&] {
      maxk_select_kernel<T, IT, EPL><<<blocks, kWarps * 32, 0, stream>>>(p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
}

template void run_maxk_select<float>(const MaxkSelectParams&, cudaStream_t);
template void run_maxk_select<__half>(const MaxkSelectParams&, cudaStream_t);
template void run_maxk_select<__nv_bfloat16>(const MaxkSelectParams&, cudaStream_t);

}  // namespace pyg_tc
