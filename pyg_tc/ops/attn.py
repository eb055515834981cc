"""Fused graph attention (fuseGNN): score, edge softmax and aggregation in one
pass over each target row, for GAT, GATv2 and AGNN-style given scores.

Per target row ``i``, head ``h`` and in-edge ``e = (j -> i)`` (CSR order):

* GAT (``attn_gat``): ``s_e = leaky_relu(a_src[j] + a_dst[i] + score[e])``
  (each term optional; ``negative_slope=1`` makes it the identity, which
  AGNN uses with its cosine scores in ``score``);
* GATv2 (``attn_gatv2``): ``s_e = sum_c att[h, c] * leaky_relu(x[j, h, c] +
  x_r[i, h, c] + edge[e, h, c])``;
* ``alpha_e = softmax_e(s)`` over the row, dropped out with probability
  ``dropout`` (kept ones scaled by ``1 / (1 - dropout)``) by a counter-based
  generator (Philox 4x32-10 of ``(e * H + h)``, keyed by the call's ``rng``);
* ``out[i, h] = sum_e alpha_e x[j, h]`` and ``lse[i, h] = log sum_e exp(s_e)``
  (``-inf`` for a row without edges, whose output is 0).

The kernels (``kernels/attn/``) visit each row once with an online softmax
(running maximum and sum, one exponential per edge and head), split heavy
rows over the engine's unit schedule and merge the partial states in order
(no atomics), and save only ``lse [N, H]`` (fp64: ``exp(s - lse)`` is then
as exact as the forward's ``exp(s - m) / l``) beside the inputs. The backward
recomputes ``alpha`` and the mask: one pass over the rows (gradients of the
target-side terms and of per-edge inputs) and one over the cached transpose
(gradients of the source features and source terms); no ``E x H x C``
tensor, only the per-edge gradients that are inputs' shapes (``score``,
``edge``).

Also here: :func:`~pyg_tc.ops.edge_softmax` (the building block of unfused compositions),
the Philox generator shared by kernels and references
(:func:`philox_uniform`, :func:`dropout_keep`) and :func:`~pyg_tc.ops.attention_weights`
(PyG's ``alpha`` for ``return_attention_weights``).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .._library import GRAPH_ARGS, Op
from .._philox import U32 as _U32, philox4x32  # noqa: F401 (re-exported for the tests)
from ..formats.csr import CSRGraph, Schedule, build_schedule, coop_units
from . import dispatch
from .csr import _rows, acc_dtype, live_edges, pad_edges

#: widest head (channels) the fused kernels take: 32 lanes x 4 vectors of
#: 16 bytes (512 fp32, 1024 fp16 / bf16); wider heads run the reference
ATTN_MAX_HEAD_BYTES = 2048

# ---------------------------------------------------------------------------
# dropout on Philox 4x32-10 (pyg_tc._philox), the same generator as kernels/common/philox.cuh


def philox_uniform(rng: Tensor, idx: Tensor) -> Tensor:
    """Uniform floats in [0, 1) (24-bit) for counters ``idx`` (int64) under
    ``rng = [seed, offset]`` (int64): the first word of Philox 4x32-10 with
    counter (idx_lo, idx_hi, offset_lo, offset_hi) and key (seed_lo, seed_hi)."""
    r = rng.to(device=idx.device, dtype=torch.int64)
    c0, _, _, _ = philox4x32(
        idx & _U32,
        (idx >> 32) & _U32,
        (r[1] & _U32).expand_as(idx),
        ((r[1] >> 32) & _U32).expand_as(idx),
        r[0] & _U32,
        (r[0] >> 32) & _U32,
    )
    return (c0 >> 8).to(torch.float32) * (1.0 / 16777216.0)


def dropout_keep(rng: Tensor, num_edges: int, heads: int, p: float, device: Any) -> Tensor:
    """The attention-dropout scale ``[E, H]`` of one call: ``1 / (1 - p)``
    where kept (``u >= p``), 0 where dropped; edge ``e`` (CSR order) and
    head ``h`` draw counter ``e * H + h``."""
    idx = torch.arange(num_edges * heads, device=device, dtype=torch.int64)
    keep = philox_uniform(rng, idx) >= p
    return (keep.to(torch.float32) / (1.0 - p)).view(num_edges, heads)


def new_rng(device: Any) -> Tensor:
    """A fresh ``[seed, offset]`` (int64, on ``device``) drawn from torch's
    generator of that device: dropout is reproducible under
    ``torch.manual_seed`` and never synchronises the host."""
    return torch.randint(-(2**62), 2**62, (2,), device=device, dtype=torch.int64)


# ---------------------------------------------------------------------------
# References (CPU implementation and test oracle; E x H x C memory)


def _leaky(z: Tensor, slope: float) -> Tensor:
    return F.leaky_relu(z, slope) if slope != 1.0 else z


def _softmax_parts(rowptr: Tensor, s: Tensor, num_rows: int) -> Tuple[Tensor, Tensor, Tensor]:
    """(row of every edge, per-row maximum, per-row sum of exp) of logits ``s [E, H]``."""
    row = _rows(rowptr, s.size(0))
    H = s.size(1)
    m = torch.full((num_rows, H), float('-inf'), dtype=s.dtype, device=s.device)
    m = m.scatter_reduce(0, row.unsqueeze(1).expand(-1, H), s.detach(), 'amax')
    mz = m.masked_fill(torch.isinf(m), 0.0)
    p = torch.exp(s - mz.index_select(0, row))
    l = torch.zeros_like(m).index_add(0, row, p)
    return row, mz, l


def _lse(m: Tensor, l: Tensor) -> Tensor:
    """``m + log l`` in fp64 (``-inf`` where ``l = 0``): the backward's
    ``exp(s - lse)`` is then as exact as ``exp(s - m) / l``; an fp32 ``lse``
    would round ``m`` away with it."""
    m, ll = m.double(), torch.log(l).double()
    return torch.where(l > 0, m + ll, torch.full_like(ll, float('-inf')))


def gat_logits(
    rowptr: Tensor,
    col: Tensor,
    a_src: Optional[Tensor],
    a_dst: Optional[Tensor],
    score: Optional[Tensor],
    negative_slope: float,
    heads: int,
    acc: torch.dtype,
) -> Tensor:
    """GAT's per-edge logits ``[E, H]`` (CSR order), in ``acc``."""
    E = col.numel()
    z = torch.zeros(E, heads, dtype=acc, device=col.device)
    if a_src is not None:
        z = z + a_src.to(acc).index_select(0, col.long())
    if a_dst is not None:
        z = z + a_dst.to(acc).index_select(0, _rows(rowptr, E))
    if score is not None:
        z = z + score.to(acc)
    return _leaky(z, negative_slope)


