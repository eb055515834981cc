// TC-GNN family: the tensor-core SDDMM over SGT blocks: one CTA per unit
// (or per part of one on graphs with few units), its warps taking the unit's
// 16x16 tiles (block pairs, Algorithm 3 of TC-GNN) in turn. Fragments are
// loaded from global memory with 16-byte vector loads: the MMA's k index is
// mapped to features so that each thread's elements are contiguous. A
// block's cells are decoded from its 128-bit mask (no edge rescans); every
// cell is written by one thread (no atomics). fp32: TF32 or 3xTF32; fp16 /
// bf16: k16 MMAs; fp32 accumulation.
//
// Kernel arguments: one SgtSddmmParams by value (the launcher passes p). Its
// pointers are unpacked into __restrict__ locals at the top, and every load of
// data that no thread writes during the kernel (units, columns, masks, cell
// offsets, the feature rows) goes through ldg (ld.global.nc): the compiler
// chooses that path by itself only for `const __restrict__` kernel arguments.
//
// This file: the kernels and their launcher (fp32, fp16, bf16); the entry
// point and the launch rules are in sgt_host.cpp.

#include <c10/cuda/CUDAException.h>

#include <cstdint>
#include <type_traits>

#include "common/dtype.cuh"
#include "common/static_switch.h"
#include "sgt/sgt_mma.cuh"
#include "sgt/sgt_params.h"

namespace pyg_tc {
namespace {

// ------------------------------------------------------------------ SDDMM
// A block's 16 x 8 accumulator (d[k]: row g + 8 * (k >> 1), column
// 2t + (k & 1): the k16 layout) stored into its cells. mask: the block's
// 128-bit mask; its word t is loaded on its own (one 4-byte load rather than
// a select over the four words, the code the compiler made of it before the
// loads went through ldg).
template <typename T>
__device__ __forceinline__ void store_cells(const float (&d)[4], const int4* mask, int base, int g, int t,
                                            T* __restrict__ out) {
  int idx[4];
  cells_k16(ldg(mask), ldg(reinterpret_cast<const unsigned*>(mask) + t), base, g, t, idx);
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
sgt_sddmm_f32(const SgtSddmmParams p) {
  const int4* __restrict__ units = p.b.units;
  const int* __restrict__ cols = p.b.cols;
  const int4* __restrict__ mask = reinterpret_cast<const int4*>(p.b.mask);
  const int* __restrict__ cell_ptr = p.b.cell_ptr;
  const float* __restrict__ A = static_cast<const float*>(p.a);
  const float* __restrict__ Bm = static_cast<const float*>(p.bm);
  float* __restrict__ out = static_cast<float*>(p.out);
  const int R = p.R, F = p.F;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int4 un = ldg(units + blockIdx.x);
  const int64_t ra = (int64_t)un.x * 16 + g, rb = ra + 8;
  const float* pa0 = ra < R ? A + ra * F : nullptr;
  const float* pa1 = rb < R ? A + rb * F : nullptr;
  for (int b = un.y + 2 * (warp + W * (int)blockIdx.y); b < un.z; b += 2 * W * (int)gridDim.y) {
    const bool two = b + 1 < un.z;
    const int n0 = ldg(cols + b * 8 + g), n1 = two ? ldg(cols + (b + 1) * 8 + g) : -1;
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
    store_cells(d0, mask + b, ldg(cell_ptr + b), g, t, out);
    if (two) store_cells(d1, mask + b + 1, ldg(cell_ptr + b + 1), g, t, out);
  }
}

// fp16 / bf16 inputs, k16 MMA: pair p = kk / 2 of step j is features
// fc + p * 2J + 2j + (kk & 1); the thread's pairs p = t and t + 4 are 2J
// contiguous features, and each 32-bit word of them is one fragment register.
template <typename T, int J, bool VEC>
__global__ void __launch_bounds__(256)
sgt_sddmm_f16(const SgtSddmmParams p) {
  const int4* __restrict__ units = p.b.units;
  const int* __restrict__ cols = p.b.cols;
  const int4* __restrict__ mask = reinterpret_cast<const int4*>(p.b.mask);
  const int* __restrict__ cell_ptr = p.b.cell_ptr;
  const T* __restrict__ A = static_cast<const T*>(p.a);
  const T* __restrict__ Bm = static_cast<const T*>(p.bm);
  T* __restrict__ out = static_cast<T*>(p.out);
  const int R = p.R, F = p.F;
  constexpr int V = 2 * J;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int4 un = ldg(units + blockIdx.x);
  const int64_t ra = (int64_t)un.x * 16 + g, rb = ra + 8;
  const T* pa0 = ra < R ? A + ra * F : nullptr;
  const T* pa1 = rb < R ? A + rb * F : nullptr;
  for (int b = un.y + 2 * (warp + W * (int)blockIdx.y); b < un.z; b += 2 * W * (int)gridDim.y) {
    const bool two = b + 1 < un.z;
    const int n0 = ldg(cols + b * 8 + g), n1 = two ? ldg(cols + (b + 1) * 8 + g) : -1;
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
    store_cells(d0, mask + b, ldg(cell_ptr + b), g, t, out);
    if (two) store_cells(d1, mask + b + 1, ldg(cell_ptr + b + 1), g, t, out);
  }
}

}  // namespace

// J features per thread and MMA step (1: elementwise loads, 2 / 4: vector
// loads); grid: units x parts, warps per CTA; the kernels take p itself.
template <typename T>
void run_sgt_sddmm(const SgtSddmmParams& p, cudaStream_t stream) {
  const dim3 grid(p.b.num_units, p.parts);
  PYG_TC_INT_SWITCH(p.j, J, (1, 2, 4), [&] {
    constexpr bool VEC = J > 1;
    if constexpr (std::is_same<T, float>::value) {
      PYG_TC_BOOL_SWITCH(p.split, SPLIT, [&] {
        sgt_sddmm_f32<J, VEC, SPLIT><<<grid, 32 * p.warps, 0, stream>>>(p);
      });
    } else {
      sgt_sddmm_f16<T, J, VEC><<<grid, 32 * p.warps, 0, stream>>>(p);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template void run_sgt_sddmm<float>(const SgtSddmmParams&, cudaStream_t);
template void run_sgt_sddmm<__half>(const SgtSddmmParams&, cudaStream_t);
template void run_sgt_sddmm<__nv_bfloat16>(const SgtSddmmParams&, cudaStream_t);

}  // namespace pyg_tc
