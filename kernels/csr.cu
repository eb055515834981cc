// CSR kernel family: SpMM (sum / mean / max) and SDDMM driven by a unit schedule.
//
// The schedule (built in Python, pyg_tc/formats/schedule.py) is an int32 [U, 4]
// array of units (row, start, end, slot): a run of at most `chunk` edges of one
// CSR row. Rows of degree <= chunk are one unit (slot = -1, written straight to
// the output); heavier rows are split into several units, each writing an fp32
// partial row to a workspace slot, and a second kernel reduces a heavy row's
// slots in slot order. Units are sorted by length (longest first), so the
// groups of one warp see similar lengths.
//
// One unit is walked by a group of L lanes (G = 32 / L groups per warp): each
// lane owns NV vectors of V features (V * sizeof(T) = 16 bytes on the vector
// path, V = 1 on the scalar path used for odd widths or unaligned tensors). The
// group loads L column indices at once (one per lane, coalesced), broadcasts
// them with shuffles and keeps UNROLL independent feature loads in flight.
// Features wider than one slice (L * V * NV) are split over blockIdx.y, slice-
// major, so the gathered slice of x is shared in L2 by all blocks of a slice.
//
// No atomics anywhere: every output element is written by exactly one lane,
// and the summation order is fixed by the schedule, so results are bitwise
// reproducible run to run.

#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <cstdlib>
#include <cstring>

#include "common.cuh"
#include "heavy_reduce.cuh"

namespace pyg_tc {
namespace {

constexpr int kThreads = 256;

constexpr int kUnroll = 4;

// COOP (graphs with too few units to fill the GPU): the G groups of a warp
// share one unit, group g taking edges [g*L, g*L + L) of every 32-edge batch,
// and their partial sums are combined by shuffles (fixed order) before group 0
// writes. Otherwise each group owns a unit.
template <typename T, int V, int NV, int L, bool MAX, bool COOP>
__global__ void __launch_bounds__(kThreads)
spmm_units_kernel(const int4* __restrict__ units, int64_t num_units,
                  const int* __restrict__ col, const float* __restrict__ w,
                  const T* __restrict__ x, T* __restrict__ out,
                  float* __restrict__ ws, const float* __restrict__ diag,
                  int64_t diag_stride, int F, bool mean) {
  constexpr int G = 32 / L;
  constexpr int SLICE = L * V * NV;
  using P = Pack<T, V>;
  const int lane = threadIdx.x & 31;
  const int g = lane / L;
  const int l = lane % L;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t u = COOP ? warp : warp * G + g;
  const int fbase = blockIdx.y * SLICE + l * V;
  constexpr int STRIDE = COOP ? 32 : L;  // edges consumed per batch by the unit
  const int goff = COOP ? g * L : 0;     // this group's first edge in a batch

  int4 un = make_int4(0, 0, 0, -1);
  if (u < num_units) un = units[u];
  const int len = un.z - un.y;
  int maxlen = len;
  if (!COOP) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) maxlen = max(maxlen, __shfl_xor_sync(kFullMask, maxlen, o));
  }

  float acc[NV][V];
#pragma unroll
  for (int k = 0; k < NV; ++k)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[k][v] = MAX ? -INFINITY : 0.f;

