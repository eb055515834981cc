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
// fp32: <= 64 registers, 32 warps per SM to hide the gathers' latency (8 bytes spilled);
// the half types need more for their conversions (<= 80 registers, 24 warps; bf16 vectors spill <= 56 bytes)
template <typename T> constexpr int min_blocks() { return sizeof(T) == 4 ? 4 : 3; }
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

// pyg_tc.ops.sample._mix: a bijection of the b-bit integers. b <= 31 (d < 2^31),
// so the products are taken modulo 2^32 before the mask: uint32 arithmetic.
__device__ __forceinline__ uint32_t mix(uint32_t x, uint32_t m, int h, uint32_t k0, uint32_t k1, uint32_t k2) {
  x = (x ^ k0) & m;
  x = (x * ((k1 & kM31) | 1u)) & m;
  x ^= x >> h;
  x = (x * ((k2 & kM31) | 1u)) & m;
  return x ^ (x >> h);
}

// The per-row state of 'uniform' (keys, b-bit mask, shift, rotation).
struct RowKeys {
  uint32_t k0, k1, k2, m, r;
  int h;
};

__device__ __forceinline__ RowKeys row_keys(uint32_t row, uint32_t d, uint32_t seed) {
  const uint32_t s = hash32(seed ^ 0x9E3779B9u);
  RowKeys k;
  k.k0 = hash32(row ^ s);
  k.k1 = hash32(k.k0 ^ 0x85EBCA6Bu);
  k.k2 = hash32(k.k1 ^ 0xC2B2AE35u);
  const uint32_t k3 = hash32(k.k2 ^ 0x27D4EB2Fu);
  const int b = max(1, 32 - __clz(d - 1));
  k.m = (b >= 32) ? 0xFFFFFFFFu : (1u << b) - 1;
  k.h = (b + 1) >> 1;
  const uint64_t hi = static_cast<uint64_t>(k3 & kM31) << 31;
  k.r = static_cast<uint32_t>((hi | (hash32(k3 ^ 0x165667B1u) & kM31)) % d);  // once per row
  return k;
}

// Position in its row of the edge that slot k keeps (the row has d > S > k edges).
__device__ __forceinline__ uint32_t slot_index(uint32_t k, uint32_t d, int sampling, const RowKeys& key) {
  if (sampling == 1) return k;
  if (sampling == 2) return static_cast<uint32_t>((static_cast<uint64_t>(k) * 577u) % d);
  uint32_t y = mix(k, key.m, key.h, key.k0, key.k1, key.k2);
  while (y >= d) y = mix(y, key.m, key.h, key.k0, key.k1, key.k2);  // cycle walking
  const uint32_t t = y + key.r;  // both < d < 2^31: (y + r) mod d without a division
  return t >= d ? t - d : t;
}

// A group of L lanes per row; rows taken in p.order (degrees descending), so
// the G groups of a warp walk rows of nearly equal kept counts.
template <typename T, int V, int L>
__global__ void __launch_bounds__(kThreads, min_blocks<T>())
sampled_spmm_kernel(const CsrSampledParams p) {
  using P = Pack<T, V>;
  constexpr int G = 32 / L;
  constexpr int U = 4;  // kept rows in flight per lane (L is a multiple of U)
  const int* __restrict__ col = p.col;
  const float* __restrict__ val = p.value;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ out = static_cast<T*>(p.out);
  const int lane = threadIdx.x & 31;
  const int grp = lane / L;
  const int l = lane % L;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t slot_row = warp * G + grp;
  const bool live = slot_row < p.num_rows;
  const int64_t row = !live ? 0 : p.order ? __ldg(p.order + slot_row) : slot_row;
  const int64_t start = live ? __ldg(p.rowptr + row) : 0;
  const int d = live ? static_cast<int>(__ldg(p.rowptr + row + 1) - start) : 0;
  const bool capped = d > p.S;
  const int n = capped ? p.S : d;
  RowKeys key{};
  if (capped && p.sampling == 0) key = row_keys(static_cast<uint32_t>(row), d, p.seed);
  // the warp's groups walk their rows in step (shuffles need every lane)
  int nmax = n;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) nmax = max(nmax, __shfl_xor_sync(kFullMask, nmax, o));
  const float scale = p.reduce == 0 && capped ? static_cast<float>(static_cast<double>(d) / p.S)
                      : p.reduce == 1 && n > 0 ? 1.f / n : 1.f;
  const bool mx = p.reduce == 2;
  // this lane's slot k of a batch: its column id and weight (0 past the row's kept count)
  auto fetch = [&](int k, int& c, float& w) {
    c = 0;
    w = 0.f;
    if (k < n) {
      const int64_t e = start + (capped ? slot_index(k, d, p.sampling, key) : k);
      c = __ldg(col + e);
      w = val ? __ldg(val + e) : 1.f;
    }
  };
  for (int f0 = blockIdx.y * L * V; f0 < p.F; f0 += gridDim.y * L * V) {
    const int f = f0 + l * V;
    const bool fin = f < p.F;
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = mx ? -INFINITY : 0.f;
    int c, cn;
    float w, wn;
    fetch(l, c, w);
    for (int base = 0; base < nmax; base += L) {
      fetch(base + L + l, cn, wn);  // the next batch's ids, in flight during this batch's gathers
      const int jn = min(L, nmax - base);
      // U kept rows in flight per lane: broadcast U (column, weight) pairs, then U loads, then U FMAs
      for (int j = 0; j < jn; j += U) {
        int cj[U];
        float wj[U];
        bool ok[U];
        P px[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          cj[u] = __shfl_sync(kFullMask, c, grp * L + j + u);
          wj[u] = __shfl_sync(kFullMask, w, grp * L + j + u);
          ok[u] = fin && base + j + u < n;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (ok[u]) {
            const T* xr = x + static_cast<int64_t>(cj[u]) * p.F + f;
            if constexpr (V > 1) {
              px[u] = *reinterpret_cast<const P*>(xr);
            } else {
              px[u].v[0] = xr[0];
            }
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (ok[u]) {
#pragma unroll
            for (int v = 0; v < V; ++v)
              acc[v] = mx ? fmaxf(acc[v], wj[u] * to_f(px[u].v[v])) : fmaf(wj[u], to_f(px[u].v[v]), acc[v]);
          }
        }
      }
      c = cn;
      w = wn;
    }
    if (live && fin) {
      const int64_t at = row * static_cast<int64_t>(p.F) + f;
      const float dg = p.diag ? p.diag[row * p.diag_stride] : 0.f;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        float r = mx ? (n > 0 ? acc[v] : 0.f) : acc[v] * scale;
        if (p.diag) r = fmaf(dg, to_f(x[at + v]), r);  // the self term, never sampled
        out[at + v] = from_f<T>(r);
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
  sampled_spmm_kernel<T, V, L><<<dim3((unsigned)blocks, (unsigned)p.slices), kThreads, 0, stream>>>(p);
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
