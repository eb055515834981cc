// TC-GNN tensor-core kernels: SpMM and SDDMM over SGT blocks (16 rows x 8
// condensed columns, pyg_tc/formats/sgt.py), with mma.sync on sm_80+.
//
// Work: SpMM: one warp per unit (window, block range, slot) and feature
// slice, four units per CTA, or the CTA's warps sharing one unit on small
// graphs; SDDMM: one CTA per unit, its warps taking the unit's 16x16 tiles
// (block pairs, Algorithm 3) in turn.
//
// Differences from the published TC-GNN code, by design:
// * No rescans: a block's A tile comes from its 128-bit mask and the cells of
//   that block only (rank of a set bit = offset of its value); no per-block
//   edge scan.
// * SpMM stages blocks in shared memory (the paper's Figure 5a) through a
//   cp.async pipeline, several blocks per stage and several stages in flight
//   (see sgt_spmm_kernel). SDDMM loads its fragments from global memory with
//   16-byte vector loads: the MMA's k index is mapped to features so that each
//   thread's elements are contiguous.
// * Any width (guarded tail, scalar path for odd widths), any row count
//   (stores past the last row are skipped), padding columns read as zero.
// * Precision: fp32 inputs use TF32 MMAs, or 3xTF32 (big/small split,
//   fp32-accurate) when precision = 1; fp16/bf16 use k16 MMAs with the edge
//   values split into hi + lo halves (two MMAs), so weights keep ~fp32
//   precision. Accumulation is fp32.
// * Deterministic: windows longer than one unit write fp32 partial tiles to
//   workspace slots, reduced in slot order; warps of a CTA are combined in
//   warp order through shared memory. No atomics.

#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#include <type_traits>

#include "common.cuh"

