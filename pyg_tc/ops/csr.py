"""The CSR engine: SpMM and SDDMM over a :class:`~pyg_tc.formats.CSRGraph`.

* ``spmm_csr``: ``out[i] = reduce_{e in row i} value[e] * x[col[e]] (+ diag[i] x[i])``
  (sum / mean / max);
* ``sddmm_csr``: ``out[e] = <a[row(e)], b[col[e]]>`` for every edge, CSR order.

Each op takes the forward CSR (rows = targets) with its unit schedule, then
the transpose (``t_*``) its backward needs; the two ops are each other's
backward. Kernels: ``kernels/csr/``. This module also holds the argument
checks of the ``'spmm'`` and ``'sddmm'`` dispatch families (every backend)
and the references (the kernel's CPU emulation: :mod:`pyg_tc.testing`).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from .._library import T_GRAPH_ARGS, Op
from ..formats.cbsr import CBSR
from ..formats.csr import CSRGraph, inverse_perm
from . import dispatch
from .dispatch import REDUCE

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype of the kernels and references: fp64 for fp64, else fp32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ---------------------------------------------------------------------------
# Reference (CPU implementation and test oracle)


def _rows(rowptr: Tensor, num_edges: int) -> Tensor:
    """Row of every CSR position (int64), with the edge count given so the
    references and autograd formulas trace under ``torch.compile``. The
    padding slots of a padded graph (past ``rowptr[-1]``,
    :func:`~pyg_tc.formats.padding.pad`) get the last row."""
    deg = (rowptr[1:] - rowptr[:-1]).long()
    if deg.numel():
        deg = torch.cat([deg[:-1], deg[-1:] + (num_edges - rowptr[-1:].long())])
    return torch.repeat_interleave(torch.arange(deg.numel(), device=rowptr.device), deg, output_size=num_edges)


def live_edges(rowptr: Tensor, col: Tensor, *per_edge: Optional[Tensor]) -> tuple:
    """``(E, col, *per_edge)`` cut to the edges inside the rows: all ``E``
    of them, except on a padded graph, whose padding slots past
    ``rowptr[-1]`` no op reads. For the references (it reads ``rowptr[-1]``
    from the device); their per-edge outputs get the slots back as zeros
    (:func:`pad_edges`)."""
    E = col.size(0)
    n = int(rowptr[-1]) if rowptr.numel() > 1 else 0
    if n == E:
        return (E, col) + per_edge
    return (E, col[:n]) + tuple(None if t is None else t[:n] for t in per_edge)


def pad_edges(t: Tensor, num_edges: int) -> Tensor:
    """A per-edge result of the live edges (:func:`live_edges`) with zeros
    for the padding slots, up to ``num_edges``."""
    if t.size(0) == num_edges:
        return t
    return torch.cat([t, t.new_zeros((num_edges - t.size(0),) + tuple(t.shape[1:]))])


def spmm_reference(
    rowptr: Tensor, col: Tensor, value: Optional[Tensor], x: Tensor, diag: Optional[Tensor] = None, reduce: str = 'sum'
) -> Tensor:
    """out[i] = reduce_{e in row i} value[e] * x[col[e]] (+ diag[i] * x[i]),
    accumulated in fp32 (fp64 for fp64 inputs); empty rows give 0; the
    padding slots of a padded graph are not read.

    Args:
        rowptr (torch.Tensor): CSR row pointers (rows = targets).
        col (torch.Tensor): source of every edge.
        value (torch.Tensor, optional): edge values.
        x (torch.Tensor): source features.
        diag (torch.Tensor, optional): the self term, per node or one.
        reduce (str, optional): ``'sum'``, ``'mean'`` or ``'max'``.

    Shapes:
        - **input:** rowptr :math:`(N_{dst} + 1)`, col and value :math:`(E)`,
          x :math:`(N_{src}, F)`
        - **output:** :math:`(N_{dst}, F)` in ``x``'s dtype
    """
    R = rowptr.numel() - 1
    F = x.size(1)
    acc = acc_dtype(x.dtype)
    _, col, value = live_edges(rowptr, col, value)
    deg = (rowptr[1:] - rowptr[:-1]).long()
    row = torch.repeat_interleave(torch.arange(R, device=x.device), deg, output_size=col.numel())
    msg = x.index_select(0, col.long()).to(acc)
    if value is not None:
        msg = msg * value.to(acc).unsqueeze(1)
    out = torch.zeros(R, F, dtype=acc, device=x.device)
    if reduce == 'max':
        out = out.scatter_reduce(0, row.unsqueeze(1).expand(-1, F), msg, 'amax', include_self=False)
    else:
        out = out.index_add(0, row, msg)
        if reduce == 'mean':
            out = out / deg.clamp(min=1).unsqueeze(1).to(acc)
    if diag is not None:
        out = out + diag.to(acc).view(-1, 1) * x.to(acc)
    return out.to(x.dtype)


# ---------------------------------------------------------------------------
# Autograd


def _spmm_backward(a: Any, needs: dict, grad: Tensor) -> dict:
    grad = grad.contiguous()
    if a.reduce == 'max':
        gv, gx = _max_backward(a, grad)
        return {
            'value': gv.to(a.value.dtype) if (needs['value'] and a.value is not None) else None,
            'x': gx if needs['x'] else None,
        }
    out = {}
    gs = grad
    if a.reduce == 'mean':
        deg = a.rowptr[1:] - a.rowptr[:-1]
        gs = grad / deg.clamp(min=1).unsqueeze(1).to(grad.dtype)
    if needs['x']:
        tv = a.t_value
        if a.value is not None and tv is None:
            tv = a.value[a.t_perm.long()]
        inv = inverse_perm(a.t_perm) if torch.is_grad_enabled() else a.t_perm
        fused_diag = a.diag if a.reduce == 'sum' else None
        gx = spmm_csr(
            a.t_rowptr,
            a.t_col,
            tv,
            gs,
            a.t_units,
            a.t_heavy_rows,
            a.t_heavy_ptr,
            fused_diag,
            a.t_num_slots,
            'sum',
            a.rowptr,
            a.col,
            inv,
            a.value,
            a.units,
            a.heavy_rows,
            a.heavy_ptr,
            a.num_slots,
        )
        if a.diag is not None and a.reduce == 'mean':
            gx = gx + (a.diag.view(-1, 1) * grad.to(a.diag.dtype)).to(gx.dtype)
        out['x'] = gx
    if needs['value'] and a.value is not None:
        gv = sddmm_csr(
            a.col,
            gs,
            a.x,
            a.units,
            a.rowptr,
            a.heavy_rows,
            a.heavy_ptr,
            a.num_slots,
            a.t_rowptr,
            a.t_col,
            a.t_perm,
            a.t_units,
            a.t_heavy_rows,
            a.t_heavy_ptr,
            a.t_num_slots,
        )
        out['value'] = gv.to(a.value.dtype)
    if needs['diag'] and a.diag is not None:
        out['diag'] = diag_grad(a.diag, grad, a.x)
    return out


def diag_grad(diag: Tensor, grad: Tensor, x: Tensor) -> Tensor:
    """Gradient of a fused ``diag[i] * x[i]`` term (scalar or per node)."""
    acc = acc_dtype(x.dtype)
    gd = (grad.to(acc) * x.to(acc)).sum(1)
    return (gd.sum().view(1) if diag.numel() == 1 else gd).to(diag.dtype)


def _max_backward(a: Any, grad: Tensor):
    """Gradient of max aggregation, exactly as PyG computes it without
    torch_scatter: torch's ``zeros.scatter_reduce_(..., 'amax',
    include_self=False)``, whose backward splits the gradient evenly among the
    tied maxima and also counts the zero initial value as one more tie when the
    maximum is exactly 0 (so a row whose messages are all 0 passes on
    1/(ties+1) of its gradient). Builds E x F intermediates: max is not on the
    fast path."""
    x, value, out = a.x, a.value, a.out
    acc = acc_dtype(x.dtype)
    row = _rows(a.rowptr, a.col.numel())
    xs = x.index_select(0, a.col.long()).to(acc)
    msg = xs * value.to(acc).unsqueeze(1) if value is not None else xs
    mask = (msg.to(x.dtype) == out.index_select(0, row)).to(acc)
    cnt = (out == 0).to(acc).index_add_(0, row, mask)
    gm = mask * (grad.to(acc) / cnt.clamp(min=1)).index_select(0, row)
    gx_msg = gm * value.to(acc).unsqueeze(1) if value is not None else gm
    # Ordered segment sum over the transpose (no atomics: deterministic).
    gx = torch.segment_reduce(gx_msg.index_select(0, a.t_perm.long()), 'sum', offsets=a.t_rowptr.long(), axis=0).to(
        x.dtype
    )
    gv = (gm * xs).sum(1)
    return gv, gx


def _saved(a: Any) -> tuple:
    names = (
        'rowptr',
        'col',
        'value',
        'x',
        'units',
        'heavy_rows',
        'heavy_ptr',
        'diag',
        't_rowptr',
        't_col',
        't_perm',
        't_value',
        't_units',
        't_heavy_rows',
        't_heavy_ptr',
    )
    return names + (('out',) if a.reduce == 'max' else ())


spmm_csr = Op(
    'spmm_csr(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor units, '
    'Tensor heavy_rows, Tensor heavy_ptr, Tensor? diag, int num_slots, str reduce, '
    # the transpose pack with the transposed edge values after t_perm
    'Tensor t_rowptr, Tensor t_col, Tensor t_perm, Tensor? t_value, Tensor t_units, '
    'Tensor t_heavy_rows, Tensor t_heavy_ptr, int t_num_slots) -> Tensor',
    reference=spmm_reference,
    fake=lambda a: a.x.new_empty(a.rowptr.size(0) - 1, a.x.size(1)),
    backward=_spmm_backward,
    save=_saved,
)


# ---------------------------------------------------------------------------
# Argument checks of the 'spmm' family (every backend)


def check_features(x: Tensor, g: CSRGraph, name: str = 'x') -> None:
    """``x`` is a 2-D float tensor whose rows are ``g``'s source nodes."""
    if not isinstance(x, Tensor):
        raise TypeError(f'pyg_tc: {name} must be a tensor, got {type(x).__name__}')
    if x.dtype not in FLOATS:
        raise TypeError(f'pyg_tc: {name} must be float16, bfloat16, float32 or float64, got {x.dtype}')
    if x.dim() != 2:
        raise ValueError(f'pyg_tc: {name} must be 2-D [num_nodes, features], got shape {tuple(x.shape)}')
    g.check_compatible(x, name)


