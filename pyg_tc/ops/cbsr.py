"""MaxK-GNN: the top-k nonlinearity and the CBSR SpGEMM / SSpMM.

* ``maxk_select(x, k)``: the ``k`` largest entries of every row as a
  :class:`~pyg_tc.formats.CBSR` (values, uint8 / int16 column indices);
* ``cbsr_spmm``: forward SpGEMM ``out[i] = reduce_{e: i <- j} w_e x[j]
  (+ diag_i x_i)`` with CBSR ``x`` and a dense output;
* ``cbsr_sspmm``: its adjoint, the backward SSpMM ``A^T G`` sampled at the
  CBSR pattern (the gradient of the CBSR values).

The graph side is the CSR engine's schedule (its units are MaxK-GNN's edge
groups). Kernels: ``kernels/cbsr/`` (the module is named after the
format: ``pyg_tc.ops.maxk`` is the nonlinearity). The CPU emulations of the kernels
(:mod:`pyg_tc.testing`) walk the same units and workspace slots as the CUDA code.
"""

from __future__ import annotations

import operator
from typing import Any, Optional

import torch
from torch import Tensor

from .._library import SCHEDULE_ARGS, Op
from ..formats.cbsr import CBSR, index_dtype
from ..formats.csr import CSRGraph, csr_rows
from . import dispatch
from .csr import FLOATS, _rows, acc_dtype, live_edges, spmm_reference

MAXK_KERNEL_WIDTH = 1024  # widest row the selection kernel holds in registers
CBSR_KERNEL_WIDTH = 4096  # widest shared-memory row buffer of the CBSR kernels


# ---------------------------------------------------------------------------
# References (CPU implementations and test oracles)


def maxk_reference(x: Tensor, k: int):
    """The k largest entries of every row (torch.sort's order: NaN largest,
    ties in column order), with the columns ascending; indices uint8 for
    widths <= 256, int16 above.

    Args:
        x (torch.Tensor): the rows.
        k (int): entries kept per row (``1 <= k < F``).

    Shapes:
        - **input:** x :math:`(N, F)`
        - **output:** values :math:`(N, k)` in ``x``'s dtype, column indices
          :math:`(N, k)`
    """
    F = x.size(1)
    top = torch.sort(x, dim=1, descending=True, stable=True)[1][:, :k]
    cols = torch.sort(top, dim=1)[0]
    return x.gather(1, cols), cols.to(index_dtype(F))


def cbsr_spmm_reference(
    rowptr: Tensor,
    col: Tensor,
    value: Optional[Tensor],
    values: Tensor,
    indices: Tensor,
    width: int,
    diag: Optional[Tensor] = None,
    reduce: str = 'sum',
) -> Tensor:
    """Oracle: the dense SpMM of ``to_dense()``, fp32 accumulation.

    Args:
        rowptr, col, value, diag, reduce: as in
            :func:`~pyg_tc.ops.spmm_reference`.
        values (torch.Tensor): the CBSR features' kept values.
        indices (torch.Tensor): their columns.
        width (int): the dense width.

    Shapes:
        - **input:** values and indices :math:`(N_{src}, k)`
        - **output:** :math:`(N_{dst}, W)`, ``W = width``
    """
    dense = values.new_zeros(values.size(0), width).scatter(1, indices.long(), values)
    return spmm_reference(rowptr, col, value, dense, diag, reduce)