namespace pyg_tc {
namespace {

// ---------------------------------------------------------------- MMA helpers
__device__ __forceinline__ uint32_t tf32(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return r;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

template <typename T>
__device__ __forceinline__ void mma_k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same<T, __half>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

// fp32 product accumulated as TF32 (SPLIT = false) or 3xTF32: a*b ~ ab*bb + ab*bs + as*bb.
template <bool SPLIT>
__device__ __forceinline__ void mma_f32(float (&d)[4], const float (&a)[4], float b0, float b1) {
  const uint32_t A0 = tf32(a[0]), A1 = tf32(a[1]), A2 = tf32(a[2]), A3 = tf32(a[3]);
  const uint32_t B0 = tf32(b0), B1 = tf32(b1);
  if (SPLIT) {
    mma_tf32(d, tf32(a[0] - __uint_as_float(A0)), tf32(a[1] - __uint_as_float(A1)),
             tf32(a[2] - __uint_as_float(A2)), tf32(a[3] - __uint_as_float(A3)), B0, B1);
    mma_tf32(d, A0, A1, A2, A3, tf32(b0 - __uint_as_float(B0)), tf32(b1 - __uint_as_float(B1)));
  }
  mma_tf32(d, A0, A1, A2, A3, B0, B1);
}

__device__ __forceinline__ uint32_t bits16(__half h) { return __half_as_ushort(h); }
__device__ __forceinline__ uint32_t bits16(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }
template <typename T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) { return bits16(lo) | (bits16(hi) << 16); }

// ------------------------------------------------------------ memory helpers
// V consecutive elements of a row from feature f (zeros past F or for a
// padding column: row == nullptr). VEC: one V-wide aligned load.
template <typename T, int V, bool VEC>
__device__ __forceinline__ void load_row(T (&v)[V], const T* __restrict__ row, int f, int F) {
  if (VEC) {
    if (row != nullptr && f < F) {
      const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(row + f);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = p.v[i];
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = from_f<T>(0.f);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = (row != nullptr && f + i < F) ? row[f + i] : from_f<T>(0.f);
  }
}

// Mask word i of a block (runtime i without local memory).
__device__ __forceinline__ unsigned word(const int4& m, int i) {
  return (unsigned)(i == 0 ? m.x : i == 1 ? m.y : i == 2 ? m.z : m.w);
}

__device__ __forceinline__ void prefix(const int4& m, int base, int (&pre)[4]) {
  pre[0] = base;
  pre[1] = base + __popc((unsigned)m.x);
  pre[2] = pre[1] + __popc((unsigned)m.y);
  pre[3] = pre[2] + __popc((unsigned)m.z);
}

// Output index of cell (r, c) of a block or -1.
__device__ __forceinline__ int cell_index(const int4& m, const int (&pre)[4], int c, int r) {
  const unsigned w = word(m, c >> 1);
  const int bit = (c & 1) * 16 + r;
  if (!((w >> bit) & 1u)) return -1;
  return pre[c >> 1] + __popc(w & ((1u << bit) - 1u));
}

// ------------------------------------------------------------------ SpMM
// Shared-memory staging (TC-GNN Figure 5a) as a per-warp cp.async pipeline:
// a stage holds kS consecutive blocks of the warp's unit: their masks, up to
// kCells cell values each, and the 8 gathered feature rows of each block
// (one feature slice of FS elements). kStages stages are in flight, so a warp
// keeps (kStages - 1) * kS blocks of loads outstanding without holding them
// in registers; the metadata of the next stage (8 columns per block, cell
// offsets) is one register per lane, loaded a stage ahead.
constexpr int kS = 4;        // blocks per stage (32 columns: one per lane)
constexpr int kStages = 3;   // pipeline depth
constexpr int kCells = 32;   // cell values staged per block (the rest read from global)

template <typename T, int FS>
__host__ __device__ constexpr int stage_bytes() {
  return 16 * kS + kS * 8 * FS * (int)sizeof(T) + 4 * kS * kCells + 16;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
// 16 bytes global -> shared; zero-filled when !ok (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(ok ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
#endif
}
__device__ __forceinline__ void cp_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Thread (g = lane / 4, t = lane % 4) owns, per n-tile j, the accumulators of
// rows g and g + 8 at features f0 + (2t) * J + j and f0 + (2t + 1) * J + j.
template <int J>
struct SpmmAcc {
  float d[J][4];
};

template <typename T, int J>
__device__ __forceinline__ void store_tile(const SpmmAcc<J>& acc, int win, int slot, int f0, int R, int F,
                                           T* __restrict__ out, float* __restrict__ ws,
                                           const float* __restrict__ diag, int64_t diag_stride,
                                           const T* __restrict__ x, int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const int64_t row = (int64_t)win * 16 + r;
    if (slot < 0 && row >= R) continue;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int f = f0 + (2 * t + q) * J + j;
        if (f >= F) continue;
        float v = acc.d[j][2 * h + q];
        if (slot >= 0) {
          ws[((int64_t)slot * 16 + r) * F + f] = v;
        } else {
          if (diag != nullptr) v += diag[row * diag_stride] * to_f(x[row * F + f]);
          out[row * F + f] = from_f<T>(v);
        }
      }
    }
  }
}

// Combine the warps' accumulators in warp order (shared memory, after every
// warp is done with its stages), so warp 0 holds the CTA's sum.
template <int NREG>
__device__ __forceinline__ bool reduce_warps(float* regs, float* smem, int warp, int lane, int W) {
  if (W == 1) return true;
  __syncthreads();
  if (warp > 0) {
#pragma unroll
    for (int k = 0; k < NREG; ++k) smem[((warp - 1) * NREG + k) * 32 + lane] = regs[k];
  }
  __syncthreads();
  if (warp > 0) return false;
  for (int w = 1; w < W; ++w) {
#pragma unroll
    for (int k = 0; k < NREG; ++k) regs[k] += smem[((w - 1) * NREG + k) * 32 + lane];
  }
  return true;
}