def edge_values(v: Optional[Tensor], g: CSRGraph, x: Tensor, name: str = 'edge values') -> Optional[Tensor]:
    """Edge values as one accumulation-dtype entry per edge (``[E]`` or ``[E, 1]``)."""
    if v is None:
        return None
    if not isinstance(v, Tensor) or not v.is_floating_point():
        raise TypeError(f'pyg_tc: {name} must be a floating-point tensor')
    if v.dim() == 2 and v.size(1) == 1:
        v = v.view(-1)
    if v.dim() != 1 or v.numel() != g.num_edges:
        raise ValueError(f'pyg_tc: {name} must have one entry per edge ({g.num_edges}), got shape {tuple(v.shape)}')
    if v.device != g.device:
        raise ValueError(f'pyg_tc: {name} is on {v.device} but the graph is on {g.device}')
    return v.to(acc_dtype(x.dtype))


def check_diag(diag: Any, g: CSRGraph, x: Tensor) -> Optional[Tensor]:
    """``diag`` (a number, or a tensor of 1 or ``num_rows`` entries) as a flat
    accumulation-dtype tensor; needs a square adjacency."""
    if diag is None:
        return None
    if g.num_rows != g.num_cols:
        raise ValueError('pyg_tc: diag needs a square adjacency')
    acc = acc_dtype(x.dtype)
    if not isinstance(diag, Tensor):  # a Python number: straight to the accumulation dtype
        diag = torch.tensor([float(diag)], dtype=acc, device=x.device)
    diag = diag.to(acc).reshape(-1)
    if diag.numel() not in (1, g.num_rows):
        raise ValueError(f'pyg_tc: diag must have 1 or {g.num_rows} entries, got {diag.numel()}')
    return diag