def gatv2_logits(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    x_r: Tensor,
    att: Tensor,
    edge: Optional[Tensor],
    negative_slope: float,
    acc: torch.dtype,
) -> Tensor:
    """GATv2's per-edge logits ``[E, H]`` (CSR order), in ``acc`` (E x H x C memory)."""
    E = col.numel()
    z = x.to(acc).index_select(0, col.long()) + x_r.to(acc).index_select(0, _rows(rowptr, E))
    if edge is not None:
        z = z + edge.to(acc)
    return (F.leaky_relu(z, negative_slope) * att.to(acc)).sum(-1)


def _attend(
    rowptr: Tensor, col: Tensor, x: Tensor, s: Tensor, dropout: float, rng: Optional[Tensor]
) -> Tuple[Tensor, Tensor]:
    """Softmax of logits ``s`` per row, dropout, aggregation of ``x``."""
    acc = s.dtype
    R = rowptr.numel() - 1
    row, m, l = _softmax_parts(rowptr, s, R)
    alpha = torch.exp(s - m.index_select(0, row)) / l.index_select(0, row)
    if dropout > 0:
        alpha = alpha * dropout_keep(rng, s.size(0), s.size(1), dropout, s.device).to(acc)
    msg = alpha.unsqueeze(-1) * x.to(acc).index_select(0, col.long())
    out = torch.zeros(R, x.size(1), x.size(2), dtype=acc, device=x.device).index_add(0, row, msg)
    return out.to(x.dtype), _lse(m, l)


def gat_reference(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    a_src: Optional[Tensor],
    a_dst: Optional[Tensor],
    score: Optional[Tensor],
    negative_slope: float,
    dropout: float,
    rng: Optional[Tensor],
) -> Tuple[Tensor, Tensor]:
    """``attn_gat`` in PyTorch (module doc): (out ``[R, H, C]``, lse ``[R, H]``)."""
    acc = acc_dtype(x.dtype)
    _, col, score = live_edges(rowptr, col, score)
    s = gat_logits(rowptr, col, a_src, a_dst, score, negative_slope, x.size(1), acc)
    return _attend(rowptr, col, x, s, dropout, rng)


def gatv2_reference(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    x_r: Tensor,
    att: Tensor,
    edge: Optional[Tensor],
    negative_slope: float,
    dropout: float,
    rng: Optional[Tensor],
) -> Tuple[Tensor, Tensor]:
    """``attn_gatv2`` in PyTorch (module doc): (out ``[R, H, C]``, lse ``[R, H]``)."""
    acc = acc_dtype(x.dtype)
    _, col, edge = live_edges(rowptr, col, edge)
    s = gatv2_logits(rowptr, col, x, x_r, att, edge, negative_slope, acc)
    return _attend(rowptr, col, x, s, dropout, rng)


def _probs(rowptr: Tensor, s: Tensor, lse: Tensor, dropout: float, rng: Optional[Tensor]):
    """(row, softmax ``alpha``, aggregation weight ``alpha * keep``) from saved lse."""
    row = _rows(rowptr, s.size(0))
    alpha = torch.exp((s.double() - lse.index_select(0, row)).to(s.dtype))
    w = alpha
    keep = None
    if dropout > 0:
        keep = dropout_keep(rng, s.size(0), s.size(1), dropout, s.device).to(s.dtype)
        w = alpha * keep
    return row, alpha, w, keep