// One kernel for all dtypes. fp32: TF32 / 3xTF32 m16n8k8, one 16 x 8 block
// per MMA. fp16 / bf16: m16n8k16 on block pairs (K = 16 condensed columns),
// edge values split into hi + lo halves. The MMA's n index is mapped to
// features (n * J + j for n-tile j), so each thread reads J contiguous
// features of a staged row. coop = 0: every warp of the CTA owns a unit;
// coop = 1: the CTA's warps share unit blockIdx.x (graphs with few units).
template <typename T, int FS, bool VEC, bool SPLIT>
__global__ void __launch_bounds__(256)
sgt_spmm_kernel(const int4* __restrict__ units, int U, int coop, const int* __restrict__ cols,
                const int4* __restrict__ mask, const int* __restrict__ cell_ptr, const float* __restrict__ vals,
                const T* __restrict__ x, T* __restrict__ out, float* __restrict__ ws,
                const float* __restrict__ diag, int64_t diag_stride, int R, int F) {
  constexpr bool K16 = !std::is_same<T, float>::value;
  constexpr int J = FS / 8;
  constexpr int E16 = 16 / (int)sizeof(T);  // elements per 16-byte chunk
  constexpr int QC = FS / E16;              // chunks per staged row
  constexpr int XB = kS * 8 * FS * (int)sizeof(T);
  constexpr int SB = stage_bytes<T, FS>();
  static_assert(QC >= 1 && FS % 8 == 0, "feature slice");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int W = coop ? nw : 1, wi = coop ? warp : 0;
  const int uid = coop ? (int)blockIdx.x : (int)blockIdx.x * nw + warp;
  if (uid >= U) return;  // coop grids have exactly U CTAs: never taken there
  const int4 un = units[uid];
  const int f0 = blockIdx.y * FS;
  unsigned char* const my = smem_raw + (size_t)warp * kStages * SB;

  SpmmAcc<J> acc;
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int k = 0; k < 4; ++k) acc.d[j][k] = 0.f;

  // Steps of kS blocks; the warp takes steps wi, wi + W, ...
  const int nst = (un.z - un.y + kS - 1) / kS;
  const int ns = nst > wi ? (nst - wi + W - 1) / W : 0;
  auto first = [&](int k) { return un.y + (wi + k * W) * kS; };
  // Lane l: column l of the step (block l / 8, slot l % 8), and for l <= kS
  // the cell offset of block l (clamped to the unit's end).
  int colr = -1, cpr = 0;
  auto load_meta = [&](int b0) {
    const int e = b0 * 8 + lane;
    colr = e < un.z * 8 ? __ldg(cols + e) : -1;
    cpr = lane <= kS ? __ldg(cell_ptr + min(b0 + lane, un.z)) : 0;
  };
  auto issue = [&](int k) {
    unsigned char* st = my + (k % kStages) * SB;
    const int b0 = first(k);
    int4* smk = reinterpret_cast<int4*>(st);
    T* sx = reinterpret_cast<T*>(st + 16 * kS);
    float* sc = reinterpret_cast<float*>(st + 16 * kS + XB);
    int* scp = reinterpret_cast<int*>(sc + kS * kCells);
    if (lane < kS) {
      const bool ok = b0 + lane < un.z;
      cp_async16(smk + lane, ok ? mask + b0 + lane : mask, ok);
      scp[lane] = cpr;
    }
    if (VEC) {
#pragma unroll
      for (int c = lane; c < kS * 8 * QC; c += 32) {
        const int row = c / QC, f = f0 + (c % QC) * E16;
        const int col = __shfl_sync(kFullMask, colr, row);
        const bool ok = col >= 0 && f < F;
        cp_async16(sx + row * FS + (c % QC) * E16, ok ? x + (int64_t)col * F + f : x, ok);
      }
    } else {
      for (int e = lane; e < kS * 8 * FS; e += 32) {
        const int row = e / FS, f = f0 + e % FS;
        const int col = __shfl_sync(kFullMask, colr, row);
        sx[e] = (col >= 0 && f < F) ? x[(int64_t)col * F + f] : from_f<T>(0.f);
      }
    }
#pragma unroll
    for (int s = 0; s < kS; ++s) {
      const int c0 = __shfl_sync(kFullMask, cpr, s), c1 = __shfl_sync(kFullMask, cpr, s + 1);
      if (lane < c1 - c0) cp_async4(sc + s * kCells + lane, vals + c0 + lane);
    }
  };
  auto compute = [&](int k) {
    const unsigned char* st = my + (k % kStages) * SB;
    const int b0 = first(k);
    const int4* smk = reinterpret_cast<const int4*>(st);
    const T* sx = reinterpret_cast<const T*>(st + 16 * kS);
    const float* sc = reinterpret_cast<const float*>(st + 16 * kS + XB);
    const int* scp = reinterpret_cast<const int*>(sc + kS * kCells);
    // Value of cell (column c, row r) of staged block s.
    auto cellv = [&](const int4& m, const int (&pre)[4], int s, int c, int r) -> float {
      const int i = cell_index(m, pre, c, r);
      if (i < 0) return 0.f;
      return i < kCells ? sc[s * kCells + i] : __ldg(vals + scp[s] + i);
    };
    using P = Pack<T, J>;
    if constexpr (!K16) {
#pragma unroll
      for (int s = 0; s < kS; ++s) {
        if (b0 + s >= un.z) break;
        const int4 m = smk[s];
        int pre[4];
        prefix(m, 0, pre);
        const float a[4] = {cellv(m, pre, s, t, g), cellv(m, pre, s, t, g + 8), cellv(m, pre, s, t + 4, g),
                            cellv(m, pre, s, t + 4, g + 8)};
        const P x0 = *reinterpret_cast<const P*>(sx + (s * 8 + t) * FS + g * J);
        const P x1 = *reinterpret_cast<const P*>(sx + (s * 8 + t + 4) * FS + g * J);
#pragma unroll
        for (int j = 0; j < J; ++j) mma_f32<SPLIT>(acc.d[j], a, x0.v[j], x1.v[j]);
      }
    } else {
#pragma unroll
      for (int p = 0; p < kS / 2; ++p) {
        if (b0 + 2 * p >= un.z) break;
        uint32_t ahi[4], alo[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // block 2p + h: condensed columns 8h .. 8h + 7
          const int s = 2 * p + h;
          const int4 m = smk[s];
          int pre[4];
          prefix(m, 0, pre);
#pragma unroll
          for (int rh = 0; rh < 2; ++rh) {  // rows g, g + 8
            const float v0 = cellv(m, pre, s, 2 * t, g + 8 * rh), v1 = cellv(m, pre, s, 2 * t + 1, g + 8 * rh);
            const T h0 = from_f<T>(v0), h1 = from_f<T>(v1);
            ahi[2 * h + rh] = pack2(h0, h1);
            alo[2 * h + rh] = pack2(from_f<T>(v0 - to_f(h0)), from_f<T>(v1 - to_f(h1)));
          }
        }
        const T* rp = sx + (2 * p * 8 + 2 * t) * FS + g * J;
        const P x0 = *reinterpret_cast<const P*>(rp);
        const P x1 = *reinterpret_cast<const P*>(rp + FS);
        const P x2 = *reinterpret_cast<const P*>(rp + 8 * FS);
        const P x3 = *reinterpret_cast<const P*>(rp + 9 * FS);
#pragma unroll
        for (int j = 0; j < J; ++j) {
          const uint32_t b0r = pack2(x0.v[j], x1.v[j]), b1r = pack2(x2.v[j], x3.v[j]);
          mma_k16<T>(acc.d[j], alo, b0r, b1r);
          mma_k16<T>(acc.d[j], ahi, b0r, b1r);
        }
      }
    }
  };

  // Pipeline: stages k + 1 .. k + kStages - 1 are in flight while stage k
  // is multiplied; __syncwarp orders the lanes' copies before the reads and
  // the reads before the stage is refilled.
  if (ns > 0) load_meta(first(0));
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < ns) issue(k);
    cp_commit();
    if (k + 1 < ns) load_meta(first(k + 1));
  }
  for (int k = 0; k < ns; ++k) {
    const int kn = k + kStages - 1;
    if (kn < ns) issue(kn);
    cp_commit();
    if (kn + 1 < ns) load_meta(first(kn + 1));
    cp_wait<kStages - 1>();
    __syncwarp();
    compute(k);
    __syncwarp();
  }
  cp_wait<0>();
  if (!reduce_warps<J * 4>(&acc.d[0][0], reinterpret_cast<float*>(smem_raw), warp, lane, W)) return;
  store_tile<T, J>(acc, un.x, un.w, f0, R, F, out, ws, diag, diag_stride, x, g, t);
}