def check_spmm(
    g: CSRGraph,
    x: Any,
    value: Optional[Tensor] = None,
    reduce: str = 'sum',
    diag: Any = None,
    t_value: Optional[Tensor] = None,
) -> dict:
    """Validate and normalise an aggregation call (dense or CBSR features)."""
    if isinstance(x, CBSR):
        if reduce not in ('sum', 'add', 'mean'):
            raise ValueError(f"pyg_tc: CBSR aggregation supports 'sum' and 'mean', got {reduce!r}")
        check_features(x.values, g, 'x.values')
        if x.indices.device != x.values.device or x.indices.shape != x.values.shape:
            raise ValueError('pyg_tc: CBSR indices must match the values in shape and device')
        feats = x.values
    else:
        if reduce not in REDUCE:
            raise ValueError(f"pyg_tc: reduce must be one of 'sum', 'mean', 'max', got {reduce!r}")
        check_features(x, g)
        feats = x
    reduce = REDUCE[reduce]
    value = edge_values(value, g, feats)
    diag = check_diag(diag, g, feats)
    if diag is not None and reduce == 'max':
        raise ValueError("pyg_tc: diag is not supported with reduce='max'")
    if diag is not None and reduce == 'mean' and isinstance(x, CBSR):
        raise ValueError("pyg_tc: diag is supported with reduce='sum' only for CBSR input")
    return dict(x=x, value=value, reduce=reduce, diag=diag, t_value=t_value)