  for (int base = 0; base < maxlen; base += STRIDE) {
    const int n = len - base - goff;  // edges of this group left in this batch (may be <= 0)
    int c = 0;
    float wv = 1.f;
    if (l < n) {
      c = __ldg(col + un.y + base + goff + l);
      if (w != nullptr) wv = __ldg(w + un.y + base + goff + l);
    }
    const int jn = min(L, maxlen - base);  // warp-uniform
    for (int j = 0; j < jn; j += kUnroll) {
      P buf[kUnroll][NV];
      float wj[kUnroll];
      bool ok[kUnroll];
#pragma unroll
      for (int t = 0; t < kUnroll; ++t) {
        const int jj = j + t;
        const int src = g * L + (jj & (L - 1));
        const int cj = __shfl_sync(kFullMask, c, src);
        wj[t] = w != nullptr ? __shfl_sync(kFullMask, wv, src) : 1.f;  // warp-uniform branch
        ok[t] = jj < n;
        const T* xr = x + (int64_t)cj * F;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
          const int f = fbase + k * L * V;
          if (ok[t] && f < F) {
            buf[t][k] = *reinterpret_cast<const P*>(xr + f);
          } else {
#pragma unroll
            for (int v = 0; v < V; ++v) buf[t][k].v[v] = from_f<T>(0.f);
          }
        }
      }
#pragma unroll
      for (int t = 0; t < kUnroll; ++t) {
#pragma unroll
        for (int k = 0; k < NV; ++k)
#pragma unroll
          for (int v = 0; v < V; ++v) {
            const float m = wj[t] * to_f(buf[t][k].v[v]);
            if (MAX) {
              if (ok[t]) acc[k][v] = fmaxf(acc[k][v], m);
            } else {
              acc[k][v] += m;
            }
          }
      }
    }
  }

  if (COOP) {  // combine the groups' partials (lane l of every group), fixed order
#pragma unroll
    for (int o = L; o < 32; o <<= 1)
#pragma unroll
      for (int k = 0; k < NV; ++k)
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float other = __shfl_xor_sync(kFullMask, acc[k][v], o);
          acc[k][v] = MAX ? fmaxf(acc[k][v], other) : acc[k][v] + other;
        }
    if (g != 0) return;
  }
  if (u >= num_units) return;
  if (un.w >= 0) {  // partial unit of a heavy row: fp32 partial to its slot
    float* dst = ws + (int64_t)un.w * F;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int f = fbase + k * L * V;
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (f + v < F) dst[f + v] = acc[k][v];
    }
    return;
  }
  const int64_t row = un.x;
  const float scale = (mean && len > 0) ? 1.f / (float)len : 1.f;
  const float dg = diag != nullptr ? diag[row * diag_stride] : 0.f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int f = fbase + k * L * V;
    if (f >= F) continue;
    P res;
    P xs;
    if (diag != nullptr) xs = *reinterpret_cast<const P*>(x + row * F + f);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      float r = acc[k][v];
      if (MAX) r = len > 0 ? r : 0.f;
      r *= scale;
      if (diag != nullptr) r += dg * to_f(xs.v[v]);
      res.v[v] = from_f<T>(r);
    }
    *reinterpret_cast<P*>(out + row * F + f) = res;
  }
}

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

// ---------------------------------------------------------------------------
// Host side

struct Config {
  int L, NV;
};

// Lanes per unit (L) and 16-byte vectors per lane (NV), fitted to sweeps on
// the H200 over 6 graphs x 4 widths x 2 dtypes x 4 chunk sizes (docs/benchmarks.md;
// within 5% of the best config per case, geometric mean):
// * rows of <= 8 vectors: one vector per lane, as few lanes as the row needs
//   (more units per warp);
// * wider rows, x small enough to stay in L2 (<= 32 MiB): 16 lanes with one or
//   two vectors, the whole row (up to 512 bytes) in one slice;
// * wider rows, larger x: 256-byte feature slices (fp32 8 lanes x 2 vectors,
//   fp16/bf16 16 lanes x 1) over blockIdx.y, so one slice of x is gathered by
//   all blocks before the next.
// The scalar path (odd widths that are not padded) uses one element per lane.
constexpr int64_t kSmallX = 32ll << 20;

bool supported(Config c) {
  return (c.L == 4 || c.L == 8 || c.L == 16 || c.L == 32) && (c.NV == 1 || c.NV == 2);
}

// PYG_TC_SPMM_CONFIG="L,NV" overrides the rule (for sweeps); checked here,
// before any dispatch.
Config choose_config(int64_t chunks, int elem_bytes, bool vec, int64_t x_bytes) {
  if (const char* env = std::getenv("PYG_TC_SPMM_CONFIG")) {
    Config c{0, 0};
    TORCH_CHECK(std::sscanf(env, "%d,%d", &c.L, &c.NV) == 2 && supported(c),
                "pyg_tc: unsupported SpMM config PYG_TC_SPMM_CONFIG='", env,
                "' (L in 4,8,16,32 and NV in 1,2)");
    return c;
  }
  if (!vec) return chunks <= 8 ? Config{8, 1} : chunks <= 16 ? Config{16, 1}
                 : chunks <= 32 ? Config{32, 1} : Config{32, 2};
  if (chunks <= 4 && elem_bytes < 4) return {4, 1};
  if (chunks <= 8) return {8, 1};
  if (x_bytes <= kSmallX) return chunks <= 16 ? Config{16, 1} : Config{16, 2};
  return elem_bytes == 4 ? Config{8, 2} : Config{16, 1};
}