def _dlogits(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    s: Tensor,
    grad: Tensor,
    lse: Tensor,
    delta: Tensor,
    dropout: float,
    rng: Optional[Tensor],
):
    """(row, w, ds): the softmax backward per edge, ``ds = alpha (dalpha - delta_i)``."""
    acc = s.dtype
    row, alpha, w, keep = _probs(rowptr, s, lse, dropout, rng)
    dalpha = (grad.to(acc).index_select(0, row) * x.to(acc).index_select(0, col.long())).sum(-1)
    if keep is not None:
        dalpha = dalpha * keep
    ds = alpha * (dalpha - delta.to(acc).index_select(0, row))
    return row, w, ds


def _grad_x(rowptr, col, w, grad, num_src, acc):
    row = _rows(rowptr, col.numel())
    msg = w.unsqueeze(-1) * grad.to(acc).index_select(0, row)
    return torch.zeros(num_src, grad.size(1), grad.size(2), dtype=acc, device=grad.device).index_add(0, col.long(), msg)


def gat_backward_reference(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    a_src: Optional[Tensor],
    a_dst: Optional[Tensor],
    score: Optional[Tensor],
    negative_slope: float,
    dropout: float,
    rng: Optional[Tensor],
    grad: Tensor,
    lse: Tensor,
    delta: Tensor,
):
    """Gradients of ``attn_gat`` (x, a_src, a_dst, score), E x H x C memory."""
    acc = acc_dtype(x.dtype)
    H = x.size(1)
    E_all, col, score = live_edges(rowptr, col, score)
    E = col.numel()
    z = gat_logits(rowptr, col, a_src, a_dst, score, 1.0, H, acc)
    s = _leaky(z, negative_slope)
    row, w, ds = _dlogits(rowptr, col, x, s, grad, lse, delta, dropout, rng)
    dz = ds * torch.where(z > 0, torch.ones_like(z), torch.full_like(z, negative_slope))
    gx = _grad_x(rowptr, col, w, grad, x.size(0), acc).to(x.dtype)
    g_src = torch.zeros(x.size(0), H, dtype=acc, device=x.device).index_add(0, col.long(), dz)
    g_dst = torch.zeros(rowptr.numel() - 1, H, dtype=acc, device=x.device).index_add(0, row, dz)
    return gx, g_src, g_dst, pad_edges(dz if E else dz.new_zeros(0, H), E_all)


def gatv2_backward_reference(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    x_r: Tensor,
    att: Tensor,
    edge: Optional[Tensor],
    negative_slope: float,
    dropout: float,
    rng: Optional[Tensor],
    grad: Tensor,
    lse: Tensor,
    delta: Tensor,
):
    """Gradients of ``attn_gatv2`` (x, x_r, att, edge), E x H x C memory."""
    acc = acc_dtype(x.dtype)
    E_all, col, edge = live_edges(rowptr, col, edge)
    E = col.numel()
    row = _rows(rowptr, E)
    z = x.to(acc).index_select(0, col.long()) + x_r.to(acc).index_select(0, row)
    if edge is not None:
        z = z + edge.to(acc)
    lz = F.leaky_relu(z, negative_slope)
    s = (lz * att.to(acc)).sum(-1)
    row, w, ds = _dlogits(rowptr, col, x, s, grad, lse, delta, dropout, rng)
    slope = torch.where(z > 0, torch.ones_like(z), torch.full_like(z, negative_slope))
    dz = ds.unsqueeze(-1) * att.to(acc) * slope
    gx = _grad_x(rowptr, col, w, grad, x.size(0), acc).index_add(0, col.long(), dz)
    g_r = torch.zeros_like(x_r, dtype=acc).index_add(0, row, dz)
    # per-row partials summed in fp64 (as the kernel): an fp32 sum of terms that nearly cancel loses
    # several times PyG's accuracy
    g_att = torch.zeros_like(x_r, dtype=acc).index_add(0, row, ds.unsqueeze(-1) * lz).sum(0, dtype=torch.float64)
    return gx.to(x.dtype), g_r.to(x_r.dtype), g_att.to(att.dtype), pad_edges(dz.to(x.dtype), E_all)


# ---------------------------------------------------------------------------
# Ops

_GRAPH = tuple(a.split()[1] for a in GRAPH_ARGS.split(', '))
_GRAPH_TENSORS = tuple(a.split()[1] for a in GRAPH_ARGS.split(', ') if a.startswith('Tensor'))


def small_graph_chunk(g: CSRGraph) -> int:
    """Edges per unit of the attention kernels on a small graph (see
    :func:`attention_schedules`): a quarter of the mean degree as a power of
    two, in [8, 64]. Kernel-only sweeps on the H200: Cora and CiteSeer are
    fastest at 8-16, Tolokers (mean degree 89) at 32; shorter units cost
    more heavy-row merging."""
    mean = g.num_edges / max(1, g.num_rows)
    return int(min(64, max(8, 1 << max(0, math.ceil(math.log2(max(1.0, mean / 4)))))))