// Split windows: out[w*16 + r, f] = sum of the window's slots in slot order (+ diag).
template <typename T>
__global__ void sgt_reduce(const int* __restrict__ heavy, const int* __restrict__ heavy_ptr,
                           const float* __restrict__ ws, T* __restrict__ out, const float* __restrict__ diag,
                           int64_t diag_stride, const T* __restrict__ x, int R, int F) {
  const int h = blockIdx.x, r = threadIdx.y, f = blockIdx.y * 32 + threadIdx.x;
  const int64_t row = (int64_t)heavy[h] * 16 + r;
  if (row >= R || f >= F) return;
  float s = 0.f;
  for (int k = heavy_ptr[h]; k < heavy_ptr[h + 1]; ++k) s += ws[((int64_t)k * 16 + r) * F + f];
  if (diag != nullptr) s += diag[row * diag_stride] * to_f(x[row * F + f]);
  out[row * F + f] = from_f<T>(s);
}

// ------------------------------------------------------------------ SDDMM
// One 16 x 16 output tile (blocks b, b + 1) per warp step; K runs over the
// features. fp32: k index kk of step j is feature fc + kk * J + j, so the
// thread's A (rows g, g + 8) and B (column node g) elements at kk = t and
// t + 4 are J contiguous features each.
template <int J, bool VEC, bool SPLIT>
__global__ void __launch_bounds__(256)
sgt_sddmm_f32(const int4* __restrict__ units, const int* __restrict__ cols, const int4* __restrict__ mask,
              const int* __restrict__ cell_ptr, const float* __restrict__ A, const float* __restrict__ Bm,
              float* __restrict__ out, int R, int F) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int4 un = units[blockIdx.x];
  const int64_t ra = (int64_t)un.x * 16 + g, rb = ra + 8;
  const float* pa0 = ra < R ? A + ra * F : nullptr;
  const float* pa1 = rb < R ? A + rb * F : nullptr;
  for (int b = un.y + 2 * warp; b < un.z; b += 2 * W) {
    const bool two = b + 1 < un.z;
    const int n0 = cols[b * 8 + g], n1 = two ? cols[(b + 1) * 8 + g] : -1;
    const float* pb0 = n0 >= 0 ? Bm + (int64_t)n0 * F : nullptr;
    const float* pb1 = n1 >= 0 ? Bm + (int64_t)n1 * F : nullptr;
    float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
    for (int fc = 0; fc < F; fc += 8 * J) {
      float a0[J], a1[J], a2[J], a3[J], b0[J], b1[J], c0[J], c1[J];
      load_row<float, J, VEC>(a0, pa0, fc + t * J, F);
      load_row<float, J, VEC>(a1, pa1, fc + t * J, F);
      load_row<float, J, VEC>(a2, pa0, fc + (t + 4) * J, F);
      load_row<float, J, VEC>(a3, pa1, fc + (t + 4) * J, F);
      load_row<float, J, VEC>(b0, pb0, fc + t * J, F);
      load_row<float, J, VEC>(b1, pb0, fc + (t + 4) * J, F);
      load_row<float, J, VEC>(c0, pb1, fc + t * J, F);
      load_row<float, J, VEC>(c1, pb1, fc + (t + 4) * J, F);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const float af[4] = {a0[j], a1[j], a2[j], a3[j]};
        mma_f32<SPLIT>(d0, af, b0[j], b1[j]);
        mma_f32<SPLIT>(d1, af, c0[j], c1[j]);
      }
    }
    // d[k]: row g + 8 * (k >> 1), column 2t + (k & 1) of the block
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (s == 1 && !two) break;
      const int bb = b + s;
      const int4 m = mask[bb];
      int pre[4];
      prefix(m, cell_ptr[bb], pre);
      const float* d = s ? d1 : d0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int idx = cell_index(m, pre, 2 * t + (k & 1), g + 8 * (k >> 1));
        if (idx >= 0) out[idx] = d[k];
      }
    }
  }
}