dispatch.family('spmm', check_spmm)


# ---------------------------------------------------------------------------
# Implementations


@dispatch.register('spmm', 'csr')
def _spmm_csr(
    g: CSRGraph, x: Tensor, value: Optional[Tensor], reduce: str, diag: Optional[Tensor], t_value: Optional[Tensor]
) -> Tensor:
    s, ts = g.sched, g.t_sched
    return spmm_csr(
        g.rowptr,
        g.col,
        value,
        x.contiguous(),
        s.units,
        s.heavy_rows,
        s.heavy_ptr,
        diag,
        s.num_slots,
        reduce,
        g.t_rowptr,
        g.t_col,
        g.t_perm,
        t_value,
        ts.units,
        ts.heavy_rows,
        ts.heavy_ptr,
        ts.num_slots,
        differentiable=(x, value, diag),
    )


@dispatch.register('spmm', 'reference')
def _spmm_reference(
    g: CSRGraph, x: Tensor, value: Optional[Tensor], reduce: str, diag: Optional[Tensor], t_value: Optional[Tensor]
) -> Tensor:
    return spmm_reference(g.rowptr, g.col, value, x, diag, reduce)


def spmm_graph(
    g: CSRGraph,
    x: Tensor,
    value: Optional[Tensor] = None,
    reduce: str = 'sum',
    diag: Optional[Tensor] = None,
    t_value: Optional[Tensor] = None,
) -> Tensor:
    """SpMM on a :class:`~pyg_tc.formats.CSRGraph` with the CSR kernel (the reference where
    no kernel applies), edge values already in CSR order.

    ``out[i] = reduce_{e: i <- j} value[e] * x[j]  (+ diag[i] * x[i])``.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph (rows = targets).
        x (torch.Tensor): dense source features.
        value (torch.Tensor, optional): edge values in CSR order.
        reduce (str, optional): ``'sum'``, ``'mean'`` or ``'max'``.
        diag (torch.Tensor, optional): the self term, per node or one.
        t_value (torch.Tensor, optional): ``value`` in transpose order, saving
            one gather per backward when the caller caches it.

    Shapes:
        - **input:** x :math:`(N_{src}, F)`, value :math:`(E)`, diag
          :math:`(N_{dst})` or a scalar
        - **output:** :math:`(N_{dst}, F)`
    """
    if isinstance(x, CBSR):
        raise TypeError('pyg_tc: spmm_graph takes dense features (CBSR: cbsr_spmm_graph)')
    return dispatch.aggregate(g, x, value, reduce, diag, t_value, backend='csr')


# ---------------------------------------------------------------------------
# SDDMM