def attention_schedules(g: CSRGraph) -> Tuple[Schedule, Schedule]:
    """(forward, transpose) unit schedules of the attention kernels.

    The fused kernels walk a unit with one group of lanes whose online
    softmax serialises its edges; unlike the SpMM they have no cooperative
    mode (a whole warp per unit), so on a graph small enough for that mode
    (under :func:`~pyg_tc.formats.csr.coop_units` units) a long row is the tail of the launch (Cora's
    170-edge row: 58 us for the forward, 12 us for the whole SpMM). There the
    rows are cut into units of :func:`small_graph_chunk` edges (heavy rows
    merged by the second pass; Cora: 7.7 + 3 us), memoised on the graph;
    larger graphs use the graph's own schedule, and so do graphs of static
    shapes (:mod:`~pyg_tc.formats.padding`'s padded and trimmed graphs: their
    schedules split heavy rows with array sizes fixed by the bucket, and a
    new schedule would read the degrees on the host)."""
    chunk = small_graph_chunk(g)
    if g.chunk <= chunk or g.static_shapes or g.num_edges == 0 or g.sched.units.size(0) >= coop_units(g.rowptr.device):
        return g.sched, g.t_sched
    return g.cache.memo(
        ('attn_schedules', chunk), lambda: (build_schedule(g.rowptr, chunk), build_schedule(g.t_rowptr, chunk))
    )


def _graph_args(g: CSRGraph) -> tuple:
    s, ts = attention_schedules(g)
    return (
        g.rowptr,
        g.col,
        s.units,
        s.heavy_rows,
        s.heavy_ptr,
        s.num_slots,
        g.t_rowptr,
        g.t_col,
        g.t_perm,
        ts.units,
        ts.heavy_rows,
        ts.heavy_ptr,
        ts.num_slots,
    )


def _fake_attend(a: Any) -> Tuple[Tensor, Tensor]:
    R = a.rowptr.size(0) - 1
    return (a.x.new_empty(R, a.x.size(1), a.x.size(2)), a.x.new_empty(R, a.x.size(1), dtype=torch.float64))


def _row_dots_reference(a: Tensor, b: Tensor) -> Tensor:
    """``[N, H]``: ``<a[n, h], b[n, h]>`` in the accumulation dtype (fp32, fp64 for fp64)."""
    acc = acc_dtype(a.dtype)
    return (a.to(acc) * b.to(acc)).sum(-1)


row_dots = Op(
    'row_dots(Tensor a, Tensor b) -> Tensor',
    reference=_row_dots_reference,
    fake=lambda a: a.a.new_empty(a.a.shape[:2], dtype=acc_dtype(a.a.dtype)),
)


def _delta(grad: Tensor, out: Tensor, grad_lse: Optional[Tensor]) -> Tensor:
    """``delta_i = <grad_i, out_i> - grad_lse_i`` per row and head (fp32; one
    read of each on CUDA, no fp32 copy of half operands)."""
    acc = acc_dtype(out.dtype)
    if grad.is_cuda and out.dtype != torch.float64 and grad.dtype == out.dtype:
        d = row_dots(grad.contiguous(), out.contiguous())
    else:
        d = _row_dots_reference(grad, out)
    return d - grad_lse.to(acc) if grad_lse is not None else d


def _g(a: Any) -> tuple:
    return tuple(getattr(a, n) for n in _GRAPH)


def _gat_backward(a: Any, needs: dict, grad: Optional[Tensor], grad_lse: Optional[Tensor]) -> dict:
    if grad is None:
        grad = torch.zeros_like(a.out)
    grad = _aligned(grad)
    delta = _delta(grad, a.out, grad_lse)
    gx, g_src, g_dst, g_score = attn_gat_backward(
        *_g(a),
        a.x,
        a.a_src,
        a.a_dst,
        a.score,
        a.negative_slope,
        a.dropout,
        a.rng,
        grad,
        a.lse,
        delta,
        needs['a_dst'] or needs['score'],
    )
    return {
        'x': gx if needs['x'] else None,
        'a_src': g_src if needs['a_src'] and a.a_src is not None else None,
        'a_dst': g_dst if needs['a_dst'] and a.a_dst is not None else None,
        'score': g_score if needs['score'] and a.score is not None else None,
    }


def _gat_bwd_reference(rowptr, col, x, a_src, a_dst, score, negative_slope, dropout, rng, grad, lse, delta, need_row):
    gx, g_src, g_dst, g_score = gat_backward_reference(
        rowptr, col, x, a_src, a_dst, score, negative_slope, dropout, rng, grad, lse, delta
    )
    return _gat_grad_shapes(
        gx,
        g_src if a_src is not None else None,
        g_dst if need_row and a_dst is not None else None,
        g_score if need_row and score is not None else None,
    )


def _gat_grad_shapes(gx, g_src, g_dst, g_score):
    """The backward op's outputs: a gradient that is not computed is ``[0, H]``."""
    H, acc = gx.size(1), acc_dtype(gx.dtype)
    # a fresh tensor per output: outputs of an op must not alias each other
    return (gx,) + tuple(gx.new_zeros(0, H, dtype=acc) if t is None else t.to(acc) for t in (g_src, g_dst, g_score))


def _gat_bwd_fake(a):
    R, E = a.rowptr.size(0) - 1, a.col.size(0)
    Ns, H = a.x.size(0), a.x.size(1)
    f = a.x.new_empty(0, dtype=acc_dtype(a.x.dtype))
    return (
        torch.empty_like(a.x),
        f.new_empty(Ns if a.a_src is not None else 0, H),
        f.new_empty(R if a.need_row and a.a_dst is not None else 0, H),
        f.new_empty(E if a.need_row and a.score is not None else 0, H),
    )


