"""TC-GNN: tensor-core SpMM / SDDMM over SGT blocks, and the rules that size
their launches (warps per CTA).

* ``sgt_spmm``: ``out[i] = sum_cells(i, j) cell_val * x[j] (+ diag[i] x[i])``;
* ``sgt_sddmm``: ``<a[row], b[col]>`` for every cell.

Each takes the forward SGT direction (units, columns, masks, cell offsets,
split windows), then the transpose (``t_*``) and the transpose-cell ->
forward-cell map ``t_cell``: the backward of each op is the other op, on
the forward SGT or its transpose. Kernels: ``kernels/sgt/``.

Precision (decision, docs/sgt.md): fp32 inputs follow PyTorch's matmul
setting: ``torch.get_float32_matmul_precision() == 'highest'`` (PyTorch's
default) runs 3xTF32 (split operands, fp32-accurate); ``'high'`` or
``'medium'`` runs plain TF32 (inputs truncated to a 10-bit mantissa by the
MMA, as the published TC-GNN; about 1e-3 relative error). fp16/bf16 inputs
run the k16 half MMA with the edge values split into hi + lo halves, so the
weights keep about fp32 precision. fp32 accumulation everywhere; float64
runs the pure-torch reference.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from .._library import Op
from ..formats.csr import CSRGraph, inverse_perm, stale_error
from ..formats.sgt import SGT, SGTDir, cell_coords
from . import dispatch
from .csr import acc_dtype, diag_grad, sddmm_graph, spmm_graph


def sgt_of(g: CSRGraph) -> SGT:
    """The graph's SGT (attached by :class:`~pyg_tc.transforms.SGTTransform`),
    built on the graph's device on first use and kept in its cache.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph.
    """
    sgt = g.cache.sgt
    if sgt is None:
        sgt = g.cache.sgt = SGT.build(g)
    elif sgt.num_edges != g.num_edges or sgt.device != g.device:
        raise stale_error(
            'SGT', {'edges': (sgt.num_edges, g.num_edges), 'device': (sgt.device, g.device)}, 're-apply SGTTransform'
        )
    return sgt


# ---------------------------------------------------------------------------
# References (CPU implementations and test oracles)


def sgt_spmm_reference(
    units: Tensor, cols: Tensor, mask: Tensor, cell_val: Tensor, x: Tensor, diag: Optional[Tensor], num_rows: int
) -> Tensor:
    """Pure-torch SpMM over the cell list (fp32 accumulation, fp64 for fp64):
    the CPU implementation of the op and the oracle of the kernel tests."""
    r, c = cell_coords(units, cols, mask)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    msg = x.index_select(0, c).to(acc) * cell_val.to(acc).unsqueeze(1)
    out = torch.zeros(num_rows, x.size(1), dtype=acc, device=x.device).index_add_(0, r, msg)
    if diag is not None:
        out = out + diag.to(acc).view(-1, 1) * x.to(acc)
    return out.to(x.dtype)


def sgt_sddmm_reference(units: Tensor, cols: Tensor, mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``<a[row], b[col]>`` for every cell, fp32 accumulation."""
    r, c = cell_coords(units, cols, mask)
    acc = torch.float64 if a.dtype == torch.float64 else torch.float32
    return (a.index_select(0, r).to(acc) * b.index_select(0, c).to(acc)).sum(1).to(a.dtype)


# ---------------------------------------------------------------------------
# Ops and autograd. Argument groups of a direction: (units, cols, mask,
# cell_ptr, heavy, heavy_ptr) + num_slots; the transpose's are prefixed t_.

_DIR = ('units', 'cols', 'mask', 'cell_ptr', 'heavy', 'heavy_ptr')


def _dirs(a: Any):
    """(forward group, transpose group) of saved arguments, 7 entries each."""
    fwd = tuple(getattr(a, n) for n in _DIR) + (a.num_slots,)
    bwd = tuple(getattr(a, 't_' + n) for n in _DIR) + (a.t_num_slots,)
    return fwd, bwd


def _swap(a: Any):
    """The transpose direction's argument groups: (its own, the forward's as
    its transpose, the map of its transpose cells = forward cells)."""
    fwd, bwd = _dirs(a)
    inv = inverse_perm(a.t_cell) if torch.is_grad_enabled() else a.t_cell
    return bwd, fwd, inv


