// MaxK-GNN kernel family: the MaxK selection (top-k per row -> CBSR), the
// forward SpGEMM (CSR adjacency x CBSR features -> dense) and the backward
// SSpMM (sampled A^T x dense gradient -> CBSR values).
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
// SSpMM (Algorithm 2, outer product): one warp per unit of the *forward* CSR:
// the dense gradient row of the unit's target i is staged in shared memory
// (coalesced, once per unit), then every edge (i, j) gathers G[i, idx[j, :]]
// from shared memory and adds w * that to the fp32 result row j with global
// atomics (coalesced: KG consecutive floats per edge). These atomics make the
// summation order of the backward pass run-to-run variable (last-bit
// differences, as in PyG's own scatter backward); the deterministic fallback
// is the reference path, taken when torch.use_deterministic_algorithms(True).

#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <tuple>
#include <type_traits>

#include "common.cuh"
#include "heavy_reduce.cuh"

namespace pyg_tc {
namespace {

constexpr int kWarps = 8;  // warps per block of every kernel in this file

// ---------------------------------------------------------------------------
// MaxK selection

__device__ __forceinline__ unsigned key_of(float f) {
  if (f != f) return 0xffffffffu;  // NaN: largest
  unsigned u = __float_as_uint(f);
  if (u == 0x80000000u) u = 0u;  // -0 == +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float value_of(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

template <typename IT>
__device__ __forceinline__ int col_of(IT raw) {
  return static_cast<int>(static_cast<std::make_unsigned_t<IT>>(raw));
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
      vr[off] = xr[c0 + e];  // the input value itself (keeps -0 and NaN payloads)
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
maxk_select_kernel(const T* __restrict__ x, int64_t N, int F, int k, float z, float phi,
                   T* __restrict__ vals, IT* __restrict__ idx) {
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
      const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(xr + c0 + e);
#pragma unroll
      for (int v = 0; v < V; ++v) xv[e + v] = to_f(p.v[v]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < EPL; ++e) xv[e] = c0 + e < F ? to_f(xr[c0 + e]) : -INFINITY;
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

// Normal quantile z with P(Z > z) = p (bisection on erfc; host, once per call)
// and the density at z: the selection kernel's first pivot and Newton step.
void normal_tail_quantile(double p, float* z, float* phi) {
  double lo = -10.0, hi = 10.0;
  for (int i = 0; i < 80; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(mid / std::sqrt(2.0)) > p) lo = mid; else hi = mid;
  }
  const double zz = 0.5 * (lo + hi);
  *z = (float)zz;
  *phi = (float)std::max(std::exp(-0.5 * zz * zz) / std::sqrt(2.0 * M_PI), 1e-4);
}

template <typename T, typename IT>
void launch_select(const T* x, int64_t N, int F, int k, T* vals, IT* idx, cudaStream_t stream) {
  const unsigned blocks = (unsigned)((N + kWarps - 1) / kWarps);
  const int epl = (F + 31) / 32;
  float z, phi;
  normal_tail_quantile((k + 0.5) / F, &z, &phi);
#define PYG_TC_SELECT(E)                                                                       \
  if (epl <= E) {                                                                              \
    maxk_select_kernel<T, IT, E><<<blocks, kWarps * 32, 0, stream>>>(x, N, F, k, z, phi, vals, idx); \
    C10_CUDA_KERNEL_LAUNCH_CHECK();                                                            \
    return;                                                                                    \
  }
  PYG_TC_SELECT(1)
  PYG_TC_SELECT(2)
  PYG_TC_SELECT(4)
  PYG_TC_SELECT(8)
  PYG_TC_SELECT(16)
  PYG_TC_SELECT(32)
#undef PYG_TC_SELECT
  TORCH_CHECK(false, "pyg_tc: maxk_select supports widths up to 1024");
}

// ---------------------------------------------------------------------------
// SpGEMM: out = A x CBSR

constexpr int kUnroll = 4;

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

// SSpMM: out[j, t] += w_ij * s_i * G[i, idx[j, t]] over the forward units.
template <typename T, typename IT, int KG>
__global__ void __launch_bounds__(kWarps * 32)
cbsr_sspmm_kernel(const int4* __restrict__ units, int64_t U, const int* __restrict__ rowptr,
                  const int* __restrict__ col, const float* __restrict__ w,
                  const T* __restrict__ G, const IT* __restrict__ idx, int k, int F,
                  float* __restrict__ out, const float* __restrict__ diag, int64_t ds, bool mean) {
  extern __shared__ float smem[];
  constexpr int P = 32 / KG;
  const int lane = threadIdx.x & 31;
  float* buf = smem + (threadIdx.x >> 5) * F;
  const int64_t u = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (u >= U) return;
  const int4 un = units[u];
  const int64_t row = un.x;
  const int len = un.z - un.y;
  const bool do_diag = diag != nullptr && un.y == rowptr[row];
  if (len == 0 && !do_diag) return;
  const int deg = rowptr[row + 1] - rowptr[row];
  const float scale = (mean && deg > 0) ? 1.f / (float)deg : 1.f;
  const T* gr = G + row * F;
  for (int f = lane; f < F; f += 32) buf[f] = to_f(gr[f]) * scale;
  __syncwarp();
  const int sub = lane / KG, t0 = lane % KG;
  for (int base = 0; base < len; base += 32) {
    const int n = min(32, len - base);
    int c = 0;
    float wv = 1.f;
    if (lane < n) {
      c = __ldg(col + un.y + base + lane);
      if (w != nullptr) wv = __ldg(w + un.y + base + lane);
    }
    for (int tb = 0; tb < k; tb += KG) {
      const int t = tb + t0;
      for (int j = 0; j < n; j += P * kUnroll) {
        int ix[kUnroll];
        int64_t p[kUnroll];
        float wq[kUnroll];
        bool ok[kUnroll];
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) {
          const int e = j + q * P + sub;
          const int cj = __shfl_sync(kFullMask, c, e & 31);
          wq[q] = __shfl_sync(kFullMask, wv, e & 31);
          ok[q] = e < n && t < k;
          p[q] = (int64_t)cj * k + t;
          ix[q] = ok[q] ? col_of(idx[p[q]]) : 0;
        }
#pragma unroll
        for (int q = 0; q < kUnroll; ++q)
          if (ok[q]) atomicAdd(out + p[q], wq[q] * buf[ix[q]]);
      }
    }
  }
  if (do_diag) {
    const float d = diag[row * ds];
    for (int t = lane; t < k; t += 32) atomicAdd(out + row * k + t, d * buf[col_of(idx[row * k + t])]);
  }
}

constexpr int64_t kMaxWidth = 4096;  // 8 warps x 4096 floats = 128 KiB of shared memory
constexpr size_t kPrivSmem = 64 * 1024;  // SpGEMM private buffers: at most this much per block

template <typename Kernel>
void set_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

struct GraphArgs {
  const int4* units;
  int64_t U;
  const int* rowptr;
  const int* col;
  const float* w;
  const float* diag;
  int64_t ds;
  bool mean;
};

GraphArgs graph_args(const at::Tensor& rowptr, const at::Tensor& col,
                     const std::optional<at::Tensor>& value, const at::Tensor& units,
                     const std::optional<at::Tensor>& diag, c10::string_view reduce,
                     int64_t num_src, at::Tensor& vkeep, at::Tensor& dkeep) {
  check_index(rowptr, "rowptr");
  check_index(col, "col");
  check_index(units, "units");
  TORCH_CHECK(units.dim() == 2 && units.size(1) == 4, "pyg_tc: units must be [U, 4]");
  const bool mean = reduce == "mean";
  TORCH_CHECK(mean || reduce == "sum", "pyg_tc: CBSR kernels support reduce sum and mean");
  GraphArgs a{reinterpret_cast<const int4*>(units.data_ptr<int>()), units.size(0),
              rowptr.data_ptr<int>(), col.data_ptr<int>(), nullptr, nullptr, 0, mean};
  if (value.has_value()) {
    vkeep = value->contiguous();
    TORCH_CHECK(vkeep.scalar_type() == at::kFloat && vkeep.is_cuda() && vkeep.numel() == col.numel(),
                "pyg_tc: value must be a float32 CUDA tensor with one entry per edge");
    a.w = vkeep.data_ptr<float>();
  }
  if (diag.has_value()) {
    TORCH_CHECK(!mean, "pyg_tc: diag is supported with reduce='sum' only");
    TORCH_CHECK(num_src == rowptr.size(0) - 1, "pyg_tc: diag needs a square adjacency");
    dkeep = diag->contiguous();
    TORCH_CHECK(dkeep.scalar_type() == at::kFloat && dkeep.is_cuda() &&
                    (dkeep.numel() == num_src || dkeep.numel() == 1),
                "pyg_tc: diag must be float32 CUDA with N entries or one");
    a.diag = dkeep.data_ptr<float>();
    a.ds = dkeep.numel() == 1 ? 0 : 1;
  }
  return a;
}

void check_cbsr(const at::Tensor& indices, int64_t rows, int64_t k, int64_t width) {
  TORCH_CHECK(indices.is_cuda() && indices.dim() == 2 && indices.size(0) == rows &&
                  indices.size(1) == k,
              "pyg_tc: CBSR indices must be a CUDA tensor [N, k] matching the values");
  TORCH_CHECK(indices.scalar_type() == (width <= 256 ? at::kByte : at::kShort),
              "pyg_tc: CBSR indices must be uint8 for widths <= 256 and int16 above");
  TORCH_CHECK(width >= 1 && width <= kMaxWidth, "pyg_tc: CBSR CUDA kernels support widths 1..",
              kMaxWidth, ", got ", width);
}

#define PYG_TC_INDEX_DISPATCH(WIDTH, ...)     \
  if ((WIDTH) <= 256) {                       \
    using IT = uint8_t;                       \
    __VA_ARGS__();                            \
  } else {                                    \
    using IT = int16_t;                       \
    __VA_ARGS__();                            \
  }

std::tuple<at::Tensor, at::Tensor> maxk_select_cuda(const at::Tensor& x, int64_t k) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "pyg_tc: maxk input must be a 2-D CUDA tensor");
  const int64_t N = x.size(0), F = x.size(1);
  TORCH_CHECK(F >= 2 && F <= 1024, "pyg_tc: the maxk kernel supports widths 2..1024, got ", F);
  TORCH_CHECK(k >= 1 && k < F, "pyg_tc: maxk kernel needs 1 <= k < width, got k=", k);
  c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous();
  auto vals = at::empty({N, k}, xc.options());
  auto idx = at::empty({N, k}, xc.options().dtype(F <= 256 ? at::kByte : at::kShort));
  if (N == 0) return {vals, idx};
  auto stream = c10::cuda::getCurrentCUDAStream();
  PYG_TC_DISPATCH(xc.scalar_type(), "pyg_tc_maxk", [&] {
    using T = typename Native<scalar_t>::type;
    const T* xp = reinterpret_cast<const T*>(xc.data_ptr<scalar_t>());
    T* vp = reinterpret_cast<T*>(vals.data_ptr<scalar_t>());
    if (F <= 256)
      launch_select<T, uint8_t>(xp, N, (int)F, (int)k, vp, idx.data_ptr<uint8_t>(), stream);
    else
      launch_select<T, int16_t>(xp, N, (int)F, (int)k, vp, idx.data_ptr<int16_t>(), stream);
  });
  return {vals, idx};
}

at::Tensor cbsr_spmm_cuda(const at::Tensor& rowptr, const at::Tensor& col,
                          const std::optional<at::Tensor>& value, const at::Tensor& values,
                          const at::Tensor& indices, int64_t width, const at::Tensor& units,
                          const at::Tensor& heavy_rows, const at::Tensor& heavy_ptr,
                          int64_t num_slots, const std::optional<at::Tensor>& diag,
                          c10::string_view reduce) {
  TORCH_CHECK(values.is_cuda() && values.dim() == 2, "pyg_tc: CBSR values must be 2-D CUDA");
  const int64_t Ns = values.size(0), k = values.size(1), F = width;
  check_cbsr(indices, Ns, k, F);
  check_index(heavy_rows, "heavy_rows");
  check_index(heavy_ptr, "heavy_ptr");
  c10::cuda::CUDAGuard guard(values.device());
  at::Tensor vkeep, dkeep;
  const GraphArgs a = graph_args(rowptr, col, value, units, diag, reduce, Ns, vkeep, dkeep);
  const auto vc = values.contiguous();
  const auto ic = indices.contiguous();
  const int64_t N = rowptr.size(0) - 1;
  auto out = at::empty({N, F}, vc.options());
  if (N == 0) return out;
  at::Tensor ws;
  float* wsp = nullptr;
  if (num_slots > 0) {
    ws = at::empty({num_slots, F}, vc.options().dtype(at::kFloat));
    wsp = ws.data_ptr<float>();
  }
  auto stream = c10::cuda::getCurrentCUDAStream();
  const unsigned blocks = (unsigned)((a.U + kWarps - 1) / kWarps);
  PYG_TC_DISPATCH(vc.scalar_type(), "pyg_tc_cbsr_spmm", [&] {
    using T = typename Native<scalar_t>::type;
    const T* vp = reinterpret_cast<const T*>(vc.data_ptr<scalar_t>());
    T* op = reinterpret_cast<T*>(out.data_ptr<scalar_t>());
    PYG_TC_INDEX_DISPATCH(F, [&] {
      const IT* ip = reinterpret_cast<const IT*>(ic.data_ptr());
      auto launch = [&](auto kernel, int nb) {
        const size_t smem = (size_t)kWarps * nb * F * sizeof(float);
        set_smem(kernel, smem);
        if (a.U > 0)
          kernel<<<blocks, kWarps * 32, smem, stream>>>(a.units, a.U, a.rowptr, a.col, a.w, vp, ip,
                                                       (int)k, (int)F, op, wsp, a.diag, a.ds, a.mean);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      };
      // Two entries per lane (one 2-element load of values and of indices)
      // when k is even; private buffers (no atomics) while they fit in
      // kPrivSmem per block.
      const char* env = std::getenv("PYG_TC_CBSR_PAIR");  // "0" disables (for sweeps)
      const bool pair = !(env != nullptr && env[0] == '0') && k % 2 == 0 && k >= 4 &&
                        reinterpret_cast<uintptr_t>(vp) % (2 * sizeof(T)) == 0 &&
                        reinterpret_cast<uintptr_t>(ip) % (2 * sizeof(IT)) == 0;
      const auto priv = [&](int kg) { return (size_t)kWarps * (32 / kg) * F * 4 <= kPrivSmem; };
      // KG lanes per edge (k / VT rounded up to a power of two); one private
      // buffer per edge slot where allowed and small enough, else one shared one.
      const auto run = [&]<int VT>() {
        const int64_t lanes = (k + VT - 1) / VT;
        const auto go = [&]<int KG>() {
          if constexpr (KG >= 2 && KG < 32) {
            if ((KG >= 4 || VT == 2) && priv(KG)) {
              launch(cbsr_spmm_kernel<T, IT, KG, 32 / KG, VT>, 32 / KG);
              return;
            }
          }
          launch(cbsr_spmm_kernel<T, IT, KG, 1, VT>, 1);
        };
        if (lanes <= 1) go.template operator()<1>();
        else if (lanes <= 2) go.template operator()<2>();
        else if (lanes <= 4) go.template operator()<4>();
        else if (lanes <= 8) go.template operator()<8>();
        else if (lanes <= 16) go.template operator()<16>();
        else go.template operator()<32>();
      };
      if (pair) run.template operator()<2>();
      else run.template operator()<1>();
      const int64_t H = heavy_rows.numel();
      if (H > 0) {
        dim3 grid((unsigned)H, (unsigned)((F + 31) / 32));
        heavy_reduce_kernel<T, false><<<grid, kReduceWarps * 32, 0, stream>>>(
            heavy_rows.data_ptr<int>(), heavy_ptr.data_ptr<int>(), wsp, a.rowptr, nullptr, op,
            nullptr, 0, (int)F, a.mean);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
    });
  });
  return out;
}

at::Tensor cbsr_sspmm_cuda(const at::Tensor& rowptr, const at::Tensor& col,
                           const std::optional<at::Tensor>& value, const at::Tensor& grad,
                           const at::Tensor& indices, const at::Tensor& units,
                           const at::Tensor& heavy_rows, const at::Tensor& heavy_ptr,
                           int64_t num_slots, const std::optional<at::Tensor>& diag,
                           c10::string_view reduce) {
  TORCH_CHECK(grad.is_cuda() && grad.dim() == 2, "pyg_tc: grad must be 2-D CUDA");
  const int64_t N = rowptr.size(0) - 1, F = grad.size(1);
  TORCH_CHECK(grad.size(0) == N, "pyg_tc: grad must have one row per target node");
  TORCH_CHECK(indices.dim() == 2, "pyg_tc: CBSR indices must be [N, k]");
  const int64_t Ns = indices.size(0), k = indices.size(1);
  check_cbsr(indices, Ns, k, F);
  c10::cuda::CUDAGuard guard(grad.device());
  at::Tensor vkeep, dkeep;
  const GraphArgs a = graph_args(rowptr, col, value, units, diag, reduce, Ns, vkeep, dkeep);
  const auto gc = grad.contiguous();
  const auto ic = indices.contiguous();
  auto out = at::zeros({Ns, k}, gc.options().dtype(at::kFloat));
  if (a.U == 0 || Ns == 0) return out.to(gc.scalar_type());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const size_t smem = (size_t)kWarps * F * sizeof(float);
  const unsigned blocks = (unsigned)((a.U + kWarps - 1) / kWarps);
  PYG_TC_DISPATCH(gc.scalar_type(), "pyg_tc_cbsr_sspmm", [&] {
    using T = typename Native<scalar_t>::type;
    const T* gp = reinterpret_cast<const T*>(gc.data_ptr<scalar_t>());
    PYG_TC_INDEX_DISPATCH(F, [&] {
      const IT* ip = reinterpret_cast<const IT*>(ic.data_ptr());
      auto launch = [&](auto kernel) {
        set_smem(kernel, smem);
        kernel<<<blocks, kWarps * 32, smem, stream>>>(a.units, a.U, a.rowptr, a.col, a.w, gp, ip,
                                                     (int)k, (int)F, out.data_ptr<float>(), a.diag,
                                                     a.ds, a.mean);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      };
      if (k <= 1) launch(cbsr_sspmm_kernel<T, IT, 1>);
      else if (k <= 2) launch(cbsr_sspmm_kernel<T, IT, 2>);
      else if (k <= 4) launch(cbsr_sspmm_kernel<T, IT, 4>);
      else if (k <= 8) launch(cbsr_sspmm_kernel<T, IT, 8>);
      else if (k <= 16) launch(cbsr_sspmm_kernel<T, IT, 16>);
      else launch(cbsr_sspmm_kernel<T, IT, 32>);
    });
  });
  return gc.scalar_type() == at::kFloat ? out : out.to(gc.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("maxk_select", &maxk_select_cuda);
  m.impl("cbsr_spmm", &cbsr_spmm_cuda);
  m.impl("cbsr_sspmm", &cbsr_sspmm_cuda);
}

}  // namespace pyg_tc