// Cooperative mode when the graph has fewer units than about two resident
// units per lane group of the whole GPU (small graphs: each unit is then a
// serial chain of loads and the launch is one short, latency-bound wave).
// PYG_TC_SPMM_COOP=0/1 forces it, for sweeps.
bool use_coop(int64_t num_units, int device) {
  if (const char* env = std::getenv("PYG_TC_SPMM_COOP")) return env[0] == '1';
  const int sms = device_attr<cudaDevAttrMultiProcessorCount>(device);
  return num_units < (int64_t)sms * 256;  // 33.8K on the H200; see COOP_UNITS in csr.py
}

template <typename T, int V, bool MAX>
void launch_spmm_v(Config cfg, bool coop, const int4* units, int64_t U, const int* col,
                   const float* w, const T* x, T* out, float* ws, const float* diag, int64_t ds,
                   int F, bool mean, cudaStream_t stream) {
#define PYG_TC_SPMM_CASE(L_, NV_)                                                          \
  if (cfg.L == L_ && cfg.NV == NV_) {                                                      \
    const int per_warp = coop ? 1 : 32 / L_;                                               \
    const int64_t blocks = (U + (kThreads / 32) * per_warp - 1) / ((kThreads / 32) * per_warp); \
    const int slices = (F + L_ * V * NV_ - 1) / (L_ * V * NV_);                            \
    dim3 grid((unsigned)blocks, (unsigned)slices);                                         \
    if (coop)                                                                              \
      spmm_units_kernel<T, V, NV_, L_, MAX, true><<<grid, kThreads, 0, stream>>>(          \
          units, U, col, w, x, out, ws, diag, ds, F, mean);                                \
    else                                                                                   \
      spmm_units_kernel<T, V, NV_, L_, MAX, false><<<grid, kThreads, 0, stream>>>(         \
          units, U, col, w, x, out, ws, diag, ds, F, mean);                                \
    C10_CUDA_KERNEL_LAUNCH_CHECK();                                                        \
    return;                                                                                \
  }
  PYG_TC_SPMM_CASE(4, 1)
  PYG_TC_SPMM_CASE(8, 1)
  PYG_TC_SPMM_CASE(16, 1)
  PYG_TC_SPMM_CASE(32, 1)
  PYG_TC_SPMM_CASE(8, 2)
  PYG_TC_SPMM_CASE(16, 2)
  PYG_TC_SPMM_CASE(32, 2)
#undef PYG_TC_SPMM_CASE
  TORCH_CHECK(false, "pyg_tc: unsupported SpMM config L=", cfg.L, " NV=", cfg.NV);  // unreachable
}

template <typename T, int V, int L>
void launch_sddmm(const int4* units, int64_t U, const int* col, const T* a, const T* b, T* out,
                  int F, cudaStream_t stream) {
  constexpr int G = 32 / L;
  const int64_t blocks = (U + (kThreads / 32) * G - 1) / ((kThreads / 32) * G);
  sddmm_units_kernel<T, V, L><<<(unsigned)blocks, kThreads, 0, stream>>>(units, U, col, a, b, out, F);
}