_OUT_SAVE = _GRAPH_TENSORS + ('x', 'a_src', 'a_dst', 'score', 'rng', 'out', 'lse')

attn_gat = Op(
    f'attn_gat({GRAPH_ARGS}, Tensor x, Tensor? a_src, Tensor? a_dst, Tensor? score, '
    'float negative_slope, float dropout, Tensor? rng) -> (Tensor out, Tensor lse)',
    reference=gat_reference,
    fake=_fake_attend,
    backward=_gat_backward,
    save=_OUT_SAVE,
    materialize_grads=False,
)

attn_gat_backward = Op(
    f'attn_gat_backward({GRAPH_ARGS}, Tensor x, Tensor? a_src, Tensor? a_dst, Tensor? score, '
    'float negative_slope, float dropout, Tensor? rng, Tensor grad, Tensor lse, Tensor delta, '
    'bool need_row) -> (Tensor g_x, Tensor g_src, Tensor g_dst, Tensor g_score)',
    reference=_gat_bwd_reference,
    fake=_gat_bwd_fake,
)


def _gatv2_backward(a: Any, needs: dict, grad: Optional[Tensor], grad_lse: Optional[Tensor]) -> dict:
    if grad is None:
        grad = torch.zeros_like(a.out)
    grad = _aligned(grad)
    delta = _delta(grad, a.out, grad_lse)
    gx, g_r, g_att, g_edge = attn_gatv2_backward(
        *_g(a),
        a.x,
        a.x_r,
        a.att,
        a.edge,
        a.negative_slope,
        a.dropout,
        a.rng,
        grad,
        a.lse,
        delta,
        needs['edge'] and a.edge is not None,
    )
    return {
        'x': gx if needs['x'] else None,
        'x_r': g_r if needs['x_r'] else None,
        'att': g_att if needs['att'] else None,
        'edge': g_edge if needs['edge'] and a.edge is not None else None,
    }


def _gatv2_bwd_reference(rowptr, col, x, x_r, att, edge, negative_slope, dropout, rng, grad, lse, delta, need_edge):
    gx, g_r, g_att, g_edge = gatv2_backward_reference(
        rowptr, col, x, x_r, att, edge, negative_slope, dropout, rng, grad, lse, delta
    )
    if not (need_edge and edge is not None):
        g_edge = x.new_zeros(0, x.size(1), x.size(2))
    return gx, g_r, g_att, g_edge


attn_gatv2 = Op(
    f'attn_gatv2({GRAPH_ARGS}, Tensor x, Tensor x_r, Tensor att, Tensor? edge, '
    'float negative_slope, float dropout, Tensor? rng) -> (Tensor out, Tensor lse)',
    reference=gatv2_reference,
    fake=_fake_attend,
    backward=_gatv2_backward,
    save=_GRAPH_TENSORS + ('x', 'x_r', 'att', 'edge', 'rng', 'out', 'lse'),
    materialize_grads=False,
)

attn_gatv2_backward = Op(
    f'attn_gatv2_backward({GRAPH_ARGS}, Tensor x, Tensor x_r, Tensor att, Tensor? edge, '
    'float negative_slope, float dropout, Tensor? rng, Tensor grad, Tensor lse, Tensor delta, '
    'bool need_edge) -> (Tensor g_x, Tensor g_r, Tensor g_att, Tensor g_edge)',
    reference=_gatv2_bwd_reference,
    fake=lambda a: (
        torch.empty_like(a.x),
        torch.empty_like(a.x_r),
        torch.empty_like(a.att),
        a.x.new_empty(a.col.size(0) if a.need_edge and a.edge is not None else 0, a.x.size(1), a.x.size(2)),
    ),
)


def _att_logits_reference(x: Tensor, att: Tensor) -> Tensor:
    """``[k, N, H]``: ``(x * att[j]).sum(-1)`` per attention vector, in fp32."""
    _check_att_logits(x, att)
    return (x.float().unsqueeze(0) * att.unsqueeze(1)).sum(-1)


def _att_logits_bwd_reference(x: Tensor, att: Tensor, grad: Tensor) -> Tuple[Tensor, Tensor]:
    gx = (grad.unsqueeze(-1) * att.unsqueeze(1)).sum(0).to(x.dtype)
    return gx, (grad.unsqueeze(-1) * x.float().unsqueeze(0)).sum(1)


def _check_att_logits(x: Tensor, att: Tensor) -> None:
    if x.dim() != 3 or x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(
            f'pyg_tc: att_logits: x must be a float32 / float16 / bfloat16 [N, H, C] tensor, got '
            f'{x.dtype} {tuple(x.shape)}'
        )
    if att.dtype != torch.float32 or att.dim() != 3 or att.size(0) not in (1, 2) or att.shape[1:] != x.shape[1:]:
        raise ValueError(
            f'pyg_tc: att_logits: att must be fp32 [k, H, C] (k = 1 or 2) matching x, got '
            f'{att.dtype} {tuple(att.shape)}'
        )


def _att_logits_backward(a: Any, needs: dict, grad: Tensor) -> dict:
    gx, gatt = att_logits_backward(a.x, a.att, grad.float().contiguous())
    return {'x': gx if needs['x'] else None, 'att': gatt if needs['att'] else None}