// fp16 / bf16 inputs, k16 MMA: pair p = kk / 2 of step j is features
// fc + p * 2J + 2j + (kk & 1); the thread's pairs p = t and t + 4 are 2J
// contiguous features, and each 32-bit word of them is one fragment register.
template <typename T, int J, bool VEC>
__global__ void __launch_bounds__(256)
sgt_sddmm_f16(const int4* __restrict__ units, const int* __restrict__ cols, const int4* __restrict__ mask,
              const int* __restrict__ cell_ptr, const T* __restrict__ A, const T* __restrict__ Bm,
              T* __restrict__ out, int R, int F) {
  constexpr int V = 2 * J;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int4 un = units[blockIdx.x];
  const int64_t ra = (int64_t)un.x * 16 + g, rb = ra + 8;
  const T* pa0 = ra < R ? A + ra * F : nullptr;
  const T* pa1 = rb < R ? A + rb * F : nullptr;
  for (int b = un.y + 2 * warp; b < un.z; b += 2 * W) {
    const bool two = b + 1 < un.z;
    const int n0 = cols[b * 8 + g], n1 = two ? cols[(b + 1) * 8 + g] : -1;
    const T* pb0 = n0 >= 0 ? Bm + (int64_t)n0 * F : nullptr;
    const T* pb1 = n1 >= 0 ? Bm + (int64_t)n1 * F : nullptr;
    float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
    for (int fc = 0; fc < F; fc += 16 * J) {
      T a0[V], a1[V], a2[V], a3[V], b0[V], b1[V], c0[V], c1[V];
      load_row<T, V, VEC>(a0, pa0, fc + t * V, F);
      load_row<T, V, VEC>(a1, pa1, fc + t * V, F);
      load_row<T, V, VEC>(a2, pa0, fc + (t + 4) * V, F);
      load_row<T, V, VEC>(a3, pa1, fc + (t + 4) * V, F);
      load_row<T, V, VEC>(b0, pb0, fc + t * V, F);
      load_row<T, V, VEC>(b1, pb0, fc + (t + 4) * V, F);
      load_row<T, V, VEC>(c0, pb1, fc + t * V, F);
      load_row<T, V, VEC>(c1, pb1, fc + (t + 4) * V, F);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const uint32_t af[4] = {pack2(a0[2 * j], a0[2 * j + 1]), pack2(a1[2 * j], a1[2 * j + 1]),
                                pack2(a2[2 * j], a2[2 * j + 1]), pack2(a3[2 * j], a3[2 * j + 1])};
        mma_k16<T>(d0, af, pack2(b0[2 * j], b0[2 * j + 1]), pack2(b1[2 * j], b1[2 * j + 1]));
        mma_k16<T>(d1, af, pack2(c0[2 * j], c0[2 * j + 1]), pack2(c1[2 * j], c1[2 * j + 1]));
      }
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (s == 1 && !two) break;
      const int bb = b + s;
      const int4 m = mask[bb];
      int pre[4];
      prefix(m, cell_ptr[bb], pre);
      const float* d = s ? d1 : d0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int idx = cell_index(m, pre, 2 * t + (k & 1), g + 8 * (k >> 1));
        if (idx >= 0) out[idx] = from_f<T>(d[k]);
      }
    }
  }
}

