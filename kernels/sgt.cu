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
// TF32 operand bits of v (the MMA reads the top 19 bits of an fp32 register).
// SPLIT (3xTF32): big = v rounded to nearest TF32, ties away (cvt.rna) by an
// integer add on the bits, and small = v - big, exact (|small| <= 2^-11 |v|),
// passed as fp32 bits: the MMA drops its low 13 bits, an error of at most
// 2^-21 |v| of either sign. Three instructions; cvt.rna.tf32 alone is four
// SASS instructions on sm_90 (measured in the SpMM's instruction profile).
// A NaN or Inf input can round to garbage in `big`, but `small` = v - big is
// then NaN and carries it into the product. Plain TF32 (SPLIT = false) passes
// the bits unchanged: the MMA truncates (round toward zero).
template <bool SPLIT>
__device__ __forceinline__ void tf32_split(float v, uint32_t& big, uint32_t& small) {
  if (SPLIT) {
    big = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
    small = __float_as_uint(v - __uint_as_float(big));
  } else {
    big = __float_as_uint(v);
    small = 0u;
  }
}

// The same split with big = v truncated to TF32, passed as v's own bits (the
// MMA truncates them): two instructions. small = v - trunc(v) has v's sign
// and |small| < 2^-10 |v|; the MMA's truncation of it errs by < 2^-20 |v|,
// toward zero (about 2^-22 |v| on average). Used for the feature operand of
// the SpMM, whose cell operand is split with rounding: its small part has
// either sign, so the dropped small x small term stays unbiased.
template <bool SPLIT>
__device__ __forceinline__ void tf32_split_trunc(float v, uint32_t& big, uint32_t& small) {
  big = __float_as_uint(v);
  small = SPLIT ? __float_as_uint(v - __uint_as_float(big & 0xffffe000u)) : 0u;
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
  uint32_t A[4], As[4], B0, B0s, B1, B1s;
#pragma unroll
  for (int k = 0; k < 4; ++k) tf32_split<SPLIT>(a[k], A[k], As[k]);
  tf32_split<SPLIT>(b0, B0, B0s);
  tf32_split<SPLIT>(b1, B1, B1s);
  if (SPLIT) {
    mma_tf32(d, As[0], As[1], As[2], As[3], B0, B1);
    mma_tf32(d, A[0], A[1], A[2], A[3], B0s, B1s);
  }
  mma_tf32(d, A[0], A[1], A[2], A[3], B0, B1);
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

// Cells of one block in the k16 fragment layout, from the block's 128-bit
// mask (bit c * 16 + r for row r, column c) and the offset of its first cell:
// a set bit's rank is its cell's offset. Lane (g, t) holds rows g and g + 8 of
// columns 2t and 2t + 1: bits g + 8j of word t (row g + 8 (j & 1), column
// 2t + (j >> 1)), which is the m16n8 accumulator layout, the fp16/bf16
// m16n8k16 A operand of one 8-column half, and the TF32 m16n8k8 A operand
// with its k index permuted (hardware k = t, t + 4 <-> columns 2t, 2t + 1,
// the B rows permuted alike). Straight-line code on named words: no
// runtime-indexed array (those went to local memory).
//
// lane_cells: the lane's four values, v[j] = V(rank) or 0 for an empty cell,
// from word t and the offset of its first cell; lm = (1 << g) - 1.
template <typename VF>
__device__ __forceinline__ void lane_cells(unsigned w, int first, int g, unsigned lm, VF V, float (&v)[4]) {
  const unsigned y = w >> g;  // bit 8j: cell j present
  const int r = first + __popc(w & lm);
  v[0] = (y & 1u) ? V(r) : 0.f;
  v[1] = (y & 0x100u) ? V(r + __popc(y & 0xffu)) : 0.f;
  v[2] = (y & 0x10000u) ? V(r + __popc(y & 0xffffu)) : 0.f;
  v[3] = (y & 0x1000000u) ? V(r + __popc(y & 0xffffffu)) : 0.f;
}

// The same cells as indices (-1 = empty), from the whole mask (SDDMM).
__device__ __forceinline__ void cells_k16(const int4& m, int base, int g, int t, int (&idx)[4]) {
  const int p0 = __popc((unsigned)m.x), p1 = __popc((unsigned)m.y), p2 = __popc((unsigned)m.z);
  const unsigned w = (unsigned)(t == 0 ? m.x : t == 1 ? m.y : t == 2 ? m.z : m.w);
  base += (t > 0 ? p0 : 0) + (t > 1 ? p1 : 0) + (t > 2 ? p2 : 0);
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // k: row g + 8 (k >> 1), column 2t + (k & 1)
    const int bit = (k & 1) * 16 + 8 * (k >> 1) + g;
    idx[k] = ((w >> bit) & 1u) ? base + __popc(w & ((1u << bit) - 1u)) : -1;
  }
}