att_logits_op = Op(
    'att_logits(Tensor x, Tensor att) -> Tensor',
    reference=_att_logits_reference,
    fake=lambda a: a.x.new_empty((a.att.size(0), a.x.size(0), a.x.size(1)), dtype=torch.float32),
    backward=_att_logits_backward,
    save=('x', 'att'),
)

att_logits_backward = Op(
    'att_logits_backward(Tensor x, Tensor att, Tensor grad) -> (Tensor g_x, Tensor g_att)',
    reference=_att_logits_bwd_reference,
    fake=lambda a: (torch.empty_like(a.x), torch.empty_like(a.att)),
)


def att_logits(x: Tensor, att: Tensor) -> Tensor:
    """GAT's per-node logit terms of half (or fp32) features: ``out[j] =
    (x * att[j]).sum(-1)``, the products and sums in fp32 (PyG's
    expression under autocast) in one read of ``x``, without its
    ``[N, H, C]`` fp32 temporary; differentiable in ``x`` and ``att``
    (``x``'s gradient rounded once to its dtype, ``att``'s summed in fp32).

    Shapes:
        - **input:** x :math:`(N, H, C)` (fp32 / fp16 / bf16), att
          :math:`(k, H, C)` fp32 (k = 1 or 2)
        - **output:** :math:`(k, N, H)` fp32
    """
    return att_logits_op(x.contiguous(), att.contiguous())


# ---------------------------------------------------------------------------
# Front-ends (checks, dispatch)


def _check_float(t: Optional[Tensor], name: str, shape: tuple, device: Any) -> Optional[Tensor]:
    if t is None:
        return None
    if not isinstance(t, Tensor) or not t.is_floating_point():
        raise TypeError(f'pyg_tc: {name} must be a floating-point tensor')
    if tuple(t.shape) != shape:
        raise ValueError(f'pyg_tc: {name} must have shape {shape}, got {tuple(t.shape)}')
    if t.device != device:
        raise ValueError(f'pyg_tc: {name} is on {t.device} but the graph is on {device}')
    return t


def _check_x(g: CSRGraph, x: Tensor, name: str = 'x') -> None:
    if not isinstance(x, Tensor) or x.dim() != 3:
        raise ValueError(f'pyg_tc: {name} must be [num_nodes, heads, channels]')
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise TypeError(f'pyg_tc: {name} must be float16, bfloat16, float32 or float64, got {x.dtype}')
    g.check_compatible(x, name)


def _check_dropout(dropout: float, rng: Optional[Tensor], device: Any) -> Optional[Tensor]:
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f'pyg_tc: dropout must lie in [0, 1), got {dropout}')
    if dropout == 0.0:
        return None
    if rng is None:
        return new_rng(device)
    if not isinstance(rng, Tensor) or rng.dtype != torch.int64 or rng.numel() != 2:
        raise ValueError('pyg_tc: rng must be an int64 tensor [seed, offset]')
    return rng.to(device)


def check_gat(
    g: CSRGraph,
    x: Tensor,
    a_src: Optional[Tensor] = None,
    a_dst: Optional[Tensor] = None,
    score: Optional[Tensor] = None,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    rng: Optional[Tensor] = None,
) -> dict:
    """Validate a GAT attention call (shapes ``x [Ns, H, C]``, ``a_src [Ns, H]``,
    ``a_dst [Nd, H]``, ``score [E, H]``); terms go to the accumulation dtype."""
    _check_x(g, x)
    H = x.size(1)
    acc = acc_dtype(x.dtype)
    a_src = _check_float(a_src, 'a_src', (g.num_cols, H), g.device)
    a_dst = _check_float(a_dst, 'a_dst', (g.num_rows, H), g.device)
    score = _check_float(score, 'score', (g.num_edges, H), g.device)
    conv = lambda t: None if t is None else t.to(acc).contiguous()
    return dict(
        x=x,
        a_src=conv(a_src),
        a_dst=conv(a_dst),
        score=conv(score),
        negative_slope=float(negative_slope),
        dropout=float(dropout),
        rng=_check_dropout(float(dropout), rng, g.device),
    )


def check_gatv2(
    g: CSRGraph,
    x: Tensor,
    x_r: Tensor,
    att: Tensor,
    edge: Optional[Tensor] = None,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    rng: Optional[Tensor] = None,
) -> dict:
    """Validate a GATv2 attention call (``x [Ns, H, C]``, ``x_r [Nd, H, C]``,
    ``att [H, C]``, ``edge [E, H, C]``; ``x_r`` and ``edge`` in ``x``'s dtype)."""
    _check_x(g, x)
    _, H, C = x.shape
    x_r = _check_float(x_r, 'x_r', (g.num_rows, H, C), g.device)
    att = _check_float(att, 'att', (H, C), g.device)
    edge = _check_float(edge, 'edge', (g.num_edges, H, C), g.device)
    if x_r.dtype != x.dtype or (edge is not None and edge.dtype != x.dtype):
        raise TypeError('pyg_tc: x_r and edge must have the dtype of x')
    return dict(
        x=x,
        x_r=x_r.contiguous(),
        att=att.to(acc_dtype(x.dtype)).contiguous(),
        edge=None if edge is None else edge.contiguous(),
        negative_slope=float(negative_slope),
        dropout=float(dropout),
        rng=_check_dropout(float(dropout), rng, g.device),
    )


