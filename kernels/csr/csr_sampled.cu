// CSR family: ES-SpMM, the sampled aggregation (issue 18, docs/es_spmm.md).
// A group of L lanes owns one row. A row of degree d <= S aggregates all its
// edges in CSR order; a capped row aggregates S edges whose positions in the
// row are computed here, slot by slot, with the integer arithmetic of
// pyg_tc/ops/sample.py (the specification and test oracle): 'uniform' a keyed
// permutation of [0, d) (invertible b-bit mixer + cycle walking) rotated by a
// keyed offset, 'bucket' the first S, 'fastrand' (577 k) mod d. Each lane
// computes one slot of a batch of L (its column id and weight; the
// cache-first staging of the paper, in registers), the group broadcasts them
// with shuffles and every lane accumulates its part of the row's features in
// fp32. Sums of capped rows are scaled by d / S (unbiased), means divide by
// the kept count, max keeps the kept maximum (0 for an empty row). Capping
// bounds every row's work by S, so rows need no split: no atomics, no
// workspace. Feature offsets are 64-bit.

#include <c10/cuda/CUDAException.h>

#include "common/dtype.cuh"
#include "common/static_switch.h"
#include "csr/csr_params.h"

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;
constexpr uint32_t kM31 = 0x7FFFFFFFu;

// pyg_tc.ops.sample.hash32 (lowbias32)
__device__ __forceinline__ uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// pyg_tc.ops.sample._mix: a bijection of the b-bit integers
__device__ __forceinline__ uint64_t mix(uint64_t x, uint64_t m, int h, uint32_t k0, uint32_t k1, uint32_t k2) {
  x = (x ^ k0) & m;
  x = (x * ((k1 & kM31) | 1u)) & m;
  x ^= x >> h;
  x = (x * ((k2 & kM31) | 1u)) & m;
  return x ^ (x >> h);
}

// The per-row state of 'uniform' (keys, b-bit mask, shift, rotation).
struct RowKeys {
  uint32_t k0, k1, k2;
  uint64_t m, r;
  int h;
};

__device__ __forceinline__ RowKeys row_keys(int64_t row, int64_t d, uint32_t seed) {
  const uint32_t s = hash32(seed ^ 0x9E3779B9u);
  RowKeys k;
  k.k0 = hash32(static_cast<uint32_t>(row) ^ s);
  k.k1 = hash32(k.k0 ^ 0x85EBCA6Bu);
  k.k2 = hash32(k.k1 ^ 0xC2B2AE35u);
  const uint32_t k3 = hash32(k.k2 ^ 0x27D4EB2Fu);
  const int b = max(1, 32 - __clz(static_cast<unsigned>(d - 1)));
  k.m = (1ull << b) - 1;
  k.h = (b + 1) >> 1;
  const uint64_t hi = static_cast<uint64_t>(k3 & kM31) << 31;
  k.r = (hi | (hash32(k3 ^ 0x165667B1u) & kM31)) % static_cast<uint64_t>(d);
  return k;
}

// Position in its row of the edge that slot k keeps (the row has d > S edges).
__device__ __forceinline__ int64_t slot_index(int64_t k, int64_t d, int sampling, const RowKeys& key) {
  if (sampling == 1) return k;
  if (sampling == 2) return (k * 577) % d;
  uint64_t y = mix(static_cast<uint64_t>(k), key.m, key.h, key.k0, key.k1, key.k2);
  while (y >= static_cast<uint64_t>(d)) y = mix(y, key.m, key.h, key.k0, key.k1, key.k2);
  return static_cast<int64_t>((y + key.r) % static_cast<uint64_t>(d));
}

template <typename T, int V, int L>
__global__ void __launch_bounds__(kThreads)
sampled_spmm_kernel(const CsrSampledParams p) {
  using P = Pack<T, V>;
  constexpr int G = 32 / L;
  const int lane = threadIdx.x & 31;
  const int grp = lane / L;
  const int l = lane % L;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t row = warp * G + grp;
  const bool live = row < p.num_rows;
  const int64_t start = live ? p.rowptr[row] : 0;
  const int64_t d = live ? p.rowptr[row + 1] - start : 0;
  const bool capped = d > p.S;
  const int n = static_cast<int>(capped ? p.S : d);
  RowKeys key{};
  if (capped && p.sampling == 0) key = row_keys(row, d, p.seed);
  // the warp's groups walk their rows in step (shuffles need every lane)
  int nmax = n;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) nmax = max(nmax, __shfl_xor_sync(kFullMask, nmax, o));
  const float scale = p.reduce == 0 && capped ? static_cast<float>(static_cast<double>(d) / p.S)
                      : p.reduce == 1 && n > 0 ? 1.f / n : 1.f;
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  const bool mx = p.reduce == 2;
  for (int f0 = 0; f0 < p.F; f0 += L * V) {
    const int f = f0 + l * V;
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = mx ? -INFINITY : 0.f;
    for (int base = 0; base < nmax; base += L) {
      // this lane's slot of the batch: column id and weight
      const int k = base + l;
      int c = 0;
      float w = 0.f;
      if (k < n) {
        const int64_t e = start + (capped ? slot_index(k, d, p.sampling, key) : k);
        c = p.col[e];
        w = p.value ? p.value[e] : 1.f;
      }
      const int jn = min(L, nmax - base);
      for (int j = 0; j < jn; ++j) {
        const int cj = __shfl_sync(kFullMask, c, grp * L + j);
        const float wj = __shfl_sync(kFullMask, w, grp * L + j);
        if (base + j < n && f < p.F) {
          const T* xr = x + static_cast<int64_t>(cj) * p.F + f;
          if constexpr (V > 1) {
            const P px = *reinterpret_cast<const P*>(xr);
#pragma unroll
            for (int v = 0; v < V; ++v)
              acc[v] = mx ? fmaxf(acc[v], wj * to_f(px.v[v])) : fmaf(wj, to_f(px.v[v]), acc[v]);
          } else {
            acc[0] = mx ? fmaxf(acc[0], wj * to_f(xr[0])) : fmaf(wj, to_f(xr[0]), acc[0]);
          }
        }
      }
    }
    if (live && f < p.F) {
      T* o = out + row * static_cast<int64_t>(p.F) + f;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float r = mx ? (n > 0 ? acc[v] : 0.f) : acc[v] * scale;
        o[v] = from_f<T>(r);
      }
    }
  }
}

template <typename T, int V, int L>
void launch_sampled(const CsrSampledParams& p, cudaStream_t stream) {
  constexpr int G = 32 / L;
  const int64_t rows_per_block = (kThreads / 32) * G;
  const int64_t blocks = (p.num_rows + rows_per_block - 1) / rows_per_block;
  if (blocks == 0) return;
  sampled_spmm_kernel<T, V, L><<<(unsigned)blocks, kThreads, 0, stream>>>(p);
}

}  // namespace

template <typename T>
void run_csr_sampled(const CsrSampledParams& p, cudaStream_t stream) {
  PYG_TC_BOOL_SWITCH(p.vec, VEC, [&] {
    constexpr int V = VEC ? vec16<T>() : 1;
    PYG_TC_INT_SWITCH(p.lanes, L, (4, 8, 16, 32), [&] { launch_sampled<T, V, L>(p, stream); });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template void run_csr_sampled<float>(const CsrSampledParams&, cudaStream_t);
template void run_csr_sampled<__half>(const CsrSampledParams&, cudaStream_t);
template void run_csr_sampled<__nv_bfloat16>(const CsrSampledParams&, cudaStream_t);

}  // namespace pyg_tc
