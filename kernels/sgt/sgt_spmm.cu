// TC-GNN tensor-core kernels: SpMM and SDDMM over SGT blocks (16 rows x 8
// condensed columns, pyg_tc/formats/sgt.py), with mma.sync on sm_80+.
//
// Work: SpMM: one warp per unit (window, block range, slot) and feature
// slice, four units per CTA, or the CTA's warps sharing one unit on small
// graphs; SDDMM: one CTA per unit (or per part of one on graphs with few
// units), its warps taking the unit's 16x16 tiles
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
//   workspace slots, reduced in slot order by a second kernel (on sm_90 a
//   programmatic dependent launch, so its launch overlaps the SpMM's last
//   CTAs); warps of a CTA are combined in warp order through shared memory.
//   No atomics.
//
// Kernel arguments: one SgtSpmmParams by value (sgt_spmm_kernel and
// sgt_reduce alike; the launcher passes p). Its pointers are unpacked into
// __restrict__ locals at the top, and the loads of data that no thread writes
// during the kernel go through ldg / __ldg (ld.global.nc): the compiler
// chooses that path by itself only for `const __restrict__` kernel arguments.
// The cp.async copies are unaffected. One exception, see store_tile.
//
// This file: the SpMM (sgt_spmm_kernel, its pipeline pieces, the split-window
// reduce sgt_reduce) and its launcher (fp32, fp16, bf16); the entry point and
// the launch rules are in sgt_host.cpp.

#include <string>
#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/launch.h"
#include "common/static_switch.h"
#include "sgt/sgt_mma.cuh"
#include "sgt/sgt_params.h"