def _spmm_backward(a: Any, needs: dict, grad: Tensor) -> dict:
    grad = grad.contiguous()
    fwd, bwd = _dirs(a)
    out = {}
    if needs['x']:
        tb, tf, inv = _swap(a)
        out['x'] = sgt_spmm(*tb, a.cell_val[a.t_cell.long()], grad, a.diag, a.x.size(0), a.precision, a.warps, *tf, inv)
    if needs['cell_val']:
        out['cell_val'] = sgt_sddmm(*fwd, grad, a.x, a.cell_val.numel(), a.precision, a.warps, *bwd, a.t_cell).to(
            a.cell_val.dtype
        )
    if needs['diag'] and a.diag is not None:
        out['diag'] = diag_grad(a.diag, grad, a.x)
    return out


def _sddmm_backward(a: Any, needs: dict, grad: Tensor) -> dict:
    g = grad.to(acc_dtype(a.a.dtype)).contiguous()
    fwd, bwd = _dirs(a)
    out = {}
    if needs['a']:  # grad_a[i] = sum_cells g * b[col]
        out['a'] = sgt_spmm(*fwd, g, a.b, None, a.a.size(0), a.precision, a.warps, *bwd, a.t_cell)
    if needs['b']:  # grad_b[j] = sum_cells g * a[row], on the transpose
        tb, tf, inv = _swap(a)
        out['b'] = sgt_spmm(*tb, g[a.t_cell.long()], a.a, None, a.b.size(0), a.precision, a.warps, *tf, inv)
    return out


_GROUP = 'Tensor units, Tensor cols, Tensor mask, Tensor cell_ptr, Tensor heavy, Tensor heavy_ptr, int num_slots'
_T_GROUP = (
    'Tensor t_units, Tensor t_cols, Tensor t_mask, Tensor t_cell_ptr, Tensor t_heavy, '
    'Tensor t_heavy_ptr, int t_num_slots, Tensor t_cell'
)

sgt_spmm = Op(
    f'sgt_spmm({_GROUP}, Tensor cell_val, Tensor x, Tensor? diag, int num_rows, int precision, '
    f'int warps, {_T_GROUP}) -> Tensor',
    reference=sgt_spmm_reference,
    fake=lambda a: a.x.new_empty(a.num_rows, a.x.size(1)),
    backward=_spmm_backward,
)

sgt_sddmm = Op(
    f'sgt_sddmm({_GROUP}, Tensor a, Tensor b, int num_cells, int precision, int warps, {_T_GROUP}) -> Tensor',
    reference=sgt_sddmm_reference,
    fake=lambda a: a.a.new_empty(a.num_cells),
    backward=_sddmm_backward,
)


# ---------------------------------------------------------------------------
# Launch rules


def precision_of(dtype: torch.dtype) -> int:
    """1 = fp32-accurate (3xTF32 / split half weights), 0 = plain TF32."""
    if dtype == torch.float32:
        return 1 if torch.get_float32_matmul_precision() == 'highest' else 0
    return 1


# SpMM warps per unit (warps_for): below SPMM_COOP_WARPS (unit, feature
# slice) pairs 8 warps share each unit (about 8 warps per SM of an H200
# otherwise); above, warps are added until about SPMM_FILL_WARPS are started
# (two waves of an H200's 132 SMs x 28 resident warps).
SPMM_COOP_WARPS = 1024
SPMM_FILL_WARPS = 8192


