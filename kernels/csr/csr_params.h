// CSR family: parameters of SpMM and SDDMM, filled once by the entry points
// (csr_host.cpp) and passed to the launchers (csr_spmm.cu, csr_sddmm.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pyg_tc {

// SpMM launch configuration: lanes per unit (L) and 16-byte vectors per lane (NV).
struct CsrSpmmConfig {
  int L{}, NV{};
};

struct CsrSpmmParams {
  // unit schedule over the CSR (rows = targets): int32 [U, 4] units
  // (row, start, end, slot); heavy rows' units write fp32 partial rows to ws
  const int4* units{};
  int64_t num_units{};
  const int* rowptr{};
  const int* col{};
  const float* value{};  // edge values, nullptr = 1
  const int* heavy_rows{};
  const int* heavy_ptr{};
  int64_t num_heavy{};
  float* ws{};  // [num_slots, F]
  const float* diag{};  // nullptr = none
  int64_t diag_stride{};
  // features: x [N_src, F] and out [N, F], of the launcher's dtype T
  const void* x{};
  void* out{};
  int F{};
  bool max{}, mean{};
  // launch configuration (host rules in csr_host.cpp)
  CsrSpmmConfig config{};
  bool coop{};  // the groups of a warp share one unit
  bool vec{};  // 16-byte vector path (else one element per lane)
  bool two_level{};  // half vectors, sum / mean: the half2 two-level sum (docs/half.md)
};

struct CsrSddmmParams {
  const int4* units{};
  int64_t num_units{};
  const int* col{};
  const void* a{};
  const void* b{};
  void* out{};  // one value per edge
  int F{};
  bool vec{};  // 16-byte vector path
  int lanes{};  // lanes per unit: 4, 8, 16 or 32
  int inflight{4};  // edges whose row loads a lane keeps in flight: 4 or 8
};

// ES-SpMM (csr_sampled.cu): each row aggregates at most S of its edges,
// chosen in the kernel by pyg_tc/ops/sample.py's integer specification.
struct CsrSampledParams {
  const int* rowptr{};
  const int* order{};  // rows in the order the warps take them (degrees descending), nullptr = 0..R-1
  const int* col{};
  const float* value{};  // edge values, nullptr = 1
  int64_t num_rows{};
  const void* x{};  // [N_src, F], the launcher's dtype
  void* out{};  // [num_rows, F]
  int F{};
  int S{};  // max_neighbors
  int sampling{};  // 0 uniform, 1 bucket, 2 fastrand
  uint32_t seed{};  // the seed's low 32 bits
  int reduce{};  // 0 sum, 1 mean, 2 max
  const float* diag{};  // the self term diag[i] x[i] (never sampled), nullptr = none
  int64_t diag_stride{};
  bool vec{};  // 16-byte vector path
  int lanes{};  // lanes per row: 4, 8, 16 or 32
  int slices{1};  // feature slices over blockIdx.y (each L * V wide; the last loops on)
};

// Defined (for float, __half, __nv_bfloat16) in csr_spmm.cu / csr_sddmm.cu / csr_sampled.cu.
template <typename T> void run_csr_spmm(const CsrSpmmParams& p, cudaStream_t stream);
template <typename T> void run_csr_sddmm(const CsrSddmmParams& p, cudaStream_t stream);
template <typename T> void run_csr_sampled(const CsrSampledParams& p, cudaStream_t stream);

}  // namespace pyg_tc
