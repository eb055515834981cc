"""CBSR: the Compressed Balanced Sparse Row feature format of MaxK-GNN.

A :class:`CBSR` holds a feature matrix ``[N, width]`` with exactly ``k``
stored entries per row (the output of :class:`pyg_tc.nn.MaxK`):

* ``values [N, k]`` in the feature dtype (fp32 / fp16 / bf16 / fp64);
* ``indices [N, k]``: the column of every stored value, ``uint8`` when
  ``width <= 256``, ``int16`` otherwise (``width <= 32768``). Columns of one
  row are distinct; the MaxK kernel writes them in ascending order, but no
  consumer relies on the order.

The graph side of the CBSR kernels is the CSR engine's schedule
(:class:`~pyg_tc.formats.csr.Schedule`): its units *are* MaxK-GNN's edge
groups (runs of at most ``chunk`` edges of one row, one warp each; rows above
``chunk`` edges are split and their partial rows reduced in order), so one
format serves the dense and the CBSR kernels (see
:class:`~pyg_tc.transforms.CBSRTransform`).

This module also holds the CPU emulations of the two CBSR kernels, walking the
same units and workspace slots as the CUDA code (tests run them in CI).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .csr import CSRGraph, csr_rows

MAX_WIDTH = 32768  # int16 column indices (0..32767)


def index_dtype(width: int) -> torch.dtype:
    """Column-index dtype for a feature width: uint8 up to 256, int16 above."""
    if width <= 256:
        return torch.uint8
    if width <= MAX_WIDTH:
        return torch.int16
    raise ValueError(f'pyg_tc: CBSR supports feature widths up to {MAX_WIDTH}, got {width}')


class CBSR:
    """Sparse rows with ``k`` stored entries each (see the module doc).

    ``check=True`` validates the indices once (range, distinct within a row:
    the kernels rely on it); :func:`pyg_tc.ops.maxk` builds valid ones and
    skips the check.

    Behaves enough like a ``[N, width]`` tensor for PyG-style code:
    ``size()``, ``shape``, ``dtype``, ``device``, ``dim()``; ``to_dense()``
    (differentiable) gives the dense matrix for everything else. Gradients
    flow through ``values``.
    """

    __slots__ = ('values', 'indices', 'width')

    def __init__(self, values: Tensor, indices: Tensor, width: int, check: bool = True):
        if not isinstance(values, Tensor) or not isinstance(indices, Tensor):
            raise TypeError('pyg_tc: CBSR values and indices must be tensors')
        if values.dim() != 2 or indices.shape != values.shape:
            raise ValueError(f'pyg_tc: CBSR values and indices must both be [N, k]; got '
                             f'{tuple(values.shape)} and {tuple(indices.shape)}')
        width = int(width)
        if indices.dtype != index_dtype(width):
            raise TypeError(f'pyg_tc: CBSR indices for width {width} must be '
                            f'{index_dtype(width)}, got {indices.dtype}')
        if values.size(1) > width:
            raise ValueError(f'pyg_tc: CBSR has k={values.size(1)} entries per row but width {width}')
        if indices.device != values.device:
            raise ValueError('pyg_tc: CBSR values and indices must be on one device')
        self.values, self.indices, self.width = values, indices, width
        if check:
            self.validate()

    # -- tensor-like surface ------------------------------------------------
    @property
    def k(self) -> int:
        return self.values.size(1)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.values.size(0), self.width))

    def size(self, dim: Optional[int] = None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return 2

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def requires_grad(self) -> bool:
        return self.values.requires_grad

    def to(self, *args, **kwargs) -> 'CBSR':
        """Moves / casts the values (indices follow the device only)."""
        values = self.values.to(*args, **kwargs)
        return CBSR(values, self.indices.to(values.device), self.width, check=False)

    def with_values(self, values: Tensor) -> 'CBSR':
        """Same sparsity, new values (e.g. after dropout)."""
        return CBSR(values, self.indices, self.width, check=False)

    def to_dense(self) -> Tensor:
        """The dense ``[N, width]`` matrix (differentiable in ``values``)."""
        out = self.values.new_zeros(self.values.size(0), self.width)
        return out.scatter_(1, self.indices.long(), self.values)  # in place: no copy

    def validate(self) -> 'CBSR':
        """Columns in range and distinct within each row; raises ValueError."""
        idx = self.indices.long()
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.width):
            raise ValueError(f'pyg_tc: CBSR column index out of range [0, {self.width})')
        if idx.numel() and bool((torch.sort(idx, 1)[0].diff(dim=1) == 0).any()):
            raise ValueError('pyg_tc: CBSR row has a repeated column index')
        return self

    def __repr__(self) -> str:
        return (f'CBSR(shape={tuple(self.shape)}, k={self.k}, dtype={self.dtype}, '
                f'index_dtype={self.indices.dtype}, device={self.device})')


# ---------------------------------------------------------------------------
# CPU emulation of the CUDA kernels (same units, same slots, same order of the
# heavy-row reduction). Unwritten rows stay NaN so schedule bugs show.

def _unit_edges(g: CSRGraph):
    u = g.sched.units.long()
    row, start, end, slot = u.unbind(1) if u.numel() else (u.new_zeros(0),) * 4
    lens = end - start
    total = int(lens.sum())
    unit_of_edge = torch.repeat_interleave(torch.arange(u.size(0)), lens, output_size=total)
    pos = start[unit_of_edge] + torch.arange(total) - (torch.cumsum(lens, 0) - lens)[unit_of_edge]
    return row, start, slot, lens, unit_of_edge, pos


def emulate_cbsr_spmm(g: CSRGraph, x: CBSR, value: Optional[Tensor] = None, reduce: str = 'sum',
                      diag: Optional[Tensor] = None) -> Tensor:
    """Emulates the forward SpGEMM: every unit accumulates ``w * values[j]``
    into a private ``width``-wide buffer at ``indices[j]`` (the kernel's
    shared-memory buffer), the first unit of a row adds ``diag * x[row]``,
    and the buffer goes to the output row (scaled for mean) or to the unit's
    workspace slot, reduced per heavy row in slot order."""
    F = x.width
    row, start, slot, lens, unit_of_edge, pos = _unit_edges(g)
    U = row.numel()
    src = g.col.long()[pos]
    vals = x.values.float()[src]
    if value is not None:
        vals = vals * value.float()[pos].unsqueeze(1)
    flat = unit_of_edge.unsqueeze(1) * F + x.indices.long()[src]
    buf = torch.zeros(U * F).index_put_((flat.reshape(-1),), vals.reshape(-1), accumulate=True)
    buf = buf.view(U, F)
    if diag is not None:
        first = start == g.rowptr.long()[row]
        r = row[first]
        d = diag.float().expand(g.num_rows)[r].unsqueeze(1) * x.values.float()[r]
        flat = first.nonzero().flatten().unsqueeze(1) * F + x.indices.long()[r]
        buf = buf.reshape(-1).index_put_((flat.reshape(-1),), d.reshape(-1), accumulate=True).view(U, F)
    out = torch.full((g.num_rows, F), float('nan'))
    direct = slot < 0
    scale = 1.0 / lens[direct].clamp(min=1).float().unsqueeze(1) if reduce == 'mean' else 1.0
    out[row[direct]] = buf[direct] * scale
    s = g.sched
    ws = torch.full((s.num_slots, F), float('nan'))
    ws[slot[~direct]] = buf[~direct]
    hp, hr = s.heavy_ptr.long(), s.heavy_rows.long()
    owner = torch.repeat_interleave(torch.arange(hr.numel()), hp[1:] - hp[:-1], output_size=s.num_slots)
    h = torch.zeros(hr.numel(), F).index_add_(0, owner, ws)
    if reduce == 'mean':
        h = h / (g.rowptr[hr + 1] - g.rowptr[hr]).float().unsqueeze(1)
    out[hr] = h
    return out.to(x.dtype)


def emulate_cbsr_sspmm(g: CSRGraph, grad: Tensor, indices: Tensor, value: Optional[Tensor] = None,
                       reduce: str = 'sum', diag: Optional[Tensor] = None) -> Tensor:
    """Emulates the backward SSpMM (outer product): every unit stages the
    dense gradient row of its target ``i`` (scaled by ``1/deg(i)`` for mean),
    and every edge ``(i, j)`` adds ``w * G[i, indices[j]]`` to row ``j`` of
    the ``[N_src, k]`` result; the first unit of a row adds the diagonal
    term. Returns ``[N_src, k]`` in grad's dtype."""
    row, start, slot, lens, unit_of_edge, pos = _unit_edges(g)
    G = grad.float()
    if reduce == 'mean':
        deg = (g.rowptr[1:] - g.rowptr[:-1]).clamp(min=1).float()
        G = G / deg.unsqueeze(1)
    idx = indices.long()
    src = g.col.long()[pos]
    tgt = row[unit_of_edge]
    contrib = G[tgt].gather(1, idx[src])
    if value is not None:
        contrib = contrib * value.float()[pos].unsqueeze(1)
    out = torch.zeros(indices.size(0), indices.size(1)).index_add_(0, src, contrib)
    if diag is not None:
        first = start == g.rowptr.long()[row]
        r = row[first]
        out.index_add_(0, r, diag.float().expand(g.num_rows)[r].unsqueeze(1) * grad.float()[r].gather(1, idx[r]))
    return out.to(grad.dtype)


def cbsr_spmm_reference(rowptr: Tensor, col: Tensor, value: Optional[Tensor], values: Tensor,
                        indices: Tensor, width: int, diag: Optional[Tensor] = None,
                        reduce: str = 'sum') -> Tensor:
    """Oracle: the dense SpMM of ``to_dense()``, fp32 accumulation."""
    from ..ops._registry import spmm_reference
    dense = values.new_zeros(values.size(0), width).scatter(1, indices.long(), values)
    return spmm_reference(rowptr, col, value, dense, diag, reduce)


def cbsr_sspmm_reference(rowptr: Tensor, col: Tensor, value: Optional[Tensor], grad: Tensor,
                         indices: Tensor, diag: Optional[Tensor] = None,
                         reduce: str = 'sum') -> Tensor:
    """Oracle: ``(A^T (s * grad) + diag * grad)`` sampled at ``indices``,
    with ``s = 1/deg`` for mean (diag needs a square adjacency)."""
    acc = torch.float64 if grad.dtype == torch.float64 else torch.float32
    G = grad.to(acc)
    if reduce == 'mean':
        deg = (rowptr[1:] - rowptr[:-1]).clamp(min=1).to(acc)
        G = G / deg.unsqueeze(1)
    idx = indices.long()
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