def warps_for(s: SGT, width: int, dtype: torch.dtype, op: str = 'spmm') -> int:
    """Warps per unit (the sweep behind these rules: docs/sgt.md).

    * SpMM with fewer than ``SPMM_COOP_WARPS`` (unit, feature slice) pairs:
      8 warps share each unit.
    * otherwise enough warps per unit to start about ``SPMM_FILL_WARPS``
      warps (a power of two, at most 8), but no more than leave each warp 8
      blocks (two stages).
    * SDDMM: one CTA per unit, 4 warps when there are few units, two warps
      for half inputs wider than 32 (the k16 MMA walks block pairs).

    With one warp per unit the SpMM's CTA holds four units, each over feature
    slices of up to 32 elements."""
    u = s.fwd.sched.units
    if u.numel() == 0:
        return 1
    U = u.size(0)
    if op == 'spmm':
        pairs = U * max(1, -(-width // 32))
        if pairs < SPMM_COOP_WARPS:
            return 8
        w, blocks = 1, s.fwd.num_blocks / U
        while w < 8 and pairs * w < SPMM_FILL_WARPS and blocks >= 8 * (2 * w):
            w *= 2
        return w
    ctas = U * max(1, (width + 63) // 64)
    if ctas < 4 * 132:
        return 4
    return 2 if (dtype != torch.float32 and width > 32) else 1


def _dir(d: SGTDir):
    return (d.sched.units, d.cols, d.mask, d.cell_ptr, d.sched.heavy_rows, d.sched.heavy_ptr, d.sched.num_slots)


# ---------------------------------------------------------------------------
# Cell-level calls and the dispatch implementations


def check_spmm_cells(
    g: CSRGraph, x: Tensor, cell_val: Tensor, diag: Optional[Tensor] = None, warps: Optional[int] = None
) -> dict:
    """A cell-level SpMM call (family ``'sgt_spmm_cells'``): one value per
    cell of the graph's SGT (built on first use), cast to the accumulation
    dtype."""
    s = sgt_of(g)
    if cell_val.numel() != s.num_cells:
        raise ValueError(f'pyg_tc: expected {s.num_cells} cell values, got {cell_val.numel()}')
    return dict(x=x, cell_val=cell_val.to(acc_dtype(x.dtype)), diag=diag, warps=warps)


def check_sddmm_cells(g: CSRGraph, a: Tensor, b: Tensor, warps: Optional[int] = None) -> dict:
    """A cell-level SDDMM call (family ``'sgt_sddmm_cells'``): the graph's
    SGT built on first use."""
    sgt_of(g)
    return dict(a=a, b=b, warps=warps)


dispatch.family('sgt_spmm_cells', check_spmm_cells)
dispatch.family('sgt_sddmm_cells', check_sddmm_cells, features='a')


@dispatch.register('sgt_spmm_cells', 'sgt', reduces=('sum',))
def _spmm_cells(g: CSRGraph, x: Tensor, cell_val: Tensor, diag: Optional[Tensor], warps: Optional[int]) -> Tensor:
    s = sgt_of(g)
    w = warps if warps is not None else warps_for(s, x.size(1), x.dtype)
    return sgt_spmm(
        *_dir(s.fwd),
        cell_val,
        x.contiguous(),
        diag,
        g.num_rows,
        precision_of(x.dtype),
        w,
        *_dir(s.bwd),
        s.t_cell,
        differentiable=(x, cell_val, diag),
    )


@dispatch.register('sgt_spmm_cells', 'sgt_reference', reduces=('sum',))
def _spmm_cells_reference(
    g: CSRGraph, x: Tensor, cell_val: Tensor, diag: Optional[Tensor], warps: Optional[int]
) -> Tensor:
    d = sgt_of(g).fwd
    return sgt_spmm_reference(d.sched.units, d.cols, d.mask, cell_val, x, diag, g.num_rows)


@dispatch.register('sgt_sddmm_cells', 'sgt', reduces=('sum',))
def _sddmm_cells(g: CSRGraph, a: Tensor, b: Tensor, warps: Optional[int]) -> Tensor:
    s = sgt_of(g)
    w = warps if warps is not None else warps_for(s, a.size(1), a.dtype, 'sddmm')
    return sgt_sddmm(
        *_dir(s.fwd),
        a.contiguous(),
        b.contiguous(),
        s.num_cells,
        precision_of(a.dtype),
        w,
        *_dir(s.bwd),
        s.t_cell,
        differentiable=(a, b),
    )


@dispatch.register('sgt_sddmm_cells', 'sgt_reference', reduces=('sum',))
def _sddmm_cells_reference(g: CSRGraph, a: Tensor, b: Tensor, warps: Optional[int]) -> Tensor:
    d = sgt_of(g).fwd
    return sgt_sddmm_reference(d.sched.units, d.cols, d.mask, a, b)


def sgt_spmm_cells(
    g: CSRGraph, x: Tensor, cell_val: Tensor, diag: Optional[Tensor] = None, warps: Optional[int] = None
) -> Tensor:
    """``out[i] = sum_cells(i, j) cell_val * x[j] (+ diag[i] x[i])`` on tensor
    cores; ``cell_val`` in forward cell order. Differentiable in x,
    cell_val and diag. (Arguments as checked by the 'spmm' family; where no
    kernel applies, e.g. float64 on a GPU, the reference runs.)

    Args:
        g (pyg_tc.formats.CSRGraph): the graph (with its SGT, :func:`sgt_of`).
        x (torch.Tensor): source features.
        cell_val (torch.Tensor): one value per SGT cell, forward cell order.
        diag (torch.Tensor, optional): the self term.
        warps (int, optional): warps per block (default: tuned per width).

    Shapes:
        - **input:** x :math:`(N_{src}, F)`, cell_val :math:`(C)` (``C`` cells)
        - **output:** :math:`(N_{dst}, F)`
    """
    return dispatch.run('sgt_spmm_cells', g, x, cell_val, diag, warps, backend='sgt')


def sgt_sddmm_cells(g: CSRGraph, a: Tensor, b: Tensor, warps: Optional[int] = None) -> Tensor:
    """``<a[row], b[col]>`` for every cell (forward cell order), on tensor cores.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph (with its SGT).
        a (torch.Tensor): target features.
        b (torch.Tensor): source features.
        warps (int, optional): warps per block (default: tuned per width).

    Shapes:
        - **input:** a :math:`(N_{dst}, F)`, b :math:`(N_{src}, F)`
        - **output:** one value per cell
    """
    return dispatch.run('sgt_sddmm_cells', g, a, b, warps, backend='sgt')


@dispatch.register('spmm', 'sgt', reduces=('sum', 'mean'))
def _spmm(
    g: CSRGraph, x: Tensor, value: Optional[Tensor], reduce: str, diag: Optional[Tensor], t_value: Optional[Tensor]
) -> Tensor:
    if reduce == 'mean':  # the edge values scaled by 1 / in-degree; diag stays outside the mean
        inv = 1.0 / g.degree().clamp(min=1).to(acc_dtype(x.dtype))
        scale = g.per_edge(inv)
        value = scale if value is None else value * scale
    # (choose() picked 'sgt' for these features: its kernel takes them, so no second choice)
    return _spmm_cells(g, **check_spmm_cells(g, x, sgt_of(g).cell_values(value), diag))


@dispatch.register('sddmm', 'sgt', reduces=('sum',))
def _sddmm(g: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    return sgt_of(g).edge_values(_sddmm_cells(g, a, b, None))


def sgt_spmm_graph(
    g: CSRGraph, x: Tensor, value: Optional[Tensor] = None, reduce: str = 'sum', diag: Optional[Tensor] = None
) -> Tensor:
    """:func:`pyg_tc.ops.spmm_graph` on tensor cores: edge values in CSR order
    (duplicate edges summed into their cell), ``reduce`` 'sum' or 'mean'
    (the edge values scaled by 1 / in-degree; ``diag`` stays outside the
    mean, as on the CSR path).

    Args:
        g, x, value, reduce, diag: as in :func:`pyg_tc.ops.spmm_graph`.

    Shapes:
        - **input:** x :math:`(N_{src}, F)`, value :math:`(E)`
        - **output:** :math:`(N_{dst}, F)`
    """
    return dispatch.aggregate(g, x, value, reduce, diag, backend='sgt')


def sgt_sddmm_graph(g: CSRGraph, a: Tensor, b: Tensor) -> Tensor:
    """:func:`pyg_tc.ops.sddmm_graph` on tensor cores (per edge, CSR order).

    Args:
        g, a, b: as in :func:`pyg_tc.ops.sddmm_graph`.

    Shapes:
        - **input:** a :math:`(N_{dst}, F)`, b :math:`(N_{src}, F)`
        - **output:** :math:`(E)`
    """
    return dispatch.edge_scores(g, a, b, backend='sgt')


def _candidates(op: str):
    """What ``'auto'`` times for ``op``: the CSR kernel against the
    tensor-core kernel, on random features (cell values precomputed, as a
    layer with a cached normalisation runs them)."""

    def make(g: CSRGraph, width: int, dtype: torch.dtype, gen: torch.Generator) -> dict:
        b = torch.randn(g.num_cols, width, device=g.device, dtype=dtype, generator=gen)
        if op == 'sddmm':
            a = torch.randn(g.num_rows, width, device=g.device, dtype=dtype, generator=gen)
            return {'csr': lambda: sddmm_graph(g, a, b), 'sgt': lambda: sgt_sddmm_cells(g, a, b)}
        w = torch.rand(g.num_edges, device=g.device, generator=gen)
        cells = sgt_of(g).cell_values(w)
        return {'csr': lambda: spmm_graph(g, b, w), 'sgt': lambda: sgt_spmm_cells(g, b, cells)}

    return make


dispatch.tunable('spmm', _candidates('spmm'))
dispatch.tunable('sddmm', _candidates('sddmm'))