// ------------------------------------------------------------------ host
void check_sgt(const at::Tensor& units, const at::Tensor& cols, const at::Tensor& mask,
               const at::Tensor& cell_ptr) {
  check_index(units, "units");
  check_index(cols, "cols");
  check_index(mask, "mask");
  check_index(cell_ptr, "cell_ptr");
  TORCH_CHECK(units.dim() == 2 && units.size(1) == 4, "pyg_tc: units must be [U, 4]");
  TORCH_CHECK(mask.numel() == cols.numel() / 2 && cell_ptr.numel() == cols.numel() / 8 + 1,
              "pyg_tc: SGT cols / mask / cell_ptr sizes disagree");
}

int warps_of(int64_t warps) { return warps == 1 || warps == 2 || warps == 4 || warps == 8 ? (int)warps : 4; }

template <typename T>
bool vec_ok(const at::Tensor& t, int V) {
  return t.size(1) % V == 0 && aligned16(t.data_ptr()) && (reinterpret_cast<uintptr_t>(t.data_ptr()) % (V * sizeof(T)) == 0);
}

at::Tensor sgt_spmm_cuda(const at::Tensor& units, const at::Tensor& cols, const at::Tensor& mask,
                         const at::Tensor& cell_ptr, const at::Tensor& heavy, const at::Tensor& heavy_ptr,
                         int64_t num_slots, const at::Tensor& cell_val, const at::Tensor& x_in,
                         const std::optional<at::Tensor>& diag, int64_t num_rows, int64_t precision,
                         int64_t warps, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                         const at::Tensor&) {
  check_sgt(units, cols, mask, cell_ptr);
  check_index(heavy, "heavy");
  check_index(heavy_ptr, "heavy_ptr");
  TORCH_CHECK(x_in.is_cuda() && x_in.dim() == 2, "pyg_tc: x must be a 2-D CUDA tensor");
  TORCH_CHECK(cell_val.is_cuda() && cell_val.scalar_type() == at::kFloat && cell_val.dim() == 1,
              "pyg_tc: cell values must be a 1-D float32 CUDA tensor");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const at::Tensor vals = cell_val.contiguous();
  const int R = (int)num_rows, F = (int)x.size(1);
  at::Tensor out = at::empty({R, F}, x.options());
  if (R == 0 || F == 0) return out;
  const float* dp = nullptr;
  int64_t ds = 0;
  at::Tensor dg;
  if (diag.has_value()) {
    dg = diag->contiguous();
    TORCH_CHECK(dg.scalar_type() == at::kFloat && (dg.numel() == 1 || dg.numel() == R),
                "pyg_tc: diag must be float32 with 1 or num_rows entries");
    TORCH_CHECK(x.size(0) == R, "pyg_tc: diag needs a square adjacency");
    dp = dg.data_ptr<float>();
    ds = dg.numel() == 1 ? 0 : 1;
  }
  at::Tensor ws = at::empty({num_slots * 16, F}, x.options().dtype(at::kFloat));
  // warps > 1: that many warps share each unit (coop); 1: four warps per
  // CTA, each with its own unit.
  const int W = warps_of(warps);
  const bool coop = W > 1;
  const int nw = coop ? W : 4;
  const int U = (int)units.size(0);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto* un = reinterpret_cast<const int4*>(units.data_ptr<int>());
  const auto* mk = reinterpret_cast<const int4*>(mask.data_ptr<int>());
  const int* cl = cols.data_ptr<int>();
  const int* cp = cell_ptr.data_ptr<int>();
  const float* vp = vals.data_ptr<float>();
  float* wp = ws.data_ptr<float>();
  auto launch = [&](auto tag, auto kern, int FS, int SB) {
    using T = decltype(tag);
    if (U == 0) return;
    const size_t bytes = (size_t)nw * kStages * SB;
    if (bytes > 48 * 1024)
      C10_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    const dim3 grid(coop ? U : (U + nw - 1) / nw, (F + FS - 1) / FS);
    kern<<<grid, 32 * nw, bytes, stream>>>(un, U, coop ? 1 : 0, cl, mk, cp, vp,
                                           reinterpret_cast<const T*>(x.data_ptr()),
                                           reinterpret_cast<T*>(out.data_ptr()), wp, dp, ds, R, F);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (heavy.numel() > 0) {
      sgt_reduce<T><<<dim3(heavy.numel(), (F + 31) / 32), dim3(32, 16), 0, stream>>>(
          heavy.data_ptr<int>(), heavy_ptr.data_ptr<int>(), wp, reinterpret_cast<T*>(out.data_ptr()), dp, ds,
          reinterpret_cast<const T*>(x.data_ptr()), R, F);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  };
  // Feature slices: the width rounded up to 8 / 16 / 32 fp32 or 16 / 32 half
  // elements, wider inputs in slices of 32 (measured: 16-element fp32 slices
  // re-read the metadata per slice and ran 1.5-2x slower at F = 32). The
  // vector path needs 16-byte aligned rows, else elementwise staging.
  if (x.scalar_type() == at::kFloat) {
    const bool vec = vec_ok<float>(x, 4) && vec_ok<float>(out, 4);
    auto go = [&](auto fs, auto vc) {
      constexpr int FS = decltype(fs)::value;
      constexpr bool V = decltype(vc)::value;
      if (precision != 0) launch(float(), sgt_spmm_kernel<float, FS, V, true>, FS, stage_bytes<float, FS>());
      else launch(float(), sgt_spmm_kernel<float, FS, V, false>, FS, stage_bytes<float, FS>());
    };
    if (!vec) go(std::integral_constant<int, 8>(), std::false_type());
    else if (F <= 8) go(std::integral_constant<int, 8>(), std::true_type());
    else if (F <= 16) go(std::integral_constant<int, 16>(), std::true_type());
    else go(std::integral_constant<int, 32>(), std::true_type());
    return out;
  }
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16,
              "pyg_tc: sgt_spmm supports float32, float16 and bfloat16");
  auto half_path = [&](auto tag) {
    using T = decltype(tag);
    if (!(vec_ok<T>(x, 8) && vec_ok<T>(out, 8))) launch(tag, sgt_spmm_kernel<T, 16, false, true>, 16, stage_bytes<T, 16>());
    else if (F <= 16) launch(tag, sgt_spmm_kernel<T, 16, true, true>, 16, stage_bytes<T, 16>());
    else launch(tag, sgt_spmm_kernel<T, 32, true, true>, 32, stage_bytes<T, 32>());
  };
  if (x.scalar_type() == at::kHalf) half_path(__half());
  else half_path(__nv_bfloat16());
  return out;
}

