// Attention family, host side: the entry points of attn_gat, attn_gatv2 and
// their backward ops (argument checks, the lane layout rule, the params
// struct) and their CUDA registration. Kernels and launchers: attn_forward.cu,
// attn_backward_rows.cu, attn_backward_cols.cu; schemas: pyg_tc/ops/attn.py.
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "attn/attn_params.h"
#include "common/host.h"
#include "common/launch_config.h"
#include "common/static_switch.h"

namespace pyg_tc {
namespace {

using Opt = std::optional<at::Tensor>;

// Lane layout: 16-byte vectors when the head width and the bases allow; a
// lane holds four vectors of its head (one for heads of fewer than 4 vectors);
// LH = lanes per head, the smallest power of two that covers the head; HS =
// heads per unit (up to 32 lanes); blockIdx.y walks the slices of heads.
struct Layout {
  bool vec, nv4;
  int L, LH, HS;
};

Layout layout(int64_t H, int64_t C, int64_t elem, bool aligned) {
  const int64_t vw = 16 / elem;
  Layout o{};
  o.vec = aligned && C % vw == 0;
  const int64_t cv = o.vec ? C / vw : C;
  TORCH_CHECK(cv <= 128, "pyg_tc: attention head too wide for the fused kernels (use the reference)");
  // four vectors per lane from four vectors per head up (benchmarks/probes/attn_lanes_probe.py:
  // 1.4-1.9x faster forward + backward than one per lane at 4-32 vectors per head, fp32 and half,
  // on an H200; slower at one or two vectors per head)
  o.nv4 = cv >= 4;
  const int nv4 = launch_overrides().attn_nv4;
  if (nv4 == 1 || (nv4 == 0 && cv <= 32)) o.nv4 = nv4 == 1;
  const int64_t per_lane = o.nv4 ? 4 : 1;
  o.LH = pow2_ladder((cv + per_lane - 1) / per_lane, 32);
  o.HS = std::min(pow2_ladder(H, 32), 32 / o.LH);
  o.L = o.LH * o.HS;
  return o;
}

const float* opt_f32(const Opt& t, int64_t n, const char* what) {
  if (!t.has_value()) return nullptr;
  TORCH_CHECK(t->is_cuda() && t->scalar_type() == at::kFloat && t->is_contiguous() && t->numel() == n,
              what);
  return t->data_ptr<float>();
}

struct Walk {
  const at::Tensor& units;
  const at::Tensor& heavy_rows;
  const at::Tensor& heavy_ptr;
  const at::Tensor& col;
  int64_t num_slots;
};

void set_walk(AttnParams& p, const Walk& w, const int* perm, int stride, at::Tensor& ws,
              const at::Tensor& like) {
  check_index(w.units, "units");
  check_index(w.heavy_rows, "heavy_rows");
  check_index(w.heavy_ptr, "heavy_ptr");
  check_index(w.col, "col");
  TORCH_CHECK(w.units.dim() == 2 && w.units.size(1) == 4, "pyg_tc: units must be [U, 4]");
  p.units = reinterpret_cast<const int4*>(w.units.data_ptr<int>());
  p.num_units = w.units.size(0);
  p.col = w.col.data_ptr<int>();
  p.perm = perm;
  p.heavy_rows = w.heavy_rows.data_ptr<int>();
  p.heavy_ptr = w.heavy_ptr.data_ptr<int>();
  p.num_heavy = w.heavy_rows.numel();
  p.ws_stride = stride;
  p.ws = workspace(ws, w.num_slots * stride, like);
}

void set_common(AttnParams& p, const at::Tensor& x, bool v2, double slope, double dropout, const Opt& rng) {
  p.x = x.data_ptr();
  p.v2 = v2;
  p.H = (int)x.size(1);
  p.C = (int)x.size(2);
  p.slope = (float)slope;
  p.p_drop = (float)dropout;
  p.keep_scale = dropout > 0 ? (float)(1.0 / (1.0 - dropout)) : 1.f;
  if (dropout > 0) {
    TORCH_CHECK(rng.has_value() && rng->is_cuda() && rng->scalar_type() == at::kLong && rng->numel() == 2,
                "pyg_tc: attention dropout needs rng, an int64 CUDA tensor [seed, offset]");
    p.rng = rng->data_ptr<int64_t>();
  }
}

void check_x(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 3 && x.is_contiguous(),
              "pyg_tc: attention x must be a contiguous 3-D CUDA tensor [N, H, C]");
  TORCH_CHECK(x.size(1) * x.size(2) < (1ll << 31), "pyg_tc: attention rows too wide");
}

bool aligned_all(std::initializer_list<const void*> ptrs) {
  for (const void* q : ptrs)
    if (q != nullptr && !aligned16(q)) return false;
  return true;
}

void apply_layout(AttnParams& p, const Layout& lay) {
  p.L = lay.L;
  p.LH = lay.LH;
  p.HS = lay.HS;
  p.vec = lay.vec;
  p.nv4 = lay.nv4;
}

enum class Pass { kForward, kRows, kCols };

// The family's one dtype switch: the launcher of `pass` for x's dtype (the
// launchers map the params' layout to template arguments with attn_switch).
void run(const AttnParams& p, at::ScalarType dtype, Pass pass, cudaStream_t stream) {
  const char* op = pass == Pass::kForward ? "pyg_tc_attn_forward"
                   : pass == Pass::kRows  ? "pyg_tc_attn_backward_rows"
                                          : "pyg_tc_attn_backward_cols";
  PYG_TC_DTYPE_SWITCH(dtype, T, op, [&] {
    switch (pass) {
      case Pass::kForward: run_attn_forward<T>(p, stream); break;
      case Pass::kRows: run_attn_backward_rows<T>(p, stream); break;
      case Pass::kCols: run_attn_backward_cols<T>(p, stream); break;
    }
  });
}

#define PYG_TC_ATTN_GRAPH_ARGS                                                                  \
  const at::Tensor &rowptr, const at::Tensor &col, const at::Tensor &units,                      \
      const at::Tensor &heavy_rows, const at::Tensor &heavy_ptr, int64_t num_slots,             \
      const at::Tensor &t_rowptr, const at::Tensor &t_col, const at::Tensor &t_perm,            \
      const at::Tensor &t_units, const at::Tensor &t_heavy_rows, const at::Tensor &t_heavy_ptr, \
      int64_t t_num_slots

// Forward of GAT (v2 = false) and GATv2 (v2 = true).
std::tuple<at::Tensor, at::Tensor> forward(PYG_TC_ATTN_GRAPH_ARGS, const at::Tensor& x, bool v2,
                                           const Opt& a_src, const Opt& a_dst, const Opt& score,
                                           const Opt& x_r, const Opt& att, const Opt& edge,
                                           double slope, double dropout, const Opt& rng) {
  check_x(x);
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t R = rowptr.size(0) - 1, H = x.size(1), C = x.size(2), E = col.numel();
  auto out = at::empty({R, H, C}, x.options());
  auto lse = at::empty({R, H}, x.options().dtype(at::kDouble));
  if (R == 0 || H == 0) return {out, lse};
  AttnParams p;
  set_common(p, x, v2, slope, dropout, rng);
  p.a_src = opt_f32(a_src, x.size(0) * H, "pyg_tc: a_src must be fp32 [Ns, H]");
  p.a_dst = opt_f32(a_dst, R * H, "pyg_tc: a_dst must be fp32 [Nd, H]");
  p.score = opt_f32(score, E * H, "pyg_tc: score must be fp32 [E, H]");
  if (v2) {
    TORCH_CHECK(x_r.has_value() && x_r->scalar_type() == x.scalar_type() && x_r->is_contiguous() &&
                    x_r->numel() == R * H * C,
                "pyg_tc: x_r must be [Nd, H, C] in x's dtype");
    p.x_r = x_r->data_ptr();
    p.att = opt_f32(att, H * C, "pyg_tc: att must be fp32 [H, C]");
    if (edge.has_value()) {
      TORCH_CHECK(edge->scalar_type() == x.scalar_type() && edge->is_contiguous() && edge->numel() == E * H * C,
                  "pyg_tc: edge must be [E, H, C] in x's dtype");
      p.edge = edge->data_ptr();
    }
  }
  p.out = out.data_ptr();
  p.lse = lse.data_ptr<double>();
  const Layout lay = layout(H, C, x.element_size(), aligned_all({p.x, p.x_r, p.edge, p.out}));
  apply_layout(p, lay);
  at::Tensor ws;
  set_walk(p, Walk{units, heavy_rows, heavy_ptr, col, num_slots}, nullptr, (int)(H * C + 2 * H), ws, x);
  auto stream = c10::cuda::getCurrentCUDAStream();
  run(p, x.scalar_type(), Pass::kForward, stream);
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> attn_gat_cuda(PYG_TC_ATTN_GRAPH_ARGS, const at::Tensor& x,
                                                 const Opt& a_src, const Opt& a_dst, const Opt& score,
                                                 double slope, double dropout, const Opt& rng) {
  return forward(rowptr, col, units, heavy_rows, heavy_ptr, num_slots, t_rowptr, t_col, t_perm, t_units,
                 t_heavy_rows, t_heavy_ptr, t_num_slots, x, false, a_src, a_dst, score, {}, {}, {},
                 slope, dropout, rng);
}

std::tuple<at::Tensor, at::Tensor> attn_gatv2_cuda(PYG_TC_ATTN_GRAPH_ARGS, const at::Tensor& x,
                                                   const at::Tensor& x_r, const at::Tensor& att,
                                                   const Opt& edge, double slope, double dropout,
                                                   const Opt& rng) {
  return forward(rowptr, col, units, heavy_rows, heavy_ptr, num_slots, t_rowptr, t_col, t_perm, t_units,
                 t_heavy_rows, t_heavy_ptr, t_num_slots, x, true, {}, {}, {}, x_r, att, edge, slope,
                 dropout, rng);
}

// Shared by both backward ops: the backward inputs of the params. Returns the
// (hi, lo) fp32 pairs of lse the kernels read (keep it alive while they run).
at::Tensor set_backward(AttnParams& p, const at::Tensor& grad, const at::Tensor& lse, const at::Tensor& delta,
                        const at::Tensor& x, int64_t R) {
  TORCH_CHECK(grad.scalar_type() == x.scalar_type() && grad.is_contiguous() &&
                  grad.numel() == R * x.size(1) * x.size(2),
              "pyg_tc: attention grad must be contiguous [Nd, H, C] in x's dtype");
  p.grad = grad.data_ptr();
  TORCH_CHECK(lse.is_cuda() && lse.scalar_type() == at::kDouble && lse.is_contiguous() &&
                  lse.numel() == R * x.size(1),
              "pyg_tc: lse must be fp64 [Nd, H]");
  p.delta = opt_f32(delta, R * x.size(1), "pyg_tc: delta must be fp32 [Nd, H]");
  const at::Tensor hi = lse.to(at::kFloat);  // (-inf stays -inf, with lo = 0: as an fp32 lse)
  const at::Tensor lo = at::where(at::isfinite(hi), at::sub(lse, hi.to(at::kDouble)).to(at::kFloat), at::zeros_like(hi));
  at::Tensor hl = at::stack({hi, lo}, -1);
  p.lse_in = reinterpret_cast<const float2*>(hl.data_ptr<float>());
  return hl;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attn_gat_backward_cuda(
    PYG_TC_ATTN_GRAPH_ARGS, const at::Tensor& x, const Opt& a_src, const Opt& a_dst, const Opt& score,
    double slope, double dropout, const Opt& rng, const at::Tensor& grad, const at::Tensor& lse,
    const at::Tensor& delta, bool need_row) {
  check_x(x);
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t R = rowptr.size(0) - 1, Ns = x.size(0), H = x.size(1), C = x.size(2), E = col.numel();
  auto fopt = x.options().dtype(at::kFloat);
  auto g_x = at::empty_like(x);
  auto g_src = at::empty({a_src.has_value() ? Ns : 0, H}, fopt);
  auto g_dst = at::empty({need_row && a_dst.has_value() ? R : 0, H}, fopt);
  auto g_score = at::empty({need_row && score.has_value() ? E : 0, H}, fopt);
  if (x.numel() == 0 && R * H == 0) return {g_x, g_src, g_dst, g_score};
  AttnParams p;
  set_common(p, x, false, slope, dropout, rng);
  p.a_src = opt_f32(a_src, Ns * H, "pyg_tc: a_src must be fp32 [Ns, H]");
  p.a_dst = opt_f32(a_dst, R * H, "pyg_tc: a_dst must be fp32 [Nd, H]");
  p.score = opt_f32(score, E * H, "pyg_tc: score must be fp32 [E, H]");
  const at::Tensor lse_hl = set_backward(p, grad, lse, delta, x, R);
  const Layout lay = layout(H, C, x.element_size(), aligned_all({p.x, p.grad, g_x.data_ptr()}));
  apply_layout(p, lay);
  auto stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor ws_rows, ws_cols;
  if (need_row && (a_dst.has_value() || score.has_value()) && R > 0 && H > 0) {
    AttnParams r = p;
    r.g_dst = g_dst.numel() ? g_dst.data_ptr<float>() : nullptr;
    r.g_score = g_score.numel() ? g_score.data_ptr<float>() : nullptr;
    set_walk(r, Walk{units, heavy_rows, heavy_ptr, col, num_slots}, nullptr, (int)H, ws_rows, x);
    run(r, x.scalar_type(), Pass::kRows, stream);
  }
  if (Ns > 0 && H > 0) {
    check_index(t_perm, "t_perm");
    AttnParams c = p;
    c.g_x = g_x.data_ptr();
    c.g_src = g_src.numel() ? g_src.data_ptr<float>() : nullptr;
    set_walk(c, Walk{t_units, t_heavy_rows, t_heavy_ptr, t_col, t_num_slots}, t_perm.data_ptr<int>(),
             (int)(H * C + H), ws_cols, x);
    run(c, x.scalar_type(), Pass::kCols, stream);
  }
  if (g_score.numel()) zero_edge_tail(g_score, rowptr);  // a padded graph's padding slots
  return {g_x, g_src, g_dst, g_score};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attn_gatv2_backward_cuda(
    PYG_TC_ATTN_GRAPH_ARGS, const at::Tensor& x, const at::Tensor& x_r, const at::Tensor& att,
    const Opt& edge, double slope, double dropout, const Opt& rng, const at::Tensor& grad,
    const at::Tensor& lse, const at::Tensor& delta, bool need_edge) {
  check_x(x);
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t R = rowptr.size(0) - 1, Ns = x.size(0), H = x.size(1), C = x.size(2), E = col.numel();
  auto g_x = at::empty_like(x);
  auto g_r = at::empty({R, H, C}, x.options());
  auto g_att_rows = at::empty({R, H, C}, x.options().dtype(at::kFloat));
  auto g_edge = at::empty({need_edge && edge.has_value() ? E : 0, H, C}, x.options());
  AttnParams p;
  set_common(p, x, true, slope, dropout, rng);
  TORCH_CHECK(x_r.scalar_type() == x.scalar_type() && x_r.is_contiguous() && x_r.numel() == R * H * C,
              "pyg_tc: x_r must be [Nd, H, C] in x's dtype");
  p.x_r = x_r.data_ptr();
  p.att = opt_f32(att, H * C, "pyg_tc: att must be fp32 [H, C]");
  if (edge.has_value()) {
    TORCH_CHECK(edge->scalar_type() == x.scalar_type() && edge->is_contiguous() && edge->numel() == E * H * C,
                "pyg_tc: edge must be [E, H, C] in x's dtype");
    p.edge = edge->data_ptr();
  }
  const at::Tensor lse_hl = set_backward(p, grad, lse, delta, x, R);
  auto stream = c10::cuda::getCurrentCUDAStream();
  if (H == 0 || C == 0) {
    return {g_x.zero_(), g_r.zero_(), at::zeros_like(att), g_edge.zero_()};
  }
  const Layout lay = layout(H, C, x.element_size(),
                            aligned_all({p.x, p.x_r, p.edge, p.grad, g_x.data_ptr(), g_r.data_ptr(),
                                         g_edge.numel() ? g_edge.data_ptr() : nullptr}));
  apply_layout(p, lay);
  at::Tensor ws_rows, ws_cols;
  if (R > 0) {
    AttnParams r = p;
    r.g_r = g_r.data_ptr();
    r.g_att = g_att_rows.data_ptr<float>();
    r.g_edge = g_edge.numel() ? g_edge.data_ptr() : nullptr;
    set_walk(r, Walk{units, heavy_rows, heavy_ptr, col, num_slots}, nullptr, (int)(2 * H * C), ws_rows, x);
    run(r, x.scalar_type(), Pass::kRows, stream);
  }
  if (Ns > 0) {
    check_index(t_perm, "t_perm");
    AttnParams c = p;
    c.g_x = g_x.data_ptr();
    set_walk(c, Walk{t_units, t_heavy_rows, t_heavy_ptr, t_col, t_num_slots}, t_perm.data_ptr<int>(),
             (int)(H * C), ws_cols, x);
    run(c, x.scalar_type(), Pass::kCols, stream);
  }
  // the rows' partials summed in fp64 (a float sum of terms that nearly cancel loses several times PyG's accuracy)
  auto g_att = R > 0 ? at::sum(g_att_rows, {0}, false, at::kDouble).to(at::kFloat)
                     : at::zeros({H, C}, x.options().dtype(at::kFloat));
  if (g_edge.numel()) zero_edge_tail(g_edge, rowptr);  // a padded graph's padding slots
  return {g_x, g_r, g_att, g_edge};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_tc, CUDA, m) {
  m.impl("attn_gat", &attn_gat_cuda);
  m.impl("attn_gatv2", &attn_gatv2_cuda);
  m.impl("attn_gat_backward", &attn_gat_backward_cuda);
  m.impl("attn_gatv2_backward", &attn_gatv2_backward_cuda);
}

}  // namespace pyg_tc