def sddmm_reference(rowptr: Tensor, col: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """out[e] = <a[row(e)], b[col[e]]> for every CSR edge, fp32 accumulation.

    Args:
        rowptr (torch.Tensor): CSR row pointers (rows = targets).
        col (torch.Tensor): source of every edge.
        a (torch.Tensor): target features.
        b (torch.Tensor): source features.

    Shapes:
        - **input:** rowptr :math:`(N_{dst} + 1)`, col :math:`(E)`, a
          :math:`(N_{dst}, F)`, b :math:`(N_{src}, F)`
        - **output:** :math:`(E)` (padding slots of a padded graph: 0)
    """
    acc = acc_dtype(a.dtype)
    E, col = live_edges(rowptr, col)
    row = _rows(rowptr, col.numel())
    out = (a.index_select(0, row).to(acc) * b.index_select(0, col.long()).to(acc)).sum(1).to(a.dtype)
    return pad_edges(out, E)


def _sddmm_backward(s: Any, needs: dict, grad: Tensor) -> dict:
    g = grad.to(acc_dtype(s.a.dtype)).contiguous()
    inv = inverse_perm(s.t_perm) if torch.is_grad_enabled() else s.t_perm
    gt = g[s.t_perm.long()]
    out = {}
    if needs['a']:  # grad_a[i] = sum_e g_e b[col_e]
        out['a'] = spmm_csr(
            s.rowptr,
            s.col,
            g,
            s.b,
            s.units,
            s.heavy_rows,
            s.heavy_ptr,
            None,
            s.num_slots,
            'sum',
            s.t_rowptr,
            s.t_col,
            s.t_perm,
            gt,
            s.t_units,
            s.t_heavy_rows,
            s.t_heavy_ptr,
            s.t_num_slots,
        )
    if needs['b']:  # grad_b[j] = sum_{e: col_e = j} g_e a[row_e]
        out['b'] = spmm_csr(
            s.t_rowptr,
            s.t_col,
            gt,
            s.a,
            s.t_units,
            s.t_heavy_rows,
            s.t_heavy_ptr,
            None,
            s.t_num_slots,
            'sum',
            s.rowptr,
            s.col,
            inv,
            g,
            s.units,
            s.heavy_rows,
            s.heavy_ptr,
            s.num_slots,
        )
    return out


sddmm_csr = Op(
    'sddmm_csr(Tensor col, Tensor a, Tensor b, Tensor units, Tensor rowptr, '
    f'Tensor heavy_rows, Tensor heavy_ptr, int num_slots, {T_GRAPH_ARGS}) -> Tensor',
    reference=sddmm_reference,
    fake=lambda a: a.a.new_empty(a.col.size(0)),
    backward=_sddmm_backward,
)


def check_sddmm(g: CSRGraph, a: Tensor, b: Tensor) -> dict:
    """Validate an SDDMM call: ``a`` one row per target, ``b`` per source."""
    if not isinstance(a, Tensor) or a.dim() != 2 or a.size(0) != g.num_rows:
        raise ValueError(f'pyg_tc: a must be [{g.num_rows}, F] (one row per target node)')
    check_features(b, g, 'b')
    if a.dtype != b.dtype or a.size(1) != b.size(1) or a.device != b.device:
        raise ValueError('pyg_tc: a and b must share dtype, device and width')
    return dict(a=a, b=b)


dispatch.family('sddmm', check_sddmm, features='b')


@dispatch.register('sddmm', 'csr')
def _sddmm_csr(g: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    s, ts = g.sched, g.t_sched
    return sddmm_csr(
        g.col,
        a.contiguous(),
        b.contiguous(),
        s.units,
        g.rowptr,
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
        differentiable=(a, b),
    )


@dispatch.register('sddmm', 'reference')
def _sddmm_reference(g: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    return sddmm_reference(g.rowptr, g.col, a, b)


def sddmm_graph(g: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    """``out[e] = <a[target(e)], b[source(e)]>`` for every edge, in CSR order,
    with the CSR kernel (the reference where no kernel applies).

    Args:
        g (pyg_tc.formats.CSRGraph): the graph (rows = targets).
        a (torch.Tensor): target features.
        b (torch.Tensor): source features.

    Shapes:
        - **input:** a :math:`(N_{dst}, F)`, b :math:`(N_{src}, F)`
        - **output:** :math:`(E)`
    """
    return dispatch.edge_scores(g, a, b, backend='csr')


# ---------------------------------------------------------------------------
# Numerics of the fp16 two-level sum (HalfGNN, docs/half.md)


def half2_two_level_sum(x: Tensor, w: Tensor, batch: int = 8, scale: bool = True) -> Tensor:
    """The half SpMM's two-level sum of one unit of edges, emulated on the CPU
    (the specification of the kernel's half2 path, docs/half.md):
    ``sum_e w[e] * x[e]`` over the edges in order, in batches of ``batch``
    edges (the kernel: 8, from the start of each unit). Within a batch the
    products are summed in ``x``'s dtype (fp16 or bf16) with one rounding per
    fused multiply-add (HFMA2, the weight mirrored into both halves of a
    half2), the weights scaled by a power of two (the batch's largest ``|w|``
    into (1/2, 1]; HalfGNN's discretised scaling generalised to any edge
    weights, so no weight is subnormal in fp16); each batch total is scaled
    back and added to an fp32 accumulator. If any batch total is not finite,
    the whole sum is done again with fp32 products, so no intermediate
    overflows. ``x [E, F]`` fp16 or bf16, ``w [E]``; returns ``[F]`` fp32."""
    E, F = x.shape
    nb = (E + batch - 1) // batch
    pad = nb * batch - E
    xb = torch.cat([x, x.new_zeros(pad, F)]).view(nb, batch, F).double()
    wb = torch.cat([w.double(), w.new_zeros(pad, dtype=torch.float64)]).view(nb, batch)
    if scale:
        s = torch.exp2(torch.ceil(torch.log2(wb.abs().amax(1).clamp(min=1e-300))))
    else:
        s = torch.ones(nb, dtype=torch.float64)
    wh = (wb / s.unsqueeze(1)).to(x.dtype).double()
    part = torch.zeros(nb, F, dtype=torch.float64)
    for k in range(batch):  # a * b + c exact in fp64, rounded once: HFMA2
        part = (wh[:, k : k + 1] * xb[:, k] + part).to(x.dtype).double()
    if not torch.isfinite(part).all():
        return (w.float().unsqueeze(1) * x.float()).sum(0)
    return (s.unsqueeze(1).float() * part.float()).sum(0)
