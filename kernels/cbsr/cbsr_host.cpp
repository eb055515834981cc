// CBSR family (MaxK-GNN), host side: the entry points of maxk_select, cbsr_spmm and
// cbsr_sspmm (argument checks, launch rules, the params structs) and their
// CUDA registration. The kernels and launchers are in cbsr_select.cu,
// cbsr_spmm.cu and cbsr_sspmm.cu; the schemas are defined in Python
// (pyg_tc/ops).
#include <string>
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <tuple>

#include "common/host.h"
#include "common/launch_config.h"
#include "common/static_switch.h"
#include "cbsr/cbsr_params.h"

namespace pyg_tc {
namespace {

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

// The graph arguments of both CBSR kernels: index checks, reduce, edge values
// and diag (kept alive in `values` / `diag_keep` for the launch).
CbsrGraph graph_args(const at::Tensor& rowptr, const at::Tensor& col,
                     const std::optional<at::Tensor>& value, const at::Tensor& units,
                     const std::optional<at::Tensor>& diag, c10::string_view reduce,
                     int64_t num_src, EdgeValues& values, DiagValues& diag_keep) {
  check_index(rowptr, "rowptr");
  check_index(col, "col");
  check_index(units, "units");
  TORCH_CHECK(units.dim() == 2 && units.size(1) == 4, "pyg_tc: units must be [U, 4]");
  const bool mean = reduce == "mean";
  TORCH_CHECK(mean || reduce == "sum", "pyg_tc: CBSR kernels support reduce sum and mean");
  CbsrGraph a{reinterpret_cast<const int4*>(units.data_ptr<int>()), units.size(0),
              rowptr.data_ptr<int>(), col.data_ptr<int>(), nullptr, nullptr, 0, mean};
  values = edge_values(value, col.numel());
  a.value = values.ptr;
  if (diag.has_value()) {
    TORCH_CHECK(!mean, "pyg_tc: diag is supported with reduce='sum' only");
    TORCH_CHECK(num_src == rowptr.size(0) - 1, "pyg_tc: diag needs a square adjacency");
    diag_keep = diag_values(*diag, num_src, "pyg_tc: diag must be float32 CUDA with N entries or one");
    a.diag = diag_keep.ptr;
    a.diag_stride = diag_keep.stride;
  }
  return a;
}

void check_cbsr(const at::Tensor& indices, int64_t rows, int64_t k, int64_t width) {
  TORCH_CHECK(indices.is_cuda() && indices.dim() == 2 && indices.size(0) == rows &&
                  indices.size(1) == k,
              "pyg_tc: CBSR indices must be a CUDA tensor [N, k] matching the values");
  TORCH_CHECK(indices.scalar_type() == (width <= 256 ? at::kByte : at::kShort),
              "pyg_tc: CBSR indices must be uint8 for widths <= 256 and int16 above");
  TORCH_CHECK(width >= 1 && width <= kCbsrMaxWidth, "pyg_tc: CBSR CUDA kernels support widths 1..",
              std::to_string(kCbsrMaxWidth), ", got ", std::to_string(width));
}

std::tuple<at::Tensor, at::Tensor> maxk_select_cuda(const at::Tensor& x, int64_t k) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "pyg_tc: maxk input must be a 2-D CUDA tensor");
  const int64_t N = x.size(0), F = x.size(1);
  TORCH_CHECK(F >= 2 && F <= 1024, "pyg_tc: the maxk kernel supports widths 2..1024, got ", std::to_string(F));
  TORCH_CHECK(k >= 1 && k < F, "pyg_tc: maxk kernel needs 1 <= k < width, got k=", std::to_string(k));
  c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous();
  auto vals = at::empty({N, k}, xc.options());
  auto idx = at::empty({N, k}, xc.options().dtype(F <= 256 ? at::kByte : at::kShort));
  if (N == 0) return {vals, idx};
  MaxkSelectParams p;
  p.x = xc.data_ptr();
  p.rows = N;
  p.F = (int)F;
  p.k = (int)k;
  normal_tail_quantile((k + 0.5) / F, &p.z, &p.phi);
  p.values = vals.data_ptr();
  p.indices = idx.data_ptr();
  // one warp per row: the row's elements per lane, rounded up to a power of two
  const int epl = (int)((F + 31) / 32);
  TORCH_CHECK(epl <= 32, "pyg_tc: maxk_select supports widths up to 1024");
  p.epl = pow2_ladder(epl, 32);
  auto stream = c10::cuda::getCurrentCUDAStream();
  PYG_TC_DTYPE_SWITCH(xc.scalar_type(), T, "pyg_tc_maxk", [&] { run_maxk_select<T>(p, stream); });
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
  EdgeValues w;
  DiagValues dg;
  CbsrSpmmParams p;
  p.g = graph_args(rowptr, col, value, units, diag, reduce, Ns, w, dg);
  const auto vc = values.contiguous();
  const auto ic = indices.contiguous();
  const int64_t N = rowptr.size(0) - 1;
  auto out = at::empty({N, F}, vc.options());
  if (N == 0) return out;
  at::Tensor ws;
  p.ws = workspace(ws, num_slots * F, vc);
  p.values = vc.data_ptr();
  p.indices = ic.data_ptr();
  p.k = (int)k;
  p.F = (int)F;
  p.out = out.data_ptr();
  p.heavy_rows = heavy_rows.data_ptr<int>();
  p.heavy_ptr = heavy_ptr.data_ptr<int>();
  p.num_heavy = heavy_rows.numel();
  // Two entries per lane (one 2-element load of values and of indices) when k
  // is even; KG lanes per edge (k / VT rounded up to a power of two); one
  // private buffer per edge slot (no atomics) where allowed and while they
  // fit in kCbsrPrivSmem per block, else one shared buffer per warp.
  const int64_t value_bytes = vc.element_size(), index_bytes = F <= 256 ? 1 : 2;
  const bool pair = launch_overrides().cbsr_pair != 0 && k % 2 == 0 && k >= 4 &&
                    reinterpret_cast<uintptr_t>(p.values) % (2 * value_bytes) == 0 &&
                    reinterpret_cast<uintptr_t>(p.indices) % (2 * index_bytes) == 0;
  p.vt = pair ? 2 : 1;
  p.kg = pow2_ladder((k + p.vt - 1) / p.vt, 32);
  p.priv = cbsr_priv_compiled(p.kg) && (p.kg >= 4 || p.vt == 2) &&
           (size_t)kMaxkWarps * (32 / p.kg) * F * 4 <= kCbsrPrivSmem;
  auto stream = c10::cuda::getCurrentCUDAStream();
  PYG_TC_DTYPE_SWITCH(vc.scalar_type(), T, "pyg_tc_cbsr_spmm", [&] { run_cbsr_spmm<T>(p, stream); });
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
  EdgeValues w;
  DiagValues dg;
  CbsrSspmmParams p;
  p.g = graph_args(rowptr, col, value, units, diag, reduce, Ns, w, dg);
  const auto gc = grad.contiguous();
  const auto ic = indices.contiguous();
  auto out = at::zeros({Ns, k}, gc.options().dtype(at::kFloat));
  if (p.g.num_units == 0 || Ns == 0) return out.to(gc.scalar_type());
  p.grad = gc.data_ptr();
  p.indices = ic.data_ptr();
  p.k = (int)k;
  p.F = (int)F;
  p.out = out.data_ptr<float>();
  p.kg = pow2_ladder(k, 32);  // lanes per edge: k rounded up to a power of two, at most 32
  auto stream = c10::cuda::getCurrentCUDAStream();
  PYG_TC_DTYPE_SWITCH(gc.scalar_type(), T, "pyg_tc_cbsr_sspmm", [&] { run_cbsr_sspmm<T>(p, stream); });
  return gc.scalar_type() == at::kFloat ? out : out.to(gc.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("maxk_select", &maxk_select_cuda);
  m.impl("cbsr_spmm", &cbsr_spmm_cuda);
  m.impl("cbsr_sspmm", &cbsr_sspmm_cuda);
}

}  // namespace pyg_tc