def cbsr_sspmm_reference(
    rowptr: Tensor,
    col: Tensor,
    value: Optional[Tensor],
    grad: Tensor,
    indices: Tensor,
    diag: Optional[Tensor] = None,
    reduce: str = 'sum',
) -> Tensor:
    """Oracle: ``(A^T (s * grad) + diag * grad)`` sampled at ``indices``,
    with ``s = 1/deg`` for mean (diag needs a square adjacency).

    Args:
        rowptr, col, value, diag, reduce: as in
            :func:`~pyg_tc.ops.spmm_reference`.
        grad (torch.Tensor): the output's gradient.
        indices (torch.Tensor): the CBSR columns the gradient is sampled at.

    Shapes:
        - **input:** grad :math:`(N_{dst}, F)`, indices :math:`(N_{src}, k)`
        - **output:** :math:`(N_{src}, k)`
    """
    acc = torch.float64 if grad.dtype == torch.float64 else torch.float32
    G = grad.to(acc)
    if reduce == 'mean':
        deg = (rowptr[1:] - rowptr[:-1]).clamp(min=1).to(acc)
        G = G / deg.unsqueeze(1)
    idx = indices.long()
    _, col, value = live_edges(rowptr, col, value)
    tgt = csr_rows(rowptr).long()
    c = col.long()
    contrib = G.index_select(0, tgt).gather(1, idx.index_select(0, c))
    if value is not None:
        contrib = contrib * value.to(acc).unsqueeze(1)
    out = torch.zeros(indices.size(0), indices.size(1), dtype=acc, device=grad.device)
    # index_put_ with accumulate is deterministic under
    # torch.use_deterministic_algorithms(True) (this is the CUDA fallback then).
    out.index_put_((c,), contrib, accumulate=True)
    if diag is not None:
        out = out + diag.to(acc).view(-1, 1) * grad.to(acc).gather(1, idx)
    return out.to(grad.dtype)


# ---------------------------------------------------------------------------
# Ops and autograd


def _maxk_backward(a: Any, needs: dict, grad_values: Optional[Tensor], grad_indices: Any) -> dict:
    if grad_values is None:
        return {}
    gx = grad_values.new_zeros(grad_values.size(0), a.width)
    return {'x': gx.scatter_(1, a.indices.long(), grad_values)}


maxk_select = Op(
    'maxk_select(Tensor x, int k) -> (Tensor values, Tensor indices)',
    reference=maxk_reference,
    fake=lambda a: (a.x.new_empty(a.x.size(0), a.k), a.x.new_empty(a.x.size(0), a.k, dtype=index_dtype(a.x.size(1)))),
    backward=_maxk_backward,
    save=('indices',),
    consts=lambda a: {'width': a.x.size(1)},
    materialize_grads=False,
)


def _sspmm(a: Any, grad: Tensor) -> Tensor:
    """The SSpMM op, or its deterministic reference on CUDA when
    torch.use_deterministic_algorithms(True) (the kernel uses global
    atomics: declared below, chosen by dispatch)."""
    return dispatch.run('cbsr_sspmm', None, a, grad)


def _edge_grads(a: Any, grad: Tensor, need_value: bool, need_diag: bool):
    """Gradients of the SpGEMM for edge weights and the diagonal, by gathers
    (E x k temporaries: edge-weight gradients are not on the fast path)."""
    acc = acc_dtype(a.values.dtype)
    G = grad.to(acc)
    if a.reduce == 'mean':
        deg = (a.rowptr[1:] - a.rowptr[:-1]).clamp(min=1).to(acc)
        G = G / deg.unsqueeze(1)
    idx = a.indices.long()
    gv = gd = None
    if need_value:
        tgt = _rows(a.rowptr, a.col.numel())
        c = a.col.long()
        gv = (a.values.to(acc).index_select(0, c) * G.index_select(0, tgt).gather(1, idx.index_select(0, c))).sum(1)
        # a padded graph's padding slots (past rowptr[-1]) get 0
        gv = torch.where(torch.arange(gv.numel(), device=gv.device) < a.rowptr[-1], gv, 0).to(a.value.dtype)
    if need_diag:
        gd = (a.values.to(acc) * G.gather(1, idx)).sum(1)
        gd = (gd.sum().view(1) if a.diag.numel() == 1 else gd).to(a.diag.dtype)
    return gv, gd


def _cbsr_spmm_backward(a: Any, needs: dict, grad: Tensor) -> dict:
    grad = grad.contiguous()
    out = {}
    if needs['values']:
        out['values'] = _sspmm(a, grad)
    need_v = needs['value'] and a.value is not None
    need_d = needs['diag'] and a.diag is not None
    if need_v or need_d:
        out['value'], out['diag'] = _edge_grads(a, grad, need_v, need_d)
    return out


