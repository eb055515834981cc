// CSR family, host side: the entry points of spmm_csr, sddmm_csr and
// sampled_spmm (argument checks, the launch configuration rules, the params
// struct) and their CUDA registration. The kernels and launchers are in
// csr_spmm.cu / csr_sddmm.cu / csr_sampled.cu;
// the schemas are defined in Python (pyg_tc/ops).
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

#include "common/host.h"
#include "common/launch_config.h"
#include "common/static_switch.h"
#include "csr/csr_params.h"

namespace pyg_tc {
namespace {

// Lanes per unit (L) and 16-byte vectors per lane (NV), fitted to sweeps on
// the H200 over 6 graphs x 4 widths x 2 dtypes x 4 chunk sizes (docs/benchmarks.md;
// within 5% of the best config per case, geometric mean):
// * rows of <= 8 vectors: one vector per lane, as few lanes as the row needs
//   (more units per warp);
// * wider rows, x small enough to stay in L2 (<= 32 MiB): 16 lanes with one or
//   two vectors, the whole row (up to 512 bytes) in one slice;
// * wider rows, larger x: 256-byte feature slices (fp32 8 lanes x 2 vectors,
//   fp16/bf16 16 lanes x 1) over blockIdx.y, so one slice of x is gathered by
//   all blocks before the next.
// The scalar path (odd widths that are not padded) uses one element per lane.
// The half two-level path (fp16 / bf16 sum and mean, batches of 8 edges in
// flight) has its own rule, from the sweep in benchmarks/probes/half_probe.py
// (docs/half.md): 4 lanes for rows of <= 4 vectors, 8 for <= 8, then 8
// lanes x 2 vectors (256-byte slices), or 16 x 2 for rows of >= 32 vectors
// when x stays in L2.
constexpr int64_t kSmallX = 32ll << 20;
constexpr int64_t kLargeX = 256ll << 20;  // ES-SpMM's feature slices (sampled_spmm_cuda)

// The spmm_config override (launch_config.h) replaces the rule (sweeps).
CsrSpmmConfig choose_config(int64_t chunks, int elem_bytes, bool vec, int64_t x_bytes,
                            bool two_level) {
  const LaunchOverrides& o = launch_overrides();
  if (o.spmm_lanes != 0) return CsrSpmmConfig{o.spmm_lanes, o.spmm_vectors};
  if (two_level) return chunks <= 4 ? CsrSpmmConfig{4, 1} : chunks <= 8 ? CsrSpmmConfig{8, 1}
                        : (chunks >= 32 && x_bytes <= kSmallX) ? CsrSpmmConfig{16, 2} : CsrSpmmConfig{8, 2};
  if (!vec) return chunks <= 8 ? CsrSpmmConfig{8, 1} : chunks <= 16 ? CsrSpmmConfig{16, 1}
                 : chunks <= 32 ? CsrSpmmConfig{32, 1} : CsrSpmmConfig{32, 2};
  if (chunks <= 4 && elem_bytes < 4) return {4, 1};
  if (chunks <= 8) return {8, 1};
  if (x_bytes <= kSmallX) return chunks <= 16 ? CsrSpmmConfig{16, 1} : CsrSpmmConfig{16, 2};
  return elem_bytes == 4 ? CsrSpmmConfig{8, 2} : CsrSpmmConfig{16, 1};
}

// Cooperative mode when the graph has fewer units than coop_units(device)
// (small graphs: each unit is then a serial chain of loads and the launch is
// one short, latency-bound wave); the spmm_coop override forces it.
bool use_coop(int64_t num_units, int device) {
  const int forced = launch_overrides().spmm_coop;
  return forced >= 0 ? forced == 1 : num_units < coop_units(device);
}

at::Tensor spmm_csr_cuda(const at::Tensor& rowptr, const at::Tensor& col,
                         const std::optional<at::Tensor>& value, const at::Tensor& x,
                         const at::Tensor& units, const at::Tensor& heavy_rows,
                         const at::Tensor& heavy_ptr, const std::optional<at::Tensor>& diag,
                         int64_t num_slots, c10::string_view reduce,
                         // transpose: used by the Python-registered backward only
                         const at::Tensor& t_rowptr, const at::Tensor& t_col,
                         const at::Tensor& t_perm, const std::optional<at::Tensor>& t_value,
                         const at::Tensor& t_units, const at::Tensor& t_heavy_rows,
                         const at::Tensor& t_heavy_ptr, int64_t t_num_slots) {
  check_index(rowptr, "rowptr");
  check_index(col, "col");
  check_index(units, "units");
  check_index(heavy_rows, "heavy_rows");
  check_index(heavy_ptr, "heavy_ptr");
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "pyg_tc: x must be a 2-D CUDA tensor");
  TORCH_CHECK(units.dim() == 2 && units.size(1) == 4, "pyg_tc: units must be [U, 4]");
  const bool is_max = reduce == "max";
  const bool mean = reduce == "mean";
  TORCH_CHECK(is_max || mean || reduce == "sum", "pyg_tc: reduce must be sum, mean or max");
  c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous();
  const int64_t N = rowptr.size(0) - 1;
  const int64_t F = xc.size(1);
  TORCH_CHECK(F < (1ll << 31), "pyg_tc: feature width too large");
  const int64_t vecw = 16 / xc.element_size();
  if (F % vecw != 0 && F > 8) {
    // Odd widths: run the vector path on a copy padded to a multiple of the
    // 16-byte vector (one extra pass over x and out, against a scalar path
    // that issues 4-8x more load instructions per gathered row).
    const int64_t Fp = (F + vecw - 1) / vecw * vecw;
    auto xp = at::zeros({xc.size(0), Fp}, xc.options());
    xp.narrow(1, 0, F).copy_(xc);
    auto outp = spmm_csr_cuda(rowptr, col, value, xp, units, heavy_rows, heavy_ptr, diag,
                              num_slots, reduce, t_rowptr, t_col, t_perm, t_value, t_units,
                              t_heavy_rows, t_heavy_ptr, t_num_slots);
    return outp.narrow(1, 0, F).contiguous();
  }
  auto out = at::empty({N, F}, xc.options());
  if (N == 0 || F == 0) return out;