at::Tensor spmm_csr_cuda(const at::Tensor& rowptr, const at::Tensor& col,
                         const std::optional<at::Tensor>& value, const at::Tensor& x,
                         const at::Tensor& units, const at::Tensor& heavy_rows,
                         const at::Tensor& heavy_ptr, const std::optional<at::Tensor>& diag,
                         int64_t num_slots, c10::string_view reduce,
                         // transpose: used by the Python-registered backward only
                         const at::Tensor& t_rowptr, const at::Tensor& t_col,
                         const at::Tensor& t_perm, const std::optional<at::Tensor>& t_value,
                         const at::Tensor& t_units, const at::Tensor& t_heavy_rows,
                         const at::Tensor& t_heavy_ptr, int64_t t_num_slots) {
  check_index(rowptr, "rowptr");
  check_index(col, "col");
  check_index(units, "units");
  check_index(heavy_rows, "heavy_rows");
  check_index(heavy_ptr, "heavy_ptr");
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "pyg_tc: x must be a 2-D CUDA tensor");
  TORCH_CHECK(units.dim() == 2 && units.size(1) == 4, "pyg_tc: units must be [U, 4]");
  const bool is_max = reduce == "max";
  const bool mean = reduce == "mean";
  TORCH_CHECK(is_max || mean || reduce == "sum", "pyg_tc: reduce must be sum, mean or max");
  c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous();
  const int64_t N = rowptr.size(0) - 1;
  const int64_t F = xc.size(1);
  TORCH_CHECK(F < (1ll << 31), "pyg_tc: feature width too large");
  const int64_t vecw = 16 / xc.element_size();
  if (F % vecw != 0 && F > 8) {
    // Odd widths: run the vector path on a copy padded to a multiple of the
    // 16-byte vector (one extra pass over x and out, against a scalar path
    // that issues 4-8x more load instructions per gathered row).
    const int64_t Fp = (F + vecw - 1) / vecw * vecw;
    auto xp = at::zeros({xc.size(0), Fp}, xc.options());
    xp.narrow(1, 0, F).copy_(xc);
    auto outp = spmm_csr_cuda(rowptr, col, value, xp, units, heavy_rows, heavy_ptr, diag,
                              num_slots, reduce, t_rowptr, t_col, t_perm, t_value, t_units,
                              t_heavy_rows, t_heavy_ptr, t_num_slots);
    return outp.narrow(1, 0, F).contiguous();
  }
  auto out = at::empty({N, F}, xc.options());
  if (N == 0 || F == 0) return out;

  const float* w = nullptr;
  at::Tensor vc;
  if (value.has_value()) {
    vc = value->contiguous();
    TORCH_CHECK(vc.scalar_type() == at::kFloat && vc.is_cuda() && vc.numel() == col.numel(),
                "pyg_tc: value must be a float32 CUDA tensor with one entry per edge");
    w = vc.data_ptr<float>();
  }
  const float* dptr = nullptr;
  int64_t ds = 0;
  at::Tensor dc;
  if (diag.has_value()) {
    TORCH_CHECK(!is_max, "pyg_tc: diag is not supported with reduce='max'");
    TORCH_CHECK(xc.size(0) == N, "pyg_tc: diag needs a square adjacency");
    dc = diag->contiguous();
    TORCH_CHECK(dc.scalar_type() == at::kFloat && dc.is_cuda() &&
                    (dc.numel() == N || dc.numel() == 1),
                "pyg_tc: diag must be float32 CUDA with N entries or one");
    dptr = dc.data_ptr<float>();
    ds = dc.numel() == 1 ? 0 : 1;
  }
  at::Tensor ws;
  float* wsp = nullptr;
  if (num_slots > 0) {
    ws = at::empty({num_slots, F}, xc.options().dtype(at::kFloat));
    wsp = ws.data_ptr<float>();
  }
  const int64_t U = units.size(0);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const int4* up = reinterpret_cast<const int4*>(units.data_ptr<int>());

  const int64_t elem = xc.element_size();
  const bool vec_ok = (F * elem) % 16 == 0;
  const Config cfg = choose_config(vec_ok ? F * elem / 16 : F, (int)elem, vec_ok, xc.numel() * elem);
  const bool coop = use_coop(units.size(0), x.device().index());
  PYG_TC_DISPATCH(xc.scalar_type(), "pyg_tc_spmm", [&] {
    using T = typename Native<scalar_t>::type;
    constexpr int VEC = vec16<T>();
    const T* xp = reinterpret_cast<const T*>(xc.data_ptr<scalar_t>());
    T* op = reinterpret_cast<T*>(out.data_ptr<scalar_t>());
    const bool vec = (F % VEC == 0) && aligned16(xp) && aligned16(op);
    if (U > 0) {
      if (vec) {
        if (is_max)
          launch_spmm_v<T, VEC, true>(cfg, coop, up, U, col.data_ptr<int>(), w, xp, op, wsp, dptr, ds, (int)F, mean, stream);
        else
          launch_spmm_v<T, VEC, false>(cfg, coop, up, U, col.data_ptr<int>(), w, xp, op, wsp, dptr, ds, (int)F, mean, stream);
      } else {
        if (is_max)
          launch_spmm_v<T, 1, true>(cfg, coop, up, U, col.data_ptr<int>(), w, xp, op, wsp, dptr, ds, (int)F, mean, stream);
        else
          launch_spmm_v<T, 1, false>(cfg, coop, up, U, col.data_ptr<int>(), w, xp, op, wsp, dptr, ds, (int)F, mean, stream);
      }
    }
    const int64_t H = heavy_rows.numel();
    if (H > 0) {
      dim3 grid((unsigned)H, (unsigned)((F + 31) / 32));
      const int threads = kReduceWarps * 32;
      if (is_max)
        heavy_reduce_kernel<T, true><<<grid, threads, 0, stream>>>(
            heavy_rows.data_ptr<int>(), heavy_ptr.data_ptr<int>(), wsp, rowptr.data_ptr<int>(), xp,
            op, dptr, ds, (int)F, mean);
      else
        heavy_reduce_kernel<T, false><<<grid, threads, 0, stream>>>(
            heavy_rows.data_ptr<int>(), heavy_ptr.data_ptr<int>(), wsp, rowptr.data_ptr<int>(), xp,
            op, dptr, ds, (int)F, mean);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
  return out;
}

at::Tensor sddmm_csr_cuda(const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                          const at::Tensor& units,
                          // both directions: used by the Python-registered backward only
                          const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                          const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t) {
  check_index(col, "col");
  check_index(units, "units");
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1),
              "pyg_tc: sddmm needs 2-D CUDA a, b of equal width");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "pyg_tc: sddmm a and b must share a dtype");
  c10::cuda::CUDAGuard guard(a.device());
  const auto ac = a.contiguous();
  const auto bc = b.contiguous();
  const int64_t E = col.numel();
  const int64_t F = ac.size(1);
  auto out = F == 0 ? at::zeros({E}, ac.options()) : at::empty({E}, ac.options());
  const int64_t U = units.size(0);
  if (E == 0 || F == 0 || U == 0) return out;
  auto stream = c10::cuda::getCurrentCUDAStream();
  const int4* up = reinterpret_cast<const int4*>(units.data_ptr<int>());
  PYG_TC_DISPATCH(ac.scalar_type(), "pyg_tc_sddmm", [&] {
    using T = typename Native<scalar_t>::type;
    constexpr int VEC = vec16<T>();
    const T* ap = reinterpret_cast<const T*>(ac.data_ptr<scalar_t>());
    const T* bp = reinterpret_cast<const T*>(bc.data_ptr<scalar_t>());
    T* op = reinterpret_cast<T*>(out.data_ptr<scalar_t>());
    const bool vec = (F % VEC == 0) && aligned16(ap) && aligned16(bp);
    const int64_t chunks = vec ? F / VEC : F;
    const int* cp = col.data_ptr<int>();
    if (vec) {
      if (chunks <= 8) launch_sddmm<T, VEC, 8>(up, U, cp, ap, bp, op, (int)F, stream);
      else if (chunks <= 16) launch_sddmm<T, VEC, 16>(up, U, cp, ap, bp, op, (int)F, stream);
      else launch_sddmm<T, VEC, 32>(up, U, cp, ap, bp, op, (int)F, stream);
    } else {
      if (chunks <= 8) launch_sddmm<T, 1, 8>(up, U, cp, ap, bp, op, (int)F, stream);
      else if (chunks <= 16) launch_sddmm<T, 1, 16>(up, U, cp, ap, bp, op, (int)F, stream);
      else launch_sddmm<T, 1, 32>(up, U, cp, ap, bp, op, (int)F, stream);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("spmm_csr", &spmm_csr_cuda);
  m.impl("sddmm_csr", &sddmm_csr_cuda);
}

}  // namespace pyg_tc