cbsr_spmm = Op(
    'cbsr_spmm(Tensor rowptr, Tensor col, Tensor? value, Tensor values, Tensor indices, '
    f'int width, {SCHEDULE_ARGS}, Tensor? diag, str reduce) -> Tensor',
    reference=cbsr_spmm_reference,
    fake=lambda a: a.values.new_empty(a.rowptr.size(0) - 1, a.width),
    backward=_cbsr_spmm_backward,
)


def _cbsr_sspmm_backward(a: Any, needs: dict, h: Tensor) -> dict:
    """SSpMM and SpGEMM are adjoint: the gradient for the dense input is the
    SpGEMM of the incoming CBSR-shaped gradient."""
    if (needs['value'] and a.value is not None) or (needs['diag'] and a.diag is not None):
        raise NotImplementedError(
            'pyg_tc: second derivatives of the CBSR SpGEMM with respect to '
            'edge weights or the diagonal are not implemented'
        )
    if not needs['grad']:
        return {}
    return {
        'grad': cbsr_spmm(
            a.rowptr,
            a.col,
            a.value,
            h.contiguous(),
            a.indices,
            a.width,
            a.units,
            a.heavy_rows,
            a.heavy_ptr,
            a.num_slots,
            a.diag,
            a.reduce,
        )
    }


cbsr_sspmm = Op(
    'cbsr_sspmm(Tensor rowptr, Tensor col, Tensor? value, Tensor grad, Tensor indices, '
    f'{SCHEDULE_ARGS}, Tensor? diag, str reduce) -> Tensor',
    reference=cbsr_sspmm_reference,
    fake=lambda a: a.grad.new_empty(a.indices.size(0), a.indices.size(1)),
    backward=_cbsr_sspmm_backward,
    save=('rowptr', 'col', 'value', 'indices', 'units', 'heavy_rows', 'heavy_ptr', 'diag'),
    consts=lambda a: {'width': a.grad.size(1)},
)


dispatch.family('cbsr_sspmm', lambda g, a, grad: dict(a=a, grad=grad), features='grad', auto='cbsr')


# (no kernel check: with no kernel loaded the op runs its reference on CUDA itself)
@dispatch.register('cbsr_sspmm', 'cbsr', needs_kernel=False, deterministic=False)
def _sspmm_kernel(g: None, a: Any, grad: Tensor) -> Tensor:
    return cbsr_sspmm(
        a.rowptr, a.col, a.value, grad, a.indices, a.units, a.heavy_rows, a.heavy_ptr, a.num_slots, a.diag, a.reduce
    )


@dispatch.register('cbsr_sspmm', 'cbsr_reference')
def _sspmm_reference(g: None, a: Any, grad: Tensor) -> Tensor:
    return cbsr_sspmm_reference(a.rowptr, a.col, a.value, grad, a.indices, a.diag, a.reduce)


# ---------------------------------------------------------------------------
# Front-ends


def check_k(k: Any, who: str = 'pyg_tc') -> int:
    """MaxK's ``k`` as a Python int: any integral value (int, numpy integer,
    0-d integer tensor), at least 1; bools and floats are rejected.

    Args:
        k: the value to check.
        who (str, optional): the name the error messages start with.
    """
    if isinstance(k, bool) or (isinstance(k, Tensor) and (k.dim() or k.is_floating_point())):
        raise TypeError(f'{who}: k must be an int, got {type(k).__name__}')
    try:
        k = operator.index(k)
    except TypeError:
        raise TypeError(f'{who}: k must be an int, got {type(k).__name__}') from None
    if k < 1:
        raise ValueError(f'{who}: k must be >= 1, got {k}')
    return k