  const EdgeValues w = edge_values(value, col.numel());
  DiagValues dg;
  if (diag.has_value()) {
    TORCH_CHECK(!is_max, "pyg_tc: diag is not supported with reduce='max'");
    TORCH_CHECK(xc.size(0) == N, "pyg_tc: diag needs a square adjacency");
    dg = diag_values(*diag, N, "pyg_tc: diag must be float32 CUDA with N entries or one");
  }
  at::Tensor ws;
  CsrSpmmParams p;
  p.ws = workspace(ws, num_slots * F, xc);
  p.units = reinterpret_cast<const int4*>(units.data_ptr<int>());
  p.num_units = units.size(0);
  p.rowptr = rowptr.data_ptr<int>();
  p.col = col.data_ptr<int>();
  p.value = w.ptr;
  p.heavy_rows = heavy_rows.data_ptr<int>();
  p.heavy_ptr = heavy_ptr.data_ptr<int>();
  p.num_heavy = heavy_rows.numel();
  p.diag = dg.ptr;
  p.diag_stride = dg.stride;
  p.x = xc.data_ptr();
  p.out = out.data_ptr();
  p.F = (int)F;
  p.max = is_max;
  p.mean = mean;

  const int64_t elem = xc.element_size();
  const bool vec_ok = (F * elem) % 16 == 0;
  p.coop = use_coop(units.size(0), x.device().index());
  p.vec = (F % vecw == 0) && aligned16(p.x) && aligned16(p.out);
  // half types, vector path, sum / mean: the two-level half2 sum, except for
  // rows of <= 4 vectors in cooperative mode (small graphs, F <= 32, where the
  // fp32 products are faster; docs/half.md); the spmm_two_level override
  // forces it
  const int forced = launch_overrides().spmm_two_level;
  const bool rule = !(p.coop && vec_ok && F * elem / 16 <= 4);
  p.two_level = elem == 2 && p.vec && !is_max && (forced < 0 ? rule : forced == 1);
  p.config = choose_config(vec_ok ? F * elem / 16 : F, (int)elem, vec_ok, xc.numel() * elem,
                           p.two_level);
  auto stream = c10::cuda::getCurrentCUDAStream();
  PYG_TC_DTYPE_SWITCH(xc.scalar_type(), T, "pyg_tc_spmm", [&] { run_csr_spmm<T>(p, stream); });
  return out;
}

at::Tensor sddmm_csr_cuda(const at::Tensor& col, const at::Tensor& a, const at::Tensor& b,
                          const at::Tensor& units,
                          // both directions: used by the Python-registered backward only
                          // (rowptr also here: a padded graph's padding slots get 0)
                          const at::Tensor& rowptr, const at::Tensor&, const at::Tensor&, int64_t,
                          const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t) {
  check_index(col, "col");
  check_index(units, "units");
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1),
              "pyg_tc: sddmm needs 2-D CUDA a, b of equal width");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "pyg_tc: sddmm a and b must share a dtype");
  c10::cuda::CUDAGuard guard(a.device());
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  const int64_t E = col.numel();
  const int64_t F = ac.size(1);
  auto out = F == 0 ? at::zeros({E}, ac.options()) : at::empty({E}, ac.options());
  const int64_t U = units.size(0);
  if (E == 0 || F == 0 || U == 0) return out;
  const int64_t vecw = 16 / ac.element_size();
  if (F % vecw != 0 && F > 8) {
    // Odd widths (as the SpMM): zero-padded copies of a and b (one pass over
    // each, against E row gathers) so the 16-byte vector path runs; the zero
    // columns add nothing to the dot products (docs/half.md measures the
    // scalar path it replaces).
    const int64_t Fp = (F + vecw - 1) / vecw * vecw;
    auto pad = [&](const at::Tensor& t) {
      auto padded = at::zeros({t.size(0), Fp}, t.options());
      padded.narrow(1, 0, F).copy_(t);
      return padded;
    };
    const bool same = ac.data_ptr() == bc.data_ptr() && ac.sizes() == bc.sizes();
    ac = pad(ac);
    bc = same ? ac : pad(bc);
  }
  CsrSddmmParams p;
  p.units = reinterpret_cast<const int4*>(units.data_ptr<int>());
  p.num_units = U;
  p.col = col.data_ptr<int>();
  p.a = ac.data_ptr();
  p.b = bc.data_ptr();
  p.out = out.data_ptr();
  p.F = (int)ac.size(1);
  // 16-byte vectors when the width and both bases allow, then as few lanes
  // per unit (4, 8, 16, 32) as the row's vectors (or elements) need
  p.vec = (p.F % vecw == 0) && aligned16(p.a) && aligned16(p.b);
  const int64_t chunks = p.vec ? p.F / vecw : p.F;
  p.lanes = chunks <= 4 ? 4 : chunks <= 8 ? 8 : chunks <= 16 ? 16 : 32;
  // edges in flight per lane: 8 for half types on the vector path when the
  // gathered b stays in L2 (<= 32 MiB), else 4 (docs/half.md); the
  // sddmm_inflight override forces it
  const bool b_in_l2 = bc.size(0) * p.F * bc.element_size() <= kSmallX;
  const int forced = launch_overrides().sddmm_inflight;
  p.inflight = forced != 0 ? forced : (bc.element_size() == 2 && p.vec && b_in_l2) ? 8 : 4;
  auto stream = c10::cuda::getCurrentCUDAStream();
  PYG_TC_DTYPE_SWITCH(ac.scalar_type(), T, "pyg_tc_sddmm", [&] { run_csr_sddmm<T>(p, stream); });
  check_index(rowptr, "rowptr");
  zero_edge_tail(out, rowptr);
  return out;
}