at::Tensor sgt_sddmm_cuda(const at::Tensor& units, const at::Tensor& cols, const at::Tensor& mask,
                          const at::Tensor& cell_ptr, const at::Tensor&, const at::Tensor&, int64_t,
                          const at::Tensor& a_in, const at::Tensor& b_in, int64_t num_cells,
                          int64_t precision, int64_t warps, const at::Tensor&, const at::Tensor&,
                          const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          int64_t, const at::Tensor&) {
  check_sgt(units, cols, mask, cell_ptr);
  TORCH_CHECK(a_in.is_cuda() && b_in.is_cuda() && a_in.dim() == 2 && b_in.dim() == 2 &&
                  a_in.size(1) == b_in.size(1) && a_in.scalar_type() == b_in.scalar_type(),
              "pyg_tc: sgt_sddmm needs 2-D CUDA a, b of one dtype and width");
  const c10::cuda::CUDAGuard guard(a_in.device());
  const at::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  const int R = (int)a.size(0), F = (int)a.size(1);
  at::Tensor out = at::empty({num_cells}, a.options());
  if (num_cells == 0) return out;
  if (F == 0) return out.zero_();
  const int W = warps_of(warps);
  const int U = (int)units.size(0);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto* un = reinterpret_cast<const int4*>(units.data_ptr<int>());
  const auto* mk = reinterpret_cast<const int4*>(mask.data_ptr<int>());
  const int* cl = cols.data_ptr<int>();
  const int* cp = cell_ptr.data_ptr<int>();
  if (a.scalar_type() == at::kFloat) {
    const float* ap = a.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const bool split = precision != 0;
    auto run = [&](auto kern) { kern<<<U, 32 * W, 0, stream>>>(un, cl, mk, cp, ap, bp, op, R, F); };
    const bool v4 = vec_ok<float>(a, 4) && vec_ok<float>(b, 4);
    const bool v2 = vec_ok<float>(a, 2) && vec_ok<float>(b, 2);
    if (F >= 32 && v4) split ? run(sgt_sddmm_f32<4, true, true>) : run(sgt_sddmm_f32<4, true, false>);
    else if (F >= 16 && v2) split ? run(sgt_sddmm_f32<2, true, true>) : run(sgt_sddmm_f32<2, true, false>);
    else split ? run(sgt_sddmm_f32<1, false, true>) : run(sgt_sddmm_f32<1, false, false>);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
  }
  TORCH_CHECK(a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16,
              "pyg_tc: sgt_sddmm supports float32, float16 and bfloat16");
  auto half_path = [&](auto tag) {
    using T = decltype(tag);
    const T* ap = reinterpret_cast<const T*>(a.data_ptr());
    const T* bp = reinterpret_cast<const T*>(b.data_ptr());
    T* op = reinterpret_cast<T*>(out.data_ptr());
    auto run = [&](auto kern) { kern<<<U, 32 * W, 0, stream>>>(un, cl, mk, cp, ap, bp, op, R, F); };
    if (F >= 64 && vec_ok<T>(a, 8) && vec_ok<T>(b, 8)) run(sgt_sddmm_f16<T, 4, true>);
    else if (F >= 32 && vec_ok<T>(a, 4) && vec_ok<T>(b, 4)) run(sgt_sddmm_f16<T, 2, true>);
    else run(sgt_sddmm_f16<T, 1, false>);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (a.scalar_type() == at::kHalf) half_path(__half());
  else half_path(__nv_bfloat16());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("sgt_spmm", &sgt_spmm_cuda);
  m.impl("sgt_sddmm", &sgt_sddmm_cuda);
}

}  // namespace pyg_tc