namespace pyg_tc {
namespace {

// ------------------------------------------------------------------ SpMM
// Shared-memory staging (TC-GNN Figure 5a) as a per-warp cp.async pipeline.
// A stage holds KS consecutive blocks of the warp's unit: the 8 gathered
// feature rows of each block (one feature slice of FS elements, 16-byte
// chunks XOR-swizzled so the fragment reads are free of bank conflicts), the
// cell values of the KS blocks as one contiguous copy (one 16-byte chunk per
// lane, up to kStageCells values; stages with more cells read them from
// global memory, a warp-uniform branch), and per mask word of each block the
// word and the offset of its first cell (so a lane decodes its cells from one
// 8-byte read). kStages stages are in flight; a stage's metadata (8 columns
// per block, the mask words, cell offsets) is one register each per lane,
// loaded two stages ahead. Results leave through vector stores (J contiguous
// features per thread), partial tiles of split windows in fragment order
// (coalesced float4s).
constexpr int kStages = 3;        // pipeline depth
constexpr int kStageCells = 128;  // staged cell values per stage

template <typename T, int FS>
struct SpmmStage {
  static constexpr int ROW = FS * (int)sizeof(T);  // bytes of a staged row slice
  static constexpr int KS = ROW <= 64 ? 4 : 2;     // blocks per stage (<= 2 KB of rows)
  static constexpr int QC = ROW / 16;              // 16-byte chunks per row
  static constexpr int NCH = KS * 8 * QC / 32;     // row chunks per lane
  static constexpr int OFF_C = KS * 8 * ROW;       // cell values
  static constexpr int OFF_M = OFF_C + 4 * kStageCells;  // int2 (mask word, first cell) x 4 KS
  static constexpr int BYTES = OFF_M + 8 * 4 * KS;
  static_assert(QC >= 2 && QC % 2 == 0 && NCH * 32 == KS * 8 * QC, "stage layout");
};

// Swizzled position of 16-byte chunk P of the staged rows: bits 1-2 XOR
// bits 3-4, so the 4 rows t (or 2t) that the lanes of one fragment read
// at the same offset land in different banks.
__device__ __forceinline__ int swz(int P) { return P ^ (((P >> 3) & 3) << 1); }

// Element offset of element e of staged row `row`.
template <typename T, int FS>
__device__ __forceinline__ int xoff(int row, int e) {
  constexpr int E16 = 16 / (int)sizeof(T);
  return swz(row * SpmmStage<T, FS>::QC + e / E16) * E16 + e % E16;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
// 16 bytes global -> shared (a shared-window address), of which the first
// `bytes` are read (the rest zero-filled; src is not read when bytes == 0).
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
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
// rows g and g + 8 at features f0 + (2t) * J + j and f0 + (2t + 1) * J + j:
// acc.d[j][2h + q] is row g + 8h, feature f0 + (2t + q) * J + j, so for each
// (h, q) the thread holds J contiguous features (one vector store).
template <int J>
struct SpmmAcc {
  float d[J][4];
};

// Workspace of split windows, in fragment order: slot k, feature slice y,
// n-tile j holds one float4 per lane (acc.d[j][0..3]), so the partial tiles
// are written and read with coalesced 16-byte accesses.
__device__ __forceinline__ int64_t ws_index(int slot, int slice, int nslices, int J, int j, int lane) {
  return (((int64_t)slot * nslices + slice) * J + j) * 32 + lane;
}

// The tile's results: partial tiles of split windows to the workspace, else
// the rows (+ diag * x, accumulated with an fma). The vector x load of the
// diag term (VEC) stays a plain load, as the compiler emitted it (ld.global,
// not .nc) when x was a `const __restrict__` kernel argument.
template <typename T, int J, bool VEC>
__device__ __forceinline__ void store_tile(const SpmmAcc<J>& acc, int win, int slot, int f0, int R, int F,
                                           T* __restrict__ out, float* __restrict__ ws,
                                           const float* __restrict__ diag, int64_t diag_stride,
                                           const T* __restrict__ x, int g, int t) {
  if (slot >= 0) {
    float4* w = reinterpret_cast<float4*>(ws);
#pragma unroll
    for (int j = 0; j < J; ++j)
      w[ws_index(slot, blockIdx.y, gridDim.y, J, j, 4 * g + t)] =
          make_float4(acc.d[j][0], acc.d[j][1], acc.d[j][2], acc.d[j][3]);
    return;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = (int64_t)win * 16 + g + 8 * h;
    if (row >= R) continue;
    const float dg = diag != nullptr ? ldg(diag + row * diag_stride) : 0.f;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int f = f0 + (2 * t + q) * J;
      if (f >= F) continue;
      if (VEC) {  // F is a multiple of the 16-byte vector and f of J: all J in range
        Pack<T, J> p;
        Pack<T, J> xv;
        if (diag != nullptr) xv = *reinterpret_cast<const Pack<T, J>*>(x + row * F + f);
#pragma unroll
        for (int j = 0; j < J; ++j) {
          float v = acc.d[j][2 * h + q];
          if (diag != nullptr) v += dg * to_f(xv.v[j]);
          p.v[j] = from_f<T>(v);
        }
        *reinterpret_cast<Pack<T, J>*>(out + row * F + f) = p;
      } else {
#pragma unroll
        for (int j = 0; j < J; ++j) {
          if (f + j >= F) break;
          float v = acc.d[j][2 * h + q];
          if (diag != nullptr) v += dg * to_f(ldg(x + row * F + f + j));
          out[row * F + f + j] = from_f<T>(v);
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

// ---------------------------------------------------------------- SpMM pipeline
// The pieces of sgt_spmm_kernel, all forceinline (one kernel after inlining):
// the lane constants, the unit's steps, a stage's metadata, the stage copy
// (cp.async), the MMA step over a staged step, and the epilogue.

// Per-lane constants of the warp's pipeline, computed once. Staging: row
// chunk c = lane + 32 i (row c / QC, column chunk lane % QC) goes to swizzled
// chunk swz(c) = (lane ^ sw) + 32 i. Shared-window addresses and byte
// offsets are kept in registers: under a 64-register cap the compiler
// rebuilt them for every copy, about 30 instructions per 16-byte chunk in the
// instruction profile.
template <typename T, int FS>
struct SpmmLane {
  int lane, g, t;
  int f0;          // first feature of the CTA's slice
  unsigned sdst;   // shared-window address of the lane's row chunk in stage slot 0
  unsigned scel;   // shared-window address of the lane's cell chunk in stage slot 0
  int csz;         // bytes of the lane's row chunk inside the width (16 or 0)
  const char* xl;  // x + the lane's first feature
  unsigned rowb;   // bytes of a row of x
  // Fragment reads: rows 2t and 2t + 1 at element g * J, of a stage's even
  // (ob) and odd (oc) block; two blocks further is 16 * FS elements on (the
  // swizzle, bits 3-4 of the chunk index, repeats every 32 chunks: 16 QC with
  // QC even). With QC >= 4 the odd block is 8 * FS elements on, an offset
  // the compiler folds into the loads (registers are at the 64 limit).
  int ob0, ob1, oc0, oc1;
  unsigned lm;  // (1 << g) - 1: the lane's bits below its row in a mask word
};

template <typename T, int FS>
__device__ __forceinline__ SpmmLane<T, FS> spmm_lane(int lane, int g, int t, int f0, unsigned char* my,
                                                     const T* x, int F) {
  using S = SpmmStage<T, FS>;
  constexpr int QC = S::QC, J = FS / 8;
  constexpr int E16 = 16 / (int)sizeof(T);  // elements per 16-byte chunk
  SpmmLane<T, FS> c;
  c.lane = lane;
  c.g = g;
  c.t = t;
  c.f0 = f0;
  const int sw = ((lane >> 3) & 3) << 1;
  const int fl = f0 + (lane % QC) * E16;
  c.sdst = smem_addr(my) + 16u * (unsigned)(lane ^ sw);  // row chunk, slot 0
  c.scel = smem_addr(my) + (unsigned)S::OFF_C + 16u * (unsigned)lane;
  c.csz = fl < F ? 16 : 0;
  c.xl = reinterpret_cast<const char*>(x + fl);
  c.rowb = (unsigned)F * (unsigned)sizeof(T);
  c.ob0 = xoff<T, FS>(2 * c.t, c.g * J);
  c.ob1 = xoff<T, FS>(2 * c.t + 1, c.g * J);
  c.oc0 = QC >= 4 ? c.ob0 + 8 * FS : xoff<T, FS>(8 + 2 * c.t, c.g * J);
  c.oc1 = QC >= 4 ? c.ob1 + 8 * FS : xoff<T, FS>(9 + 2 * c.t, c.g * J);
  c.lm = (1u << c.g) - 1u;
  return c;
}

// The warp's unit in steps of KS blocks: the warp takes steps wi, wi + W, ...
// (ns of them); W warps share the unit (coop) or W = 1.
template <int KS>
struct SpmmSteps {
  int4 un;
  int W, wi, ns;
  __device__ __forceinline__ SpmmSteps(int4 u, int w, int i) : un(u), W(w), wi(i) {
    const int nst = (un.z - un.y + KS - 1) / KS;
    ns = nst > wi ? (nst - wi + W - 1) / W : 0;
  }
  // first block of the warp's step k
  __device__ __forceinline__ int first(int k) const { return un.y + (wi + k * W) * KS; }
};

// Metadata of one stage, per lane: col = column l (block l / 8, slot l % 8)
// for l < 8 KS; mask = mask word l % 4 of block l / 4 for l < 4 KS; cell =
// first cell of block l for l <= KS (the unit's end for l = KS or past it).
struct StageMeta {
  int col = -1, mask = 0, cell = 0;
};

// Stage loads, 1: the metadata of step k into m (unchanged past the last step).
template <int KS>
__device__ __forceinline__ void load_stage_meta(StageMeta& m, const SpmmSteps<KS>& s, int k, int lane,
                                                const int* cols, const int* maskw, const int* cell_ptr) {
  if (k >= s.ns) return;
  const int b0 = s.first(k), e = b0 * 8 + lane;
  m.col = (lane < 8 * KS && e < s.un.z * 8) ? __ldg(cols + e) : -1;
  m.mask = (lane < 4 * KS && b0 + (lane >> 2) < s.un.z) ? __ldg(maskw + (int64_t)b0 * 4 + lane) : 0;
  m.cell = lane <= KS ? __ldg(cell_ptr + min(b0 + lane, s.un.z)) : 0;
}

// Stage loads, 2: the stage described by m into slot q of the warp's stages
// (my): the (mask word, first cell) pairs, the cell values (cp.async when the
// stage's cells fit in kStageCells: bit q of fast_bits) and the gathered
// feature rows (cp.async of 16-byte chunks, or elementwise without VEC).
template <typename T, int FS, bool VEC>
__device__ __forceinline__ void issue_stage(unsigned char* my, int q, const StageMeta& m,
                                            const SpmmLane<T, FS>& c, const float* vals, int C,
                                            const T* x, int F, unsigned& fast_bits) {
  using S = SpmmStage<T, FS>;
  constexpr int KS = S::KS, QC = S::QC;
  const int lane = c.lane;
  unsigned char* st = my + q * S::BYTES;
  const int c0 = __shfl_sync(kFullMask, m.cell, 0), c1 = __shfl_sync(kFullMask, m.cell, KS);
  const int cb = c0 & ~3;  // 16-byte aligned start of the stage's cells
  const bool fast = c1 - cb <= kStageCells;
  fast_bits = (fast_bits & ~(1u << q)) | ((unsigned)fast << q);
  // (mask word, first cell of the word): popcounts scanned over the
  // block's 4 words (lanes 4b .. 4b + 3)
  const int cnt = __popc((unsigned)m.mask);
  int inc = cnt;
  int up = __shfl_up_sync(kFullMask, inc, 1);
  if ((lane & 3) >= 1) inc += up;
  up = __shfl_up_sync(kFullMask, inc, 2);
  if ((lane & 3) >= 2) inc += up;
  const int wfirst = __shfl_sync(kFullMask, m.cell, lane >> 2) + inc - cnt - (fast ? cb : 0);
  if (lane < 4 * KS) reinterpret_cast<int2*>(st + S::OFF_M)[lane] = make_int2(m.mask, wfirst);
  if (fast) {
    const int i = cb + 4 * lane;
    if (i < c1) cp_async16(c.scel + q * S::BYTES, vals + i, 4 * min(4, C - i));
  }
  if (VEC) {
#pragma unroll
    for (int i = 0; i < S::NCH; ++i) {
      const int col = __shfl_sync(kFullMask, m.col, lane / QC + i * (32 / QC));
      const char* src = c.xl + (uint64_t)(unsigned)max(col, 0) * c.rowb;
      cp_async16(c.sdst + q * S::BYTES + 512 * i, src, col >= 0 ? c.csz : 0);
    }
  } else {
    T* sx = reinterpret_cast<T*>(st);
    for (int e = lane; e < KS * 8 * FS; e += 32) {
      const int row = e / FS, f = e % FS;
      const int col = __shfl_sync(kFullMask, m.col, row);
      sx[xoff<T, FS>(row, f)] =
          (col >= 0 && c.f0 + f < F) ? ldg(x + (int64_t)col * F + c.f0 + f) : from_f<T>(0.f);
    }
  }
}

// MMA step: multiply one staged step of nb blocks into acc; V(i) is cell
// value i (staged or global). fp32: one m16n8k8 (3 with SPLIT) per block and
// n-tile; fp16 / bf16: m16n8k16 on block pairs, values split into hi + lo.
template <typename T, int FS, bool SPLIT, typename VF>
__device__ __forceinline__ void mma_stage(SpmmAcc<FS / 8>& acc, const unsigned char* st, int nb, VF V,
                                          const SpmmLane<T, FS>& c) {
  using S = SpmmStage<T, FS>;
  constexpr bool K16 = !std::is_same<T, float>::value;
  constexpr int KS = S::KS, J = FS / 8;
  const int g = c.g;
  const T* sx = reinterpret_cast<const T*>(st);
  const int2* sm = reinterpret_cast<const int2*>(st + S::OFF_M) + c.t;
  using P = Pack<T, J>;
  if constexpr (!K16) {
#pragma unroll
    for (int s = 0; s < KS; ++s) {
      if (s >= nb) break;
      const int2 m = sm[4 * s];
      float v[4];
      lane_cells((unsigned)m.x, m.y, g, c.lm, V, v);
      uint32_t ab[4], as[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) tf32_split<SPLIT>(v[k], ab[k], as[k]);
      const int base = (s >> 1) * 16 * FS;
      const P x0 = *reinterpret_cast<const P*>(sx + base + ((s & 1) ? c.oc0 : c.ob0));
      const P x1 = *reinterpret_cast<const P*>(sx + base + ((s & 1) ? c.oc1 : c.ob1));
#pragma unroll
      for (int j = 0; j < J; ++j) {
        uint32_t bb0, bs0, bb1, bs1;
        tf32_split_trunc<SPLIT>(x0.v[j], bb0, bs0);
        tf32_split_trunc<SPLIT>(x1.v[j], bb1, bs1);
        if (SPLIT) {
          mma_tf32(acc.d[j], as[0], as[1], as[2], as[3], bb0, bb1);
          mma_tf32(acc.d[j], ab[0], ab[1], ab[2], ab[3], bs0, bs1);
        }
        mma_tf32(acc.d[j], ab[0], ab[1], ab[2], ab[3], bb0, bb1);
      }
    }
  } else {
#pragma unroll
    for (int p = 0; p < KS / 2; ++p) {
      if (2 * p >= nb) break;
      uint32_t ahi[4], alo[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // block 2p + h: condensed columns 8h .. 8h + 7
        // (a missing second block has zero mask words: all cells empty)
        const int2 m = sm[4 * (2 * p + h)];
        float v[4];
        lane_cells((unsigned)m.x, m.y, g, c.lm, V, v);
        split2<T>(v[0], v[2], ahi[2 * h], alo[2 * h]);          // row g
        split2<T>(v[1], v[3], ahi[2 * h + 1], alo[2 * h + 1]);  // row g + 8
      }
      const int base = p * 16 * FS;
      const P x0 = *reinterpret_cast<const P*>(sx + base + c.ob0);
      const P x1 = *reinterpret_cast<const P*>(sx + base + c.ob1);
      const P x2 = *reinterpret_cast<const P*>(sx + base + c.oc0);
      const P x3 = *reinterpret_cast<const P*>(sx + base + c.oc1);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const uint32_t b0r = pack2(x0.v[j], x1.v[j]), b1r = pack2(x2.v[j], x3.v[j]);
        mma_k16<T>(acc.d[j], alo, b0r, b1r);
        mma_k16<T>(acc.d[j], ahi, b0r, b1r);
      }
    }
  }
}

// The MMA step on stage slot q, with the cell values from shared memory when
// the stage staged them (fast), else from global memory.
template <typename T, int FS, bool SPLIT>
__device__ __forceinline__ void compute_stage(SpmmAcc<FS / 8>& acc, const unsigned char* my, int q, int nb,
                                              bool fast, const float* vals, const SpmmLane<T, FS>& c) {
  using S = SpmmStage<T, FS>;
  const unsigned char* st = my + q * S::BYTES;
  const float* sc = reinterpret_cast<const float*>(st + S::OFF_C);
  if (fast)
    mma_stage<T, FS, SPLIT>(acc, st, nb, [&](int i) { return sc[i]; }, c);
  else
    mma_stage<T, FS, SPLIT>(acc, st, nb, [&](int i) { return __ldg(vals + i); }, c);
}

__device__ __forceinline__ int next_slot(int q) { return q == kStages - 1 ? 0 : q + 1; }

// ---------------------------------------------------------------- SpMM kernel
// One kernel for all dtypes. fp32: TF32 / 3xTF32 m16n8k8, one 16 x 8 block
// per MMA. fp16 / bf16: m16n8k16 on block pairs (K = 16 condensed columns),
// edge values split into hi + lo halves. The MMA's n index is mapped to
// features (n * J + j for n-tile j), so each thread reads J contiguous
// features of a staged row; its k index to columns as in lane_cells, so a
// thread's B rows are 2t and 2t + 1 of a block. coop = 0: every warp of the
// CTA owns a unit; coop = 1: the CTA's warps share unit blockIdx.x (graphs
// with few units).
// Argument: the SgtSpmmParams, every setting in it (coop, counts, R, F).
// Registers: up to 80 (launch bounds 256 x 3). The 64-register cap of
// (256, 4) made the compiler rebuild addresses and lane constants for every
// copy and fragment read (13% more instructions in the F = 32 fp32 profile);
// the kernels use 64-74 registers, and 4-warp CTAs stay at the 7 per SM that
// shared memory allows (6 for 32-element half slices).
template <typename T, int FS, bool VEC, bool SPLIT>
__global__ void __launch_bounds__(256, 3)
sgt_spmm_kernel(const SgtSpmmParams p) {
  const int4* __restrict__ units = p.b.units;
  const int U = p.b.num_units;
  const bool coop = p.coop;
  const int* __restrict__ cols = p.b.cols;
  const int* __restrict__ maskw = p.b.mask;
  const int* __restrict__ cell_ptr = p.b.cell_ptr;
  const float* __restrict__ vals = p.cell_val;
  const int C = p.num_cells;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ out = static_cast<T*>(p.out);
  float* __restrict__ ws = p.ws;
  const float* __restrict__ diag = p.diag;
  const int64_t diag_stride = p.diag_stride;
  const int R = p.R, F = p.F;
  using S = SpmmStage<T, FS>;
  constexpr bool K16 = !std::is_same<T, float>::value;
  constexpr int KS = S::KS, J = FS / 8;
  static_assert(FS % 8 == 0 && (!K16 || KS % 2 == 0), "feature slice");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int W = coop ? nw : 1, wi = coop ? warp : 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // let the split-window reduce launch once every CTA of this grid runs (it
  // waits for this grid's completion itself): hides its launch latency
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
  const int uid = coop ? (int)blockIdx.x : (int)blockIdx.x * nw + warp;
  if (uid >= U) return;  // coop grids have exactly U CTAs: never taken there
  const int4 un = ldg(units + uid);
  const int f0 = blockIdx.y * FS;
  unsigned char* const my = smem_raw + (size_t)warp * kStages * S::BYTES;

  SpmmAcc<J> acc;
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int k = 0; k < 4; ++k) acc.d[j][k] = 0.f;
  const SpmmLane<T, FS> c = spmm_lane<T, FS>(lane, g, t, f0, my, x, F);
  const SpmmSteps<KS> steps(un, W, wi);

  // Pipeline: stages k + 1 .. k + kStages - 1 are in flight while stage k is
  // multiplied (slot qc); __syncwarp orders the lanes' copies and stores
  // before the reads and the reads before the slot is refilled (slot qi). The
  // metadata is loaded two stages ahead: `cur` is the next stage to issue,
  // `ahead` the one after, so the first two stages' loads are in flight
  // together.
  StageMeta cur, ahead;
  unsigned fast_bits = 0;  // bit q: stage slot q holds its cell values
  int qi = 0, qc = 0;
  load_stage_meta(ahead, steps, 0, lane, cols, maskw, cell_ptr);
  cur = ahead;
  load_stage_meta(ahead, steps, 1, lane, cols, maskw, cell_ptr);
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < steps.ns) issue_stage<T, FS, VEC>(my, qi, cur, c, vals, C, x, F, fast_bits);
    cp_commit();
    qi = next_slot(qi);
    cur = ahead;
    load_stage_meta(ahead, steps, k + 2, lane, cols, maskw, cell_ptr);
  }
  for (int k = 0; k < steps.ns; ++k) {
    const int kn = k + kStages - 1;
    if (kn < steps.ns) issue_stage<T, FS, VEC>(my, qi, cur, c, vals, C, x, F, fast_bits);
    cp_commit();
    qi = next_slot(qi);
    cur = ahead;
    load_stage_meta(ahead, steps, kn + 2, lane, cols, maskw, cell_ptr);
    cp_wait<kStages - 1>();
    __syncwarp();
    compute_stage<T, FS, SPLIT>(acc, my, qc, min(KS, un.z - steps.first(k)), (fast_bits >> qc) & 1u,
                                vals, c);
    __syncwarp();
    qc = next_slot(qc);
  }
  cp_wait<0>();

  // Epilogue: the CTA's warps combined (coop), then the tile stored
  if (!reduce_warps<J * 4>(&acc.d[0][0], reinterpret_cast<float*>(smem_raw), warp, lane, W)) return;
  store_tile<T, J, VEC>(acc, un.x, un.w, f0, R, F, out, ws, diag, diag_stride, x, g, t);
}


// Split windows (measured faster than completing them inside the SpMM by the
// last unit through an atomic counter: that added a counter reset per call and
// serial slot reads at the end of the units): the window's slots summed in
// slot order in the workspace's fragment order (thread (j, lane) of slice
// blockIdx.y reads one float4 per slot), then stored to the window's rows
// (+ diag). Argument: the SpMM's SgtSpmmParams (heavy, heavy_ptr, ws, diag, x,
// out, R, F); the workspace is written by the SpMM grid, which completes
// before this kernel reads it, so its loads are read-only here (ldg). The
// slot range and the window are loaded once, before the loop.
template <typename T, int J>
__global__ void __launch_bounds__(128)
sgt_reduce(const SgtSpmmParams p) {
  const int* __restrict__ heavy = p.heavy;
  const int* __restrict__ heavy_ptr = p.heavy_ptr;
  const float* __restrict__ ws = p.ws;
  T* __restrict__ out = static_cast<T*>(p.out);
  const float* __restrict__ diag = p.diag;
  const int64_t diag_stride = p.diag_stride;
  const T* __restrict__ x = static_cast<const T*>(p.x);
  const int R = p.R, F = p.F;
  const int j = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // launched as a programmatic dependent of the SpMM (sm_90): wait for the
  // SpMM grid to complete and its writes to be visible (returns at once
  // when launched normally)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const float4* w = reinterpret_cast<const float4*>(ws);
  const int k0 = ldg(heavy_ptr + blockIdx.x), k1 = ldg(heavy_ptr + blockIdx.x + 1);
  const int64_t win = ldg(heavy + blockIdx.x);
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int k = k0; k < k1; ++k) {
    const float4 v = ldg(w + ws_index(k, blockIdx.y, gridDim.y, J, j, lane));
    s.x += v.x;
    s.y += v.y;
    s.z += v.z;
    s.w += v.w;
  }
  const float e[4] = {s.x, s.y, s.z, s.w};
  const int f0 = blockIdx.y * 8 * J;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // i = 2h + q
    const int64_t row = win * 16 + g + 8 * (i >> 1);
    const int f = f0 + (2 * t + (i & 1)) * J + j;
    if (row >= R || f >= F) continue;
    float v = e[i];
    if (diag != nullptr) v += ldg(diag + row * diag_stride) * to_f(ldg(x + row * F + f));
    out[row * F + f] = from_f<T>(v);
  }
}

template <typename T, int FS, bool VEC, bool SPLIT>
void launch_sgt_spmm(const SgtSpmmParams& p, cudaStream_t stream) {
  const auto kern = sgt_spmm_kernel<T, FS, VEC, SPLIT>;
  const int U = p.b.num_units;
  const size_t bytes = (size_t)p.warps * kStages * SpmmStage<T, FS>::BYTES;
  set_max_dynamic_smem(kern, bytes);
  const dim3 grid(p.coop ? U : (U + p.warps - 1) / p.warps, p.slices);
  kern<<<grid, 32 * p.warps, bytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (p.num_heavy > 0) {
    // sm_90: programmatic dependent launch (the reduce's launch overlaps
    // the SpMM's last CTAs; it waits for the SpMM with griddepcontrol.wait)
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(p.num_heavy, p.slices);
    cfg.blockDim = dim3(32 * (FS / 8));
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = p.sm90 ? 1 : 0;
    C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, sgt_reduce<T, FS / 8>, p));
  }
}

}  // namespace

template <typename T>
void run_sgt_spmm(const SgtSpmmParams& p, cudaStream_t stream) {
  if (p.b.num_units == 0) return;
  PYG_TC_INT_SWITCH(p.slice, FS, (8, 16, 32), [&] {
    PYG_TC_BOOL_SWITCH(p.vec, VEC, [&] {
      PYG_TC_BOOL_SWITCH(p.split, SPLIT, [&] {
        if constexpr (!sgt_spmm_compiled(std::is_same<T, float>::value, FS, VEC, SPLIT)) {
          TORCH_CHECK(false, "pyg_tc: sgt_spmm has no kernel for slice ", std::to_string(FS), ", vec ",
                      std::to_string(VEC), ", split ", std::to_string(SPLIT));
        } else {
          launch_sgt_spmm<T, FS, VEC, SPLIT>(p, stream);
        }
      });
    });
  });
}

template void run_sgt_spmm<float>(const SgtSpmmParams&, cudaStream_t);
template void run_sgt_spmm<__half>(const SgtSpmmParams&, cudaStream_t);
template void run_sgt_spmm<__nv_bfloat16>(const SgtSpmmParams&, cudaStream_t);

}  // namespace pyg_tc