// fp32 -> hi + lo halves of two values, packed (first value in the low bits).
template <typename T>
__device__ __forceinline__ void split2(float v0, float v1, uint32_t& hi, uint32_t& lo) {
  if constexpr (std::is_same<T, __half>::value) {
    const __half2 h = __floats2half2_rn(v0, v1);
    const float2 f = __half22float2(h);
    const __half2 l = __floats2half2_rn(v0 - f.x, v1 - f.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
    const float2 f = __bfloat1622float2(h);
    const __nv_bfloat162 l = __floats2bfloat162_rn(v0 - f.x, v1 - f.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
  }
}

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
    const float dg = diag != nullptr ? diag[row * diag_stride] : 0.f;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int f = f0 + (2 * t + q) * J;
      if (f >= F) continue;
      if (VEC) {  // F is a multiple of the 16-byte vector and f of J: all J in range
        Pack<T, J> p;
        Pack<T, J> xv;
        if (diag != nullptr) xv = *reinterpret_cast<const Pack<T, J>*>(x + row * F + f);
#pragma unroll
        for (int j = 0; j < J; ++j)
          p.v[j] = from_f<T>(acc.d[j][2 * h + q] + (diag != nullptr ? dg * to_f(xv.v[j]) : 0.f));
        *reinterpret_cast<Pack<T, J>*>(out + row * F + f) = p;
      } else {
#pragma unroll
        for (int j = 0; j < J; ++j) {
          if (f + j >= F) break;
          float v = acc.d[j][2 * h + q];
          if (diag != nullptr) v += dg * to_f(x[row * F + f + j]);
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

// One kernel for all dtypes. fp32: TF32 / 3xTF32 m16n8k8, one 16 x 8 block
// per MMA. fp16 / bf16: m16n8k16 on block pairs (K = 16 condensed columns),
// edge values split into hi + lo halves. The MMA's n index is mapped to
// features (n * J + j for n-tile j), so each thread reads J contiguous
// features of a staged row; its k index to columns as in lane_cells, so a
// thread's B rows are 2t and 2t + 1 of a block. coop = 0: every warp of the
// CTA owns a unit; coop = 1: the CTA's warps share unit blockIdx.x (graphs
// with few units).
// Registers: up to 80 (launch bounds 256 x 3). The 64-register cap of
// (256, 4) made the compiler rebuild addresses and lane constants for every
// copy and fragment read (13% more instructions in the F = 32 fp32 profile);
// the kernels use 64-74 registers, and 4-warp CTAs stay at the 7 per SM that
// shared memory allows (6 for 32-element half slices).
template <typename T, int FS, bool VEC, bool SPLIT>
__global__ void __launch_bounds__(256, 3)
sgt_spmm_kernel(const int4* __restrict__ units, int U, int coop, const int* __restrict__ cols,
                const int* __restrict__ maskw, const int* __restrict__ cell_ptr, const float* __restrict__ vals,
                int C, const T* __restrict__ x, T* __restrict__ out, float* __restrict__ ws,
                const float* __restrict__ diag, int64_t diag_stride, int R, int F) {
  using S = SpmmStage<T, FS>;
  constexpr bool K16 = !std::is_same<T, float>::value;
  constexpr int KS = S::KS, QC = S::QC, J = FS / 8;
  constexpr int E16 = 16 / (int)sizeof(T);  // elements per 16-byte chunk
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
  const int4 un = units[uid];
  const int f0 = blockIdx.y * FS;
  unsigned char* const my = smem_raw + (size_t)warp * kStages * S::BYTES;

  SpmmAcc<J> acc;
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int k = 0; k < 4; ++k) acc.d[j][k] = 0.f;

  // Lane constants. Staging: row chunk c = lane + 32 i (row c / QC, column
  // chunk lane % QC) goes to swizzled chunk swz(c) = (lane ^ sw) + 32 i.
  const int sw = ((lane >> 3) & 3) << 1;
  const int fl = f0 + (lane % QC) * E16;
  // (shared-window addresses and byte offsets, kept in registers: under a
  // 64-register cap the compiler rebuilt them for every copy, about 30
  // instructions per 16-byte chunk in the instruction profile)
  const unsigned sdst = smem_addr(my) + 16u * (unsigned)(lane ^ sw);  // row chunk, slot 0
  const unsigned scel = smem_addr(my) + (unsigned)S::OFF_C + 16u * (unsigned)lane;
  const int csz = fl < F ? 16 : 0;
  const char* const xl = reinterpret_cast<const char*>(x + fl);
  const unsigned rowb = (unsigned)F * (unsigned)sizeof(T);
  // Fragment reads: rows 2t and 2t + 1 at element g * J, of a stage's even
  // (ob) and odd (oc) block; two blocks further is 16 * FS elements on (the
  // swizzle, bits 3-4 of the chunk index, repeats every 32 chunks: 16 QC with
  // QC even). With QC >= 4 the odd block is 8 * FS elements on, an offset
  // the compiler folds into the loads (registers are at the 64 limit).
  const int ob0 = xoff<T, FS>(2 * t, g * J), ob1 = xoff<T, FS>(2 * t + 1, g * J);
  const int oc0 = QC >= 4 ? ob0 + 8 * FS : xoff<T, FS>(8 + 2 * t, g * J);
  const int oc1 = QC >= 4 ? ob1 + 8 * FS : xoff<T, FS>(9 + 2 * t, g * J);
  const unsigned lm = (1u << g) - 1u;

  // Steps of KS blocks; the warp takes steps wi, wi + W, ...
  const int nst = (un.z - un.y + KS - 1) / KS;
  const int ns = nst > wi ? (nst - wi + W - 1) / W : 0;
  auto first = [&](int k) { return un.y + (wi + k * W) * KS; };
  // Per lane, of one stage: colr = column l (block l / 8, slot l % 8) for
  // l < 8 KS; mkr = mask word l % 4 of block l / 4 for l < 4 KS; cpr = first
  // cell of block l for l <= KS (the unit's end for l = KS or past it).
  // (colr, mkr, cpr): the next stage to issue; (colr2, mkr2, cpr2): the one
  // after, so the first two stages' metadata loads are in flight together.
  int colr = -1, mkr = 0, cpr = 0, colr2 = -1, mkr2 = 0, cpr2 = 0;
  auto load_meta = [&](int k) {  // metadata of step k into (colr2, mkr2, cpr2)
    if (k >= ns) return;
    const int b0 = first(k), e = b0 * 8 + lane;
    colr2 = (lane < 8 * KS && e < un.z * 8) ? __ldg(cols + e) : -1;
    mkr2 = (lane < 4 * KS && b0 + (lane >> 2) < un.z) ? __ldg(maskw + (int64_t)b0 * 4 + lane) : 0;
    cpr2 = lane <= KS ? __ldg(cell_ptr + min(b0 + lane, un.z)) : 0;
  };
  auto advance = [&]() {
    colr = colr2;
    mkr = mkr2;
    cpr = cpr2;
  };
  unsigned fast_bits = 0;  // bit q: stage slot q holds its cell values
  auto issue = [&](int q) {  // the stage in (colr, mkr, cpr) into slot q
    unsigned char* st = my + q * S::BYTES;
    const int c0 = __shfl_sync(kFullMask, cpr, 0), c1 = __shfl_sync(kFullMask, cpr, KS);
    const int cb = c0 & ~3;  // 16-byte aligned start of the stage's cells
    const bool fast = c1 - cb <= kStageCells;
    fast_bits = (fast_bits & ~(1u << q)) | ((unsigned)fast << q);
    // (mask word, first cell of the word): popcounts scanned over the
    // block's 4 words (lanes 4b .. 4b + 3)
    const int cnt = __popc((unsigned)mkr);
    int inc = cnt;
    int up = __shfl_up_sync(kFullMask, inc, 1);
    if ((lane & 3) >= 1) inc += up;
    up = __shfl_up_sync(kFullMask, inc, 2);
    if ((lane & 3) >= 2) inc += up;
    const int wfirst = __shfl_sync(kFullMask, cpr, lane >> 2) + inc - cnt - (fast ? cb : 0);
    if (lane < 4 * KS) reinterpret_cast<int2*>(st + S::OFF_M)[lane] = make_int2(mkr, wfirst);
    if (fast) {
      const int i = cb + 4 * lane;
      if (i < c1) cp_async16(scel + q * S::BYTES, vals + i, 4 * min(4, C - i));
    }
    if (VEC) {
#pragma unroll
      for (int i = 0; i < S::NCH; ++i) {
        const int col = __shfl_sync(kFullMask, colr, lane / QC + i * (32 / QC));
        const char* src = xl + (uint64_t)(unsigned)max(col, 0) * rowb;
        cp_async16(sdst + q * S::BYTES + 512 * i, src, col >= 0 ? csz : 0);
      }
    } else {
      T* sx = reinterpret_cast<T*>(st);
      for (int e = lane; e < KS * 8 * FS; e += 32) {
        const int row = e / FS, f = e % FS;
        const int col = __shfl_sync(kFullMask, colr, row);
        sx[xoff<T, FS>(row, f)] = (col >= 0 && f0 + f < F) ? x[(int64_t)col * F + f0 + f] : from_f<T>(0.f);
      }
    }
  };
  // Multiply one staged step of nb blocks; V(i) is cell value i (staged or global).
  auto multiply = [&](const unsigned char* st, int nb, auto V) {
    const T* sx = reinterpret_cast<const T*>(st);
    const int2* sm = reinterpret_cast<const int2*>(st + S::OFF_M) + t;
    using P = Pack<T, J>;
    if constexpr (!K16) {
#pragma unroll
      for (int s = 0; s < KS; ++s) {
        if (s >= nb) break;
        const int2 m = sm[4 * s];
        float v[4];
        lane_cells((unsigned)m.x, m.y, g, lm, V, v);
        uint32_t ab[4], as[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) tf32_split<SPLIT>(v[k], ab[k], as[k]);
        const int base = (s >> 1) * 16 * FS;
        const P x0 = *reinterpret_cast<const P*>(sx + base + ((s & 1) ? oc0 : ob0));
        const P x1 = *reinterpret_cast<const P*>(sx + base + ((s & 1) ? oc1 : ob1));
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
          lane_cells((unsigned)m.x, m.y, g, lm, V, v);
          split2<T>(v[0], v[2], ahi[2 * h], alo[2 * h]);          // row g
          split2<T>(v[1], v[3], ahi[2 * h + 1], alo[2 * h + 1]);  // row g + 8
        }
        const int base = p * 16 * FS;
        const P x0 = *reinterpret_cast<const P*>(sx + base + ob0);
        const P x1 = *reinterpret_cast<const P*>(sx + base + ob1);
        const P x2 = *reinterpret_cast<const P*>(sx + base + oc0);
        const P x3 = *reinterpret_cast<const P*>(sx + base + oc1);
#pragma unroll
        for (int j = 0; j < J; ++j) {
          const uint32_t b0r = pack2(x0.v[j], x1.v[j]), b1r = pack2(x2.v[j], x3.v[j]);
          mma_k16<T>(acc.d[j], alo, b0r, b1r);
          mma_k16<T>(acc.d[j], ahi, b0r, b1r);
        }
      }
    }
  };
  auto compute = [&](int k, int q) {
    const unsigned char* st = my + q * S::BYTES;
    const int nb = min(KS, un.z - first(k));
    const float* sc = reinterpret_cast<const float*>(st + S::OFF_C);
    if ((fast_bits >> q) & 1u)
      multiply(st, nb, [&](int i) { return sc[i]; });
    else
      multiply(st, nb, [&](int i) { return __ldg(vals + i); });
  };

  // Pipeline: stages k + 1 .. k + kStages - 1 are in flight while stage k
  // is multiplied (slot qc); __syncwarp orders the lanes' copies and stores
  // before the reads and the reads before the slot is refilled (slot qi).
  int qi = 0, qc = 0;
  auto next = [](int q) { return q == kStages - 1 ? 0 : q + 1; };
  load_meta(0);
  advance();
  load_meta(1);
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    if (k < ns) issue(qi);
    cp_commit();
    qi = next(qi);
    advance();
    load_meta(k + 2);
  }
  for (int k = 0; k < ns; ++k) {
    const int kn = k + kStages - 1;
    if (kn < ns) issue(qi);
    cp_commit();
    qi = next(qi);
    advance();
    load_meta(kn + 2);
    cp_wait<kStages - 1>();
    __syncwarp();
    compute(k, qc);
    __syncwarp();
    qc = next(qc);
  }
  cp_wait<0>();
  if (!reduce_warps<J * 4>(&acc.d[0][0], reinterpret_cast<float*>(smem_raw), warp, lane, W)) return;
  store_tile<T, J, VEC>(acc, un.x, un.w, f0, R, F, out, ws, diag, diag_stride, x, g, t);
}

// Split windows (measured faster than completing them inside the SpMM by the
// last unit through an atomic counter: that added a counter reset per call and
// serial slot reads at the end of the units): the window's slots summed in
// slot order in the workspace's fragment order (thread (j, lane) of slice
// blockIdx.y reads one float4 per slot), then stored to the window's rows
// (+ diag).
template <typename T, int J>
__global__ void __launch_bounds__(128)
sgt_reduce(const int* __restrict__ heavy, const int* __restrict__ heavy_ptr, const float* __restrict__ ws,
           T* __restrict__ out, const float* __restrict__ diag, int64_t diag_stride, const T* __restrict__ x,
           int R, int F) {
  const int j = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // launched as a programmatic dependent of the SpMM (sm_90): wait for the
  // SpMM grid to complete and its writes to be visible (returns at once
  // when launched normally)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const float4* w = reinterpret_cast<const float4*>(ws);
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int k = heavy_ptr[blockIdx.x]; k < heavy_ptr[blockIdx.x + 1]; ++k) {
    const float4 v = w[ws_index(k, blockIdx.y, gridDim.y, J, j, lane)];
    s.x += v.x;
    s.y += v.y;
    s.z += v.z;
    s.w += v.w;
  }
  const float e[4] = {s.x, s.y, s.z, s.w};
  const int f0 = blockIdx.y * 8 * J;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // i = 2h + q
    const int64_t row = (int64_t)heavy[blockIdx.x] * 16 + g + 8 * (i >> 1);
    const int f = f0 + (2 * t + (i & 1)) * J + j;
    if (row >= R || f >= F) continue;
    float v = e[i];
    if (diag != nullptr) v += diag[row * diag_stride] * to_f(x[row * F + f]);
    out[row * F + f] = from_f<T>(v);
  }
}