def maxk(x: Tensor, k: int) -> CBSR:
    """MaxK nonlinearity: the ``k`` largest entries of every row of ``x``
    (``[N, F]``), as a :class:`~pyg_tc.formats.CBSR` (values in x's dtype,
    column indices ascending). Order as ``torch.sort``: NaN counts as
    largest; ties at the k-th value keep the lowest columns. ``k >= F`` keeps
    every entry. Gradients flow to the kept entries only.

    CUDA: one-pass selection kernel for widths up to 1024 (fp32/fp16/bf16);
    wider rows, float64 and CPU use the reference (``torch.sort``).

    Args:
        x (torch.Tensor): the rows (floating point).
        k (int): entries kept per row.

    Shapes:
        - **input:** x :math:`(N, F)`
        - **output:** CBSR values and indices :math:`(N, K)` with ``K = min(k, F)``,
          width :math:`F`
    """
    k = check_k(k)
    if not isinstance(x, Tensor) or x.dim() != 2 or x.dtype not in FLOATS:
        raise TypeError('pyg_tc: maxk needs a 2-D floating-point tensor [N, F]')
    F = x.size(1)
    idt = index_dtype(F)
    if k >= F:  # keeps everything: the identity, in CBSR form
        cols = torch.arange(F, device=x.device, dtype=idt).expand(x.size(0), F).contiguous()
        return CBSR(x, cols, F, check=False)
    values, indices = dispatch.run('maxk', None, x, k)
    return CBSR(values, indices, F, check=False)


dispatch.family('maxk', lambda g, x, k: dict(x=x, k=k), auto='select')


@dispatch.register('maxk', 'select', max_width=MAXK_KERNEL_WIDTH)
def _maxk_select(g: None, x: Tensor, k: int):
    return maxk_select(x.contiguous(), k, differentiable=(x,))


@dispatch.register('maxk', 'reference')
def _maxk_reference(g: None, x: Tensor, k: int):
    return maxk_reference(x, k)


@dispatch.register('spmm', 'cbsr', reduces=('sum', 'mean'), max_width=CBSR_KERNEL_WIDTH)
def _cbsr(
    g: CSRGraph, x: CBSR, value: Optional[Tensor], reduce: str, diag: Optional[Tensor], t_value: Optional[Tensor]
) -> Tensor:
    s = g.sched
    return cbsr_spmm(
        g.rowptr,
        g.col,
        value,
        x.values.contiguous(),
        x.indices.contiguous(),
        x.width,
        s.units,
        s.heavy_rows,
        s.heavy_ptr,
        s.num_slots,
        diag,
        reduce,
        differentiable=(x.values, value, diag),
    )


@dispatch.register('spmm', 'cbsr_reference', reduces=('sum', 'mean'))
def _cbsr_reference(
    g: CSRGraph, x: CBSR, value: Optional[Tensor], reduce: str, diag: Optional[Tensor], t_value: Optional[Tensor]
) -> Tensor:
    return cbsr_spmm_reference(g.rowptr, g.col, value, x.values, x.indices, x.width, diag, reduce)


def cbsr_spmm_graph(
    g: CSRGraph, x: CBSR, value: Optional[Tensor] = None, reduce: str = 'sum', diag: Any = None
) -> Tensor:
    """SpGEMM ``out[i] = reduce_{e: i <- j} value[e] * x[j] (+ diag[i] * x[i])``
    with CBSR features ``x``; dense ``[num_dst, x.width]`` output in x's
    dtype, fp32 accumulation. Backward: the SSpMM kernel for ``x.values``
    (only the kept entries get gradients), gathers for edge weights and diag.

    Args:
        g (pyg_tc.formats.CSRGraph): the graph (rows = targets).
         x (pyg_tc.formats.CBSR): source features.
        value (torch.Tensor, optional): edge values in CSR order.
        reduce (str, optional): ``'sum'`` or ``'mean'`` (diag with 'sum' only).
        diag (torch.Tensor or float, optional): the self term.

    Shapes:
        - **input:** x values :math:`(N_{src}, k)`, value :math:`(E)`
        - **output:** :math:`(N_{dst}, W)`, ``W = x.width``
    """
    if not isinstance(x, CBSR):
        raise TypeError(f'pyg_tc: expected CBSR features, got {type(x).__name__}')
    return dispatch.aggregate(g, x, value, reduce, diag, backend='csr')
