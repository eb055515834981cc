// TC-GNN family, host side: the entry points of sgt_spmm and sgt_sddmm
// (argument checks, launch rules, the params structs) and their CUDA
// registration. The kernels and launchers are in sgt_spmm.cu / sgt_sddmm.cu;
// the schemas are defined in Python (pyg_tc/ops).
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

#include "common/host.h"
#include "common/static_switch.h"
#include "sgt/sgt_params.h"

namespace pyg_tc {
namespace {

SgtBlocks check_sgt(const at::Tensor& units, const at::Tensor& cols, const at::Tensor& mask,
                    const at::Tensor& cell_ptr) {
  check_index(units, "units");
  check_index(cols, "cols");
  check_index(mask, "mask");
  check_index(cell_ptr, "cell_ptr");
  TORCH_CHECK(units.dim() == 2 && units.size(1) == 4, "pyg_tc: units must be [U, 4]");
  TORCH_CHECK(mask.numel() == cols.numel() / 2 && cell_ptr.numel() == cols.numel() / 8 + 1,
              "pyg_tc: SGT cols / mask / cell_ptr sizes disagree");
  return {reinterpret_cast<const int4*>(units.data_ptr<int>()), (int)units.size(0), cols.data_ptr<int>(),
          mask.data_ptr<int>(), cell_ptr.data_ptr<int>()};
}

constexpr int kSddmmWarps = 8192;

int warps_of(int64_t warps) { return warps == 1 || warps == 2 || warps == 4 || warps == 8 ? (int)warps : 4; }

// The 16-byte vector path of a row-major [*, F] tensor: V elements of `elem`
// bytes per vector.
bool vec_ok(const at::Tensor& t, int V, int64_t elem) {
  return t.size(1) % V == 0 && aligned16(t.data_ptr()) &&
         (reinterpret_cast<uintptr_t>(t.data_ptr()) % (V * elem) == 0);
}

bool half_or_bf16(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

at::Tensor sgt_spmm_cuda(const at::Tensor& units, const at::Tensor& cols, const at::Tensor& mask,
                         const at::Tensor& cell_ptr, const at::Tensor& heavy, const at::Tensor& heavy_ptr,
                         int64_t num_slots, const at::Tensor& cell_val, const at::Tensor& x_in,
                         const std::optional<at::Tensor>& diag, int64_t num_rows, int64_t precision,
                         int64_t warps, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                         const at::Tensor&) {
  SgtSpmmParams p;
  p.b = check_sgt(units, cols, mask, cell_ptr);
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
  DiagValues dg;
  if (diag.has_value()) {
    dg = diag_values(*diag, R, "pyg_tc: diag must be float32 with 1 or num_rows entries");
    TORCH_CHECK(x.size(0) == R, "pyg_tc: diag needs a square adjacency");
  }
  p.cell_val = vals.data_ptr<float>();
  p.num_cells = C;
  p.heavy = heavy.data_ptr<int>();
  p.heavy_ptr = heavy_ptr.data_ptr<int>();
  p.num_heavy = heavy.numel();
  p.diag = dg.ptr;
  p.diag_stride = dg.stride;
  p.x = x.data_ptr();
  p.out = out.data_ptr();
  p.R = R;
  p.F = F;
  // warps > 1: that many warps share each unit (coop); 1: four warps per
  // CTA, each with its own unit.
  const int W = warps_of(warps);
  p.coop = W > 1;
  p.warps = p.coop ? W : 4;
  p.sm90 = device_attr<cudaDevAttrComputeCapabilityMajor>(x.get_device()) >= 9;
  // Feature slices: the width rounded up to 8 / 16 / 32 fp32 or 16 / 32 half
  // elements, wider inputs in slices of 32 (narrower fp32 slices re-read the
  // metadata per slice; docs/sgt.md); 32-float
  // slices stage 2 blocks per stage, the others 4 (2 KB of rows per stage).
  // The vector path needs 16-byte aligned rows, else elementwise staging.
  const bool is_float = x.scalar_type() == at::kFloat;
  TORCH_CHECK(is_float || half_or_bf16(x), "pyg_tc: sgt_spmm supports float32, float16 and bfloat16");
  const int64_t elem = x.element_size();
  const int V = (int)(16 / elem);
  p.vec = vec_ok(x, V, elem) && vec_ok(out, V, elem);
  if (is_float) {
    p.slice = !p.vec ? 8 : F <= 8 ? 8 : F <= 16 ? 16 : 32;
    p.split = precision != 0;
  } else {
    p.slice = !p.vec ? 16 : F <= 16 ? 16 : 32;
    p.split = true;
  }
  p.slices = (F + p.slice - 1) / p.slice;
  // partial tiles of split windows: 16 x slice fp32 per slot and slice
  at::Tensor ws;
  if (p.b.num_units > 0) p.ws = workspace(ws, num_slots * p.slices * 16 * p.slice, x);
  auto stream = c10::cuda::getCurrentCUDAStream();
  PYG_TC_DTYPE_SWITCH(x.scalar_type(), T, "pyg_tc_sgt_spmm", [&] { run_sgt_spmm<T>(p, stream); });
  return out;
}

at::Tensor sgt_sddmm_cuda(const at::Tensor& units, const at::Tensor& cols, const at::Tensor& mask,
                          const at::Tensor& cell_ptr, const at::Tensor&, const at::Tensor&, int64_t,
                          const at::Tensor& a_in, const at::Tensor& b_in, int64_t num_cells,
                          int64_t precision, int64_t warps, const at::Tensor&, const at::Tensor&,
                          const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          int64_t, const at::Tensor&) {
  SgtSddmmParams p;
  p.b = check_sgt(units, cols, mask, cell_ptr);
  TORCH_CHECK(a_in.is_cuda() && b_in.is_cuda() && a_in.dim() == 2 && b_in.dim() == 2 &&
                  a_in.size(1) == b_in.size(1) && a_in.scalar_type() == b_in.scalar_type(),
              "pyg_tc: sgt_sddmm needs 2-D CUDA a, b of one dtype and width");
  const c10::cuda::CUDAGuard guard(a_in.device());
  const at::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  const int R = (int)a.size(0), F = (int)a.size(1);
  at::Tensor out = at::empty({num_cells}, a.options());
  if (num_cells == 0) return out;
  if (F == 0) return out.zero_();
  p.a = a.data_ptr();
  p.bm = b.data_ptr();
  p.out = out.data_ptr();
  p.R = R;
  p.F = F;
  p.warps = warps_of(warps);
  const int U = p.b.num_units;
  // Tiles are independent (no reduction), so on graphs with few units the
  // grid's y splits each unit's tiles over up to 8 CTAs (extra CTAs of short
  // units exit at once): about kSddmmWarps warps, and long units (whole
  // windows on small graphs) do not set the critical path.
  p.parts = U == 0 ? 1 : std::min(8, std::max(1, (kSddmmWarps + U * p.warps - 1) / (U * p.warps)));
  // Features per thread and step: 4 or 2 with 16-byte (8-byte) vector loads
  // where the width and alignment allow, else 1 (elementwise).
  const bool is_float = a.scalar_type() == at::kFloat;
  TORCH_CHECK(is_float || half_or_bf16(a), "pyg_tc: sgt_sddmm supports float32, float16 and bfloat16");
  const int64_t elem = a.element_size();
  if (is_float) {
    p.split = precision != 0;
    const bool v4 = vec_ok(a, 4, elem) && vec_ok(b, 4, elem);
    const bool v2 = vec_ok(a, 2, elem) && vec_ok(b, 2, elem);
    p.j = F >= 32 && v4 ? 4 : F >= 16 && v2 ? 2 : 1;
  } else {
    p.split = true;
    p.j = F >= 64 && vec_ok(a, 8, elem) && vec_ok(b, 8, elem)   ? 4
          : F >= 32 && vec_ok(a, 4, elem) && vec_ok(b, 4, elem) ? 2
                                                                 : 1;
  }
  auto stream = c10::cuda::getCurrentCUDAStream();
  PYG_TC_DTYPE_SWITCH(a.scalar_type(), T, "pyg_tc_sgt_sddmm", [&] { run_sgt_sddmm<T>(p, stream); });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("sgt_spmm", &sgt_spmm_cuda);
  m.impl("sgt_sddmm", &sgt_sddmm_cuda);
}

}  // namespace pyg_tc