dispatch.family('attention', check_gat)
dispatch.family('attention_v2', check_gatv2)


def _aligned(t: Optional[Tensor]) -> Optional[Tensor]:
    """``t`` contiguous, and copied when its data is not 16-byte aligned (a
    contiguous view at an odd storage offset): the kernels' vector path
    needs aligned rows, and heads over 128 channels have no scalar path."""
    if t is None:
        return None
    t = t.contiguous()
    if t.is_cuda and not torch.compiler.is_compiling():
        try:
            misaligned = t.data_ptr() % 16 != 0
        except RuntimeError:  # no storage (a fake or functional tensor while tracing)
            misaligned = False
        if misaligned:
            t = t.clone()
    return t


def _fits(x: Tensor) -> bool:
    """Whether the fused kernels take heads of ``x``'s width: 1 to 2048 bytes,
    and at most 128 channels unless a multiple of the 16-byte vector."""
    C, b = x.size(2), x.element_size()
    return 0 < C and C * b <= ATTN_MAX_HEAD_BYTES and (C <= 128 or (C * b) % 16 == 0)


# The fused kernels' limit is declared (``fits``): dispatch.choose runs the
# reference for CUDA heads they do not take.
@dispatch.register('attention', 'csr', reduces=('sum',), fits=_fits)
def _gat_csr(g: CSRGraph, x, a_src, a_dst, score, negative_slope, dropout, rng):
    return attn_gat(
        *_graph_args(g),
        _aligned(x),
        a_src,
        a_dst,
        score,
        negative_slope,
        dropout,
        rng,
        differentiable=(x, a_src, a_dst, score),
    )


@dispatch.register('attention', 'reference', reduces=('sum',))
def _gat_reference(g: CSRGraph, x, a_src, a_dst, score, negative_slope, dropout, rng):
    return gat_reference(g.rowptr, g.col, x, a_src, a_dst, score, negative_slope, dropout, rng)


@dispatch.register('attention_v2', 'csr', reduces=('sum',), fits=_fits)
def _gatv2_csr(g: CSRGraph, x, x_r, att, edge, negative_slope, dropout, rng):
    return attn_gatv2(
        *_graph_args(g),
        _aligned(x),
        _aligned(x_r),
        att,
        _aligned(edge),
        negative_slope,
        dropout,
        rng,
        differentiable=(x, x_r, att, edge),
    )


@dispatch.register('attention_v2', 'reference', reduces=('sum',))
def _gatv2_reference(g: CSRGraph, x, x_r, att, edge, negative_slope, dropout, rng):
    return gatv2_reference(g.rowptr, g.col, x, x_r, att, edge, negative_slope, dropout, rng)


def gat_attention(
    g: CSRGraph,
    x: Tensor,
    a_src: Optional[Tensor] = None,
    a_dst: Optional[Tensor] = None,
    score: Optional[Tensor] = None,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    rng: Optional[Tensor] = None,
    backend: str = 'auto',
) -> Tuple[Tensor, Tensor]:
    """Fused GAT attention on ``g`` (rows = targets; module doc):
    ``out[i, h] = sum_e softmax_e(leaky_relu(a_src[j, h] + a_dst[i, h] +
    score[e, h])) x[j, h]``, with attention dropout ``dropout`` drawn from
    ``rng`` (``[seed, offset]`` int64; a fresh one from torch's generator if
    None). ``x [Ns, H, C]`` (fp16 / bf16 / fp32 / fp64), ``a_src [Ns, H]``,
    ``a_dst [Nd, H]``, ``score [E, H]`` in CSR order (each optional).
    Returns ``(out [Nd, H, C], lse [Nd, H] fp64)``; differentiable in ``x``,
    ``a_src``, ``a_dst``, ``score`` (and through ``lse``). A row without
    edges gives 0 (``lse`` -inf).

    Args:
        g (pyg_tc.formats.CSRGraph): the graph (rows = targets).
        x (torch.Tensor): messages per source node and head.
        a_src (torch.Tensor, optional): per-source logit terms.
        a_dst (torch.Tensor, optional): per-target logit terms.
        score (torch.Tensor, optional): per-edge logit terms, CSR order.
        negative_slope (float, optional): LeakyReLU's slope.
        dropout (float, optional): attention dropout probability.
        rng (torch.Tensor, optional): the dropout's ``[seed, offset]``.
        backend (str, optional): as in :func:`~pyg_tc.ops.spmm`.

    Shapes:
        - **input:** x :math:`(N_{src}, H, C)`, a_src :math:`(N_{src}, H)`,
          a_dst :math:`(N_{dst}, H)`, score :math:`(E, H)`
        - **output:** out :math:`(N_{dst}, H, C)`, lse :math:`(N_{dst}, H)`
    """
    return dispatch.run(
        'attention', g, x, a_src, a_dst, score, negative_slope, dropout, rng, backend=backend, strict=True
    )


