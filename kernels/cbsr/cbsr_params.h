// CBSR family (MaxK-GNN): parameters of the MaxK selection, the CBSR SpGEMM
// (cbsr_spmm) and the CBSR SSpMM (cbsr_sspmm), filled once by the entry
// points (cbsr_host.cpp) and passed to the launchers (cbsr_select.cu,
// cbsr_spmm.cu, cbsr_sspmm.cu). Each kernel takes its struct by
// value as its only argument; its read-only loads go through ldg()
// (common/dtype.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pyg_tc {

constexpr int kMaxkWarps = 8;  // warps per block of every kernel of the family
constexpr int64_t kCbsrMaxWidth = 4096;  // 8 warps x 4096 floats = 128 KiB of shared memory
constexpr size_t kCbsrPrivSmem = 64 * 1024;  // SpGEMM private buffers: at most this much per block

struct MaxkSelectParams {
  const void* x{};  // [rows, F]
  int64_t rows{};
  int F{}, k{};
  float z{}, phi{};  // first pivot (normal quantile of k / F) and the density there
  void* values{};  // [rows, k], x's dtype
  void* indices{};  // [rows, k], uint8 for F <= 256, int16 above
  int epl{};  // elements per lane: 1, 2, 4, 8, 16 or 32
};

// The graph side of the CBSR kernels: the forward CSR and its unit schedule.
struct CbsrGraph {
  const int4* units{};
  int64_t num_units{};
  const int* rowptr{};
  const int* col{};
  const float* value{};  // edge values, nullptr = 1
  const float* diag{};  // nullptr = none
  int64_t diag_stride{};
  bool mean{};
};

struct CbsrSpmmParams {
  CbsrGraph g{};
  const void* values{};  // CBSR values [Ns, k]
  const void* indices{};  // CBSR column indices [Ns, k]: uint8 for width <= 256, int16 above
  int k{}, F{};  // F: the dense width
  void* out{};  // [N, F]
  float* ws{};  // [num_slots, F] partial rows of heavy rows
  const int* heavy_rows{};
  const int* heavy_ptr{};
  int64_t num_heavy{};
  // launch configuration (host rules in cbsr_host.cpp)
  int vt{};  // entries per lane: 2 (paired loads) or 1
  int kg{};  // lanes per edge: 1, 2, 4, 8, 16 or 32
  bool priv{};  // one private buffer per edge slot (no shared-memory atomics)
};

// Private buffers are compiled for 2 <= KG < 32 (the host rule also needs
// KG >= 4 or VT == 2, and the buffers within kCbsrPrivSmem).
constexpr bool cbsr_priv_compiled(int kg) { return kg >= 2 && kg < 32; }

struct CbsrSspmmParams {
  CbsrGraph g{};
  const void* grad{};  // dense gradient [N, F]
  const void* indices{};  // CBSR column indices [Ns, k]
  int k{}, F{};
  float* out{};  // [Ns, k] fp32 (zeroed; atomics)
  int kg{};  // lanes per edge: 1, 2, 4, 8, 16 or 32
};

// Defined (for float, __half, __nv_bfloat16) in the family's .cu files.
template <typename T> void run_maxk_select(const MaxkSelectParams& p, cudaStream_t stream);
template <typename T> void run_cbsr_spmm(const CbsrSpmmParams& p, cudaStream_t stream);
template <typename T> void run_cbsr_sspmm(const CbsrSspmmParams& p, cudaStream_t stream);

}  // namespace pyg_tc