// ES-SpMM (csr_sampled.cu): at most S edges per row, chosen in the kernel.
at::Tensor sampled_spmm_cuda(const at::Tensor& rowptr, const at::Tensor& col,
                             const std::optional<at::Tensor>& value, const at::Tensor& x,
                             const std::optional<at::Tensor>& diag,
                             const std::optional<at::Tensor>& row_order, int64_t max_neighbors, int64_t sampling, int64_t seed,
                             c10::string_view reduce) {
  check_index(rowptr, "rowptr");
  check_index(col, "col");
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "pyg_tc: x must be a 2-D CUDA tensor");
  TORCH_CHECK(max_neighbors >= 1 && max_neighbors < (1ll << 31), "pyg_tc: max_neighbors must be in [1, 2^31)");
  TORCH_CHECK(sampling >= 0 && sampling <= 2, "pyg_tc: sampling must be 0 (uniform), 1 (bucket) or 2 (fastrand)");
  const int red = reduce == "sum" ? 0 : reduce == "mean" ? 1 : reduce == "max" ? 2 : -1;
  TORCH_CHECK(red >= 0, "pyg_tc: reduce must be sum, mean or max");
  c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous();
  const int64_t R = rowptr.size(0) - 1;
  const int64_t F = xc.size(1);
  TORCH_CHECK(F < (1ll << 31), "pyg_tc: feature width too large");
  auto out = at::empty({R, F}, xc.options());  // the kernel writes every element
  if (R == 0 || F == 0) return out;
  const EdgeValues w = edge_values(value, col.numel());
  DiagValues dg;
  if (diag.has_value()) {
    TORCH_CHECK(red != 2, "pyg_tc: diag is not supported with reduce='max'");
    TORCH_CHECK(xc.size(0) == R, "pyg_tc: diag needs a square adjacency");
    dg = diag_values(*diag, R, "pyg_tc: diag must be float32 CUDA with N entries or one");
  }
  CsrSampledParams p;
  if (row_order.has_value()) {
    check_index(*row_order, "row_order");
    TORCH_CHECK(row_order->numel() == R, "pyg_tc: row_order must have one entry per row");
    p.order = row_order->data_ptr<int>();
  }
  p.rowptr = rowptr.data_ptr<int>();
  p.col = col.data_ptr<int>();
  p.value = w.ptr;
  p.num_rows = R;
  p.x = xc.data_ptr();
  p.out = out.data_ptr();
  p.F = (int)F;
  p.S = (int)max_neighbors;
  p.sampling = (int)sampling;
  p.seed = static_cast<uint32_t>(seed & 0xFFFFFFFFll);
  p.reduce = red;
  p.diag = dg.ptr;
  p.diag_stride = dg.stride;
  const int64_t vecw = 16 / xc.element_size();
  p.vec = (F % vecw == 0) && aligned16(p.x) && aligned16(p.out);
  const int64_t chunks = p.vec ? F / vecw : F;
  p.lanes = chunks <= 4 ? 4 : chunks <= 8 ? 8 : chunks <= 16 ? 16 : 32;
  // rows wider than 256 bytes of an x several times L2: 256-byte feature slices over
  // blockIdx.y (16 lanes x 16 bytes), so one slice of x is gathered by all blocks before
  // the next (the engine's idea; here the slots and their col reads are repeated per
  // slice, so it pays only for an x far beyond L2: kLargeX, docs/es_spmm.md)
  p.slices = 1;
  if (p.vec && chunks > 16 && xc.numel() * xc.element_size() > kLargeX) {
    p.lanes = 16;
    p.slices = static_cast<int>(std::min<int64_t>((chunks + 15) / 16, 65535));
  }
  auto stream = c10::cuda::getCurrentCUDAStream();
  PYG_TC_DTYPE_SWITCH(xc.scalar_type(), T, "pyg_tc_sampled_spmm", [&] { run_csr_sampled<T>(p, stream); });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("spmm_csr", &spmm_csr_cuda);
  m.impl("sddmm_csr", &sddmm_csr_cuda);
  m.impl("sampled_spmm", &sampled_spmm_cuda);
}

}  // namespace pyg_tc