// ------------------------------------------------------------------ SDDMM
// A block's 16 x 8 accumulator (d[k]: row g + 8 * (k >> 1), column
// 2t + (k & 1): the k16 layout) stored into its cells.
template <typename T>
__device__ __forceinline__ void store_cells(const float (&d)[4], const int4& m, int base, int g, int t,
                                            T* __restrict__ out) {
  int idx[4];
  cells_k16(m, base, g, t, idx);
#pragma unroll
  for (int k = 0; k < 4; ++k)
    if (idx[k] >= 0) out[idx[k]] = from_f<T>(d[k]);
}

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
  for (int b = un.y + 2 * (warp + W * (int)blockIdx.y); b < un.z; b += 2 * W * (int)gridDim.y) {
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
    store_cells(d0, mask[b], cell_ptr[b], g, t, out);
    if (two) store_cells(d1, mask[b + 1], cell_ptr[b + 1], g, t, out);
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
  for (int b = un.y + 2 * (warp + W * (int)blockIdx.y); b < un.z; b += 2 * W * (int)gridDim.y) {
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
    store_cells(d0, mask[b], cell_ptr[b], g, t, out);
    if (two) store_cells(d1, mask[b + 1], cell_ptr[b + 1], g, t, out);
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

constexpr int kSddmmWarps = 8192;

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
  // the stage copies cell values in 16-byte chunks: a 16-byte aligned base
  at::Tensor vals = cell_val.contiguous();
  if (!aligned16(vals.data_ptr())) vals = vals.clone();
  TORCH_CHECK(vals.numel() < (int64_t)1 << 31, "pyg_tc: too many SGT cells for the int32 kernels");
  const int C = (int)vals.numel();
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
  // warps > 1: that many warps share each unit (coop); 1: four warps per
  // CTA, each with its own unit.
  const int W = warps_of(warps);
  const bool coop = W > 1;
  const int nw = coop ? W : 4;
  const int U = (int)units.size(0);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const bool sm90 = device_attr<cudaDevAttrComputeCapabilityMajor>(x.get_device()) >= 9;
  const auto* un = reinterpret_cast<const int4*>(units.data_ptr<int>());
  const int* mk = mask.data_ptr<int>();
  const int* cl = cols.data_ptr<int>();
  const int* cp = cell_ptr.data_ptr<int>();
  const float* vp = vals.data_ptr<float>();
  auto launch = [&](auto tag, auto kern, auto fs, int SB) {
    using T = decltype(tag);
    constexpr int FS = decltype(fs)::value;
    if (U == 0) return;
    const int slices = (F + FS - 1) / FS;
    // partial tiles of split windows: 16 x FS fp32 per slot and slice
    at::Tensor ws = at::empty({num_slots * slices * 16 * FS}, x.options().dtype(at::kFloat));
    float* wp = ws.data_ptr<float>();
    const size_t bytes = (size_t)nw * kStages * SB;
    if (bytes > 48 * 1024)
      C10_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    const dim3 grid(coop ? U : (U + nw - 1) / nw, slices);
    kern<<<grid, 32 * nw, bytes, stream>>>(un, U, coop ? 1 : 0, cl, mk, cp, vp, C,
                                           reinterpret_cast<const T*>(x.data_ptr()),
                                           reinterpret_cast<T*>(out.data_ptr()), wp, dp, ds, R, F);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (heavy.numel() > 0) {
      // sm_90: programmatic dependent launch (the reduce's launch overlaps
      // the SpMM's last CTAs; it waits for the SpMM with griddepcontrol.wait)
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(heavy.numel(), slices);
      cfg.blockDim = dim3(32 * (FS / 8));
      cfg.dynamicSmemBytes = 0;
      cfg.stream = stream;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = attr;
      cfg.numAttrs = sm90 ? 1 : 0;
      C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, sgt_reduce<T, FS / 8>, heavy.data_ptr<int>(),
                                        heavy_ptr.data_ptr<int>(), (const float*)wp,
                                        reinterpret_cast<T*>(out.data_ptr()), dp, ds,
                                        reinterpret_cast<const T*>(x.data_ptr()), R, F));
    }
  };
  // Feature slices: the width rounded up to 8 / 16 / 32 fp32 or 16 / 32 half
  // elements, wider inputs in slices of 32 (measured: 16-element fp32 slices
  // re-read the metadata per slice and ran 1.5-2x slower at F = 32); 32-float
  // slices stage 2 blocks per stage, the others 4 (2 KB of rows per stage).
  // The vector path needs 16-byte aligned rows, else elementwise staging.
  if (x.scalar_type() == at::kFloat) {
    const bool vec = vec_ok<float>(x, 4) && vec_ok<float>(out, 4);
    auto go = [&](auto fs, auto vc) {
      constexpr int FS = decltype(fs)::value;
      constexpr bool V = decltype(vc)::value;
      constexpr int SB = SpmmStage<float, FS>::BYTES;
      if (precision != 0) launch(float(), sgt_spmm_kernel<float, FS, V, true>, fs, SB);
      else launch(float(), sgt_spmm_kernel<float, FS, V, false>, fs, SB);
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
    constexpr int SB16 = SpmmStage<T, 16>::BYTES, SB32 = SpmmStage<T, 32>::BYTES;
    const std::integral_constant<int, 16> fs16;
    const std::integral_constant<int, 32> fs32;
    if (!(vec_ok<T>(x, 8) && vec_ok<T>(out, 8))) launch(tag, sgt_spmm_kernel<T, 16, false, true>, fs16, SB16);
    else if (F <= 16) launch(tag, sgt_spmm_kernel<T, 16, true, true>, fs16, SB16);
    else launch(tag, sgt_spmm_kernel<T, 32, true, true>, fs32, SB32);
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
  // Tiles are independent (no reduction), so on graphs with few units the
  // grid's y splits each unit's tiles over up to 8 CTAs (extra CTAs of short
  // units exit at once): about kSddmmWarps warps, and long units (whole
  // windows on small graphs) do not set the critical path.
  const int Y = U == 0 ? 1 : std::min(8, std::max(1, (kSddmmWarps + U * W - 1) / (U * W)));
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
    auto run = [&](auto kern) { kern<<<dim3(U, Y), 32 * W, 0, stream>>>(un, cl, mk, cp, ap, bp, op, R, F); };
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
    auto run = [&](auto kern) { kern<<<dim3(U, Y), 32 * W, 0, stream>>>(un, cl, mk, cp, ap, bp, op, R, F); };
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
