// TC-GNN family: parameters of the tensor-core SpMM and SDDMM over SGT blocks
// (pyg_tc/formats/sgt.py), filled once by the entry points (sgt_host.cpp) and
// passed to the launchers (sgt_spmm.cu, sgt_sddmm.cu), which pass them on, by
// value, as the one argument of every kernel: SgtSpmmParams to sgt_spmm_kernel
// and sgt_reduce, SgtSddmmParams to sgt_sddmm_f32 / sgt_sddmm_f16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pyg_tc {

// SGT blocks of one direction: units (window, block range, slot), the 8
// condensed columns of each block, its 128-bit mask and first cell.
struct SgtBlocks {
  const int4* units{};
  int num_units{};
  const int* cols{};
  const int* mask{};  // 4 words per block
  const int* cell_ptr{};
};

struct SgtSpmmParams {
  SgtBlocks b{};
  const float* cell_val{};  // 16-byte aligned
  int num_cells{};
  const int* heavy{};  // split windows, reduced by sgt_reduce
  const int* heavy_ptr{};
  int64_t num_heavy{};
  float* ws{};  // partial tiles: 16 x slice fp32 per slot and slice
  const float* diag{};  // nullptr = none
  int64_t diag_stride{};
  const void* x{};  // [R, F] (square when diag is given)
  void* out{};  // [R, F]
  int R{}, F{};
  // launch configuration (host rules in sgt_host.cpp)
  int warps{};  // warps per CTA
  bool coop{};  // the CTA's warps share one unit
  int slice{};  // feature slice FS: 8, 16 or 32 elements
  int slices{};  // ceil(F / slice), grid y
  bool vec{};  // 16-byte staging (else elementwise)
  bool split{};  // fp32: 3xTF32 (else TF32); fp16 / bf16: always (hi + lo values)
  bool sm90{};  // programmatic dependent launch of sgt_reduce
};

// The SpMM kernels that are compiled: the non-vector path only with the
// dtype's smallest slice (8 fp32, 16 fp16 / bf16), and fp16 / bf16 always
// split.
constexpr bool sgt_spmm_compiled(bool is_float, int slice, bool vec, bool split) {
  const int smallest = is_float ? 8 : 16;
  return slice >= smallest && (vec || slice == smallest) && (is_float || split);
}

struct SgtSddmmParams {
  SgtBlocks b{};
  const void* a{};  // [R, F]
  const void* bm{};  // [N, F]
  void* out{};  // one value per cell
  int R{}, F{};
  int warps{};  // warps per CTA
  int parts{};  // CTAs per unit (grid y)
  int j{};  // features per thread and MMA step: 1 (elementwise loads), 2 or 4 (vector loads)
  bool split{};  // fp32: 3xTF32
};

// Defined (for float, __half, __nv_bfloat16) in sgt_spmm.cu / sgt_sddmm.cu.
template <typename T> void run_sgt_spmm(const SgtSpmmParams& p, cudaStream_t stream);
template <typename T> void run_sgt_sddmm(const SgtSddmmParams& p, cudaStream_t stream);

}  // namespace pyg_tc
