// Host-side helpers of the entry points (the *_host.cpp files, compiled by
// the C++ compiler): argument checks, the optional edge values and
// diagonal, the fp32 workspace of split rows, cached device attributes and
// the lane-count ladder. Every family fills its params struct with these,
// once per call, before the compile-time dispatch.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "common/align.h"

namespace pyg_tc {

// Zeros the slots of a per-edge output ([E, ...], contiguous) past
// rowptr[R]: a padded graph's padding edges, which no walk writes
// (kernels/csr/csr_sddmm.cu). Reads rowptr[R] on the device.
void zero_edge_tail(const at::Tensor& out, const at::Tensor& rowptr);

inline void check_index(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "pyg_tc: ", name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == at::kInt, "pyg_tc: ", name, " must be int32");
  TORCH_CHECK(t.is_contiguous(), "pyg_tc: ", name, " must be contiguous");
}

// Edge values: fp32, one per edge; none = every edge weighs 1 (ptr nullptr).
// `keep` holds the contiguous copy for the launch.
struct EdgeValues {
  at::Tensor keep;
  const float* ptr = nullptr;
};

inline EdgeValues edge_values(const std::optional<at::Tensor>& value, int64_t num_edges) {
  EdgeValues e;
  if (value.has_value()) {
    e.keep = value->contiguous();
    TORCH_CHECK(e.keep.scalar_type() == at::kFloat && e.keep.is_cuda() && e.keep.numel() == num_edges,
                "pyg_tc: value must be a float32 CUDA tensor with one entry per edge");
    e.ptr = e.keep.data_ptr<float>();
  }
  return e;
}

// Self-loop weights: fp32 CUDA, one per node (stride 1) or one for all
// (stride 0); the kernels read diag[row * stride]. The caller checks the
// reduction and the square shape first (its own messages and order); `msg`
// is the family's message for a bad diag tensor.
struct DiagValues {
  at::Tensor keep;
  const float* ptr = nullptr;
  int64_t stride = 0;
};

inline DiagValues diag_values(const at::Tensor& diag, int64_t n, const char* msg) {
  DiagValues d;
  d.keep = diag.contiguous();
  TORCH_CHECK(d.keep.scalar_type() == at::kFloat && d.keep.is_cuda() &&
                  (d.keep.numel() == n || d.keep.numel() == 1),
              msg);
  d.ptr = d.keep.data_ptr<float>();
  d.stride = d.keep.numel() == 1 ? 0 : 1;
  return d;
}

// fp32 workspace of `floats` elements on the device of `like` (the partial
// sums of the units of split / heavy rows, reduced by a second kernel), or
// none (nullptr) when there is nothing to split.
inline float* workspace(at::Tensor& keep, int64_t floats, const at::Tensor& like) {
  if (floats <= 0) return nullptr;
  keep = at::empty({floats}, like.options().dtype(at::kFloat));
  return keep.data_ptr<float>();
}

// A device attribute, queried once per device and cached: the entry points
// ask on every call. Devices past the cache are queried each time.
template <cudaDeviceAttr A>
inline int device_attr(int device) {
  static int cache[64] = {0};  // 0 = not queried yet (the attributes used are positive)
  const int d = device < 0 ? 0 : device;
  if (d < 64 && cache[d] != 0) return cache[d];
  int v = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&v, A, d));
  if (d < 64) cache[d] = v;
  return v;
}

// The lane-count ladders: the smallest power of two >= v among 1, 2, ..., cap
// (cap for larger v).
constexpr int pow2_ladder(int64_t v, int cap) {
  int p = 1;
  while (p < cap && p < v) p <<= 1;
  return p;
}

}  // namespace pyg_tc