def gatv2_attention(
    g: CSRGraph,
    x: Tensor,
    x_r: Tensor,
    att: Tensor,
    edge: Optional[Tensor] = None,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    rng: Optional[Tensor] = None,
    backend: str = 'auto',
) -> Tuple[Tensor, Tensor]:
    """Fused GATv2 attention on ``g`` (module doc): logits
    ``sum_c att[h, c] leaky_relu(x[j, h, c] + x_r[i, h, c] + edge[e, h, c])``,
    messages ``x[j]``. Returns ``(out [Nd, H, C], lse [Nd, H] fp64)``;
    differentiable in ``x``, ``x_r``, ``att``, ``edge``.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph (rows = targets).
        x (torch.Tensor): source features per head (also the messages).
        x_r (torch.Tensor): target features per head.
        att (torch.Tensor): the attention vector per head.
        edge (torch.Tensor, optional): edge features per head, CSR order.
        negative_slope, dropout, rng, backend: as in :func:`gat_attention`.

    Shapes:
        - **input:** x :math:`(N_{src}, H, C)`, x_r :math:`(N_{dst}, H, C)`,
          att :math:`(H, C)`, edge :math:`(E, H, C)`
        - **output:** out :math:`(N_{dst}, H, C)`, lse :math:`(N_{dst}, H)`
    """
    return dispatch.run(
        'attention_v2', g, x, x_r, att, edge, negative_slope, dropout, rng, backend=backend, strict=True
    )


def attention_weights(
    g: CSRGraph, logits: Tensor, lse: Tensor, dropout: float = 0.0, rng: Optional[Tensor] = None
) -> Tensor:
    """The attention coefficients ``[E, H]`` (CSR order) of a fused call from
    its logits and ``lse``: ``exp(logits - lse[row])``, times the call's
    dropout scale (same ``rng``) as PyG returns them. Differentiable.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph of the call.
        logits (torch.Tensor): the call's per-edge logits, CSR order.
        lse (torch.Tensor): the call's log-sum-exp per row and head.
        dropout (float, optional): the call's dropout probability.
        rng (torch.Tensor, optional): the call's ``rng``.

    Shapes:
        - **input:** logits :math:`(E, H)`, lse :math:`(N_{dst}, H)`
        - **output:** :math:`(E, H)`
    """
    alpha = torch.exp((logits.double() - g.per_edge(lse.double())).to(logits.dtype))
    if g.padded:  # padding slots (their row's lse is -inf): 0
        live = torch.arange(alpha.size(0), device=alpha.device) < g.rowptr[-1]
        alpha = torch.where(live.unsqueeze(1), alpha, torch.zeros((), dtype=alpha.dtype, device=alpha.device))
    if dropout > 0:
        alpha = alpha * dropout_keep(rng, logits.size(0), logits.size(1), dropout, logits.device).to(alpha.dtype)
    return alpha


# ---------------------------------------------------------------------------
# Edge softmax (unfused building block)


def edge_softmax_reference(rowptr: Tensor, score: Tensor) -> Tensor:
    """Softmax of ``score [E, H]`` over each CSR row (fp32 / fp64 math)."""
    E, _, score = live_edges(rowptr, score, score)
    s = score.to(acc_dtype(score.dtype))
    row, m, l = _softmax_parts(rowptr, s, rowptr.numel() - 1)
    return pad_edges((torch.exp(s - m.index_select(0, row)) / l.index_select(0, row)).to(score.dtype), E)


def _edge_softmax_backward(a: Any, needs: dict, grad: Tensor) -> dict:
    acc = acc_dtype(a.out.dtype)
    y = a.out.to(acc)
    gy = grad.to(acc) * y
    row = _rows(a.rowptr, y.size(0))
    tot = torch.zeros(a.rowptr.numel() - 1, y.size(1), dtype=acc, device=y.device).index_add(0, row, gy)
    return {'score': (gy - y * tot.index_select(0, row)).to(a.out.dtype)}


edge_softmax_op = Op(
    'edge_softmax(Tensor rowptr, Tensor score) -> Tensor',
    reference=edge_softmax_reference,
    fake=lambda a: torch.empty_like(a.score),
    backward=_edge_softmax_backward,
    save=('rowptr', 'out'),
    reference_only=True,
)


def edge_softmax(g: CSRGraph, score: Tensor) -> Tensor:
    """Softmax of per-edge scores (``[E]`` or ``[E, H]``, CSR order) over each
    target row (the unfused building block; :func:`gat_attention` fuses it
    with the scores and the aggregation).

    Args:
        g (pyg_tc.formats.CSRGraph): the graph (rows = targets).
        score (torch.Tensor): per-edge scores, CSR order.

    Shapes:
        - **input:** score :math:`(E)` or :math:`(E, H)`
        - **output:** like ``score``
    """
    if not isinstance(score, Tensor) or score.dim() not in (1, 2) or score.size(0) != g.num_edges:
        raise ValueError(f'pyg_tc: score must be [{g.num_edges}] or [{g.num_edges}, H]')
    s2 = score.unsqueeze(1) if score.dim() == 1 else score  # (view(E, -1) fails for E = 0)
    out = edge_softmax_op(g.rowptr, s2.contiguous(), differentiable=(score,))
    return out.view_as(score)
